//go:build !linux

package catalog

import "github.com/gpuwarden/gpuwarden"

// hugePageOffers sizes the tests' slices as on Linux.
const hugePageOffers = 10_000

// adviseHugePages is Linux's transparent huge page advice; elsewhere the
// kernel is left to its defaults.
func adviseHugePages([]gpuwarden.Offer) {}
