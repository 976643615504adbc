//go:build !unix

package canary

import "os/exec"

// killGroupOnCancel leaves exec's default, killing the child alone, where
// there are no process groups.
func killGroupOnCancel(*exec.Cmd) {}
