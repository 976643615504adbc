//go:build !linux

package catalog

import "github.com/gpuwarden/gpuwarden"

// adviseHugePages is Linux's transparent huge page advice; elsewhere the
// kernel is left to its defaults.
func adviseHugePages([]gpuwarden.Offer) {}
