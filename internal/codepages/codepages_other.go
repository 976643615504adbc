//go:build !linux

package codepages

// Drop is Linux's; elsewhere the binary's pages are left to the kernel.
func Drop() int { return 0 }
