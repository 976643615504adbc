// Package catalog provides the prices gpuwarden ranks offers with: a dated
// snapshot built into the binary (the GPU rows of SkyPilot's v8 catalogs,
// egress tiers with their billing unit, storage rates, the GPU table and a
// region → country table) and
// importers for the price files users bring: gpuwarden's own prices.csv,
// SkyPilot's catalog vms.csv and dstack's gpuhunt CSV.
//
// Every offer keeps its source and as_of, so that a figure can be checked
// and a stale one flagged (Stale, PriceNotes). Importers are strict about what they read
// (the first bad cell stops the import with NAME:LINE:COL) and lenient about
// what they skip (CPU rows, TPUs), which they report as warnings; a message
// quotes at most 80 characters of any cell or header.
//
// KnownNames tells a typo in a GPU, provider or region name ("H1OO") from a
// name that is right but matches no offer, from the built-in tables and the
// offers a catalog holds.
package catalog
