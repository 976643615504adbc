package catalog

import (
	"os"

	"github.com/gpuwarden/gpuwarden"
)

// Load builds the catalog the planner prices with: the embedded snapshot's
// offers when withEmbedded is set, followed by the offers of each file in
// order. Egress tiers, storage rates and the GPU table always come from the
// snapshot, since no importer reads them and a plan without them cannot
// price egress or size VRAM. Warnings are prefixed with the file they are
// about. A file that cannot be opened is ENotFound; a bad one stops the load
// with its EInvalid error.
func Load(files []string, withEmbedded bool) (*gpuwarden.Catalog, error) {
	snap, err := Embedded()
	if err != nil {
		return nil, err
	}
	cat := &gpuwarden.Catalog{Egress: snap.Egress, Storage: snap.Storage, GPUs: snap.GPUs}
	if withEmbedded {
		cat.Offers = snap.Offers
		for _, w := range snap.Warnings {
			cat.Warnings = append(cat.Warnings, embeddedPrices+": "+w)
		}
	}
	for _, name := range files {
		offers, warns, err := readFile(name)
		if err != nil {
			return nil, err
		}
		cat.Offers = append(cat.Offers, offers...)
		for _, w := range warns {
			cat.Warnings = append(cat.Warnings, name+": "+w)
		}
	}
	return cat, nil
}

func readFile(name string) ([]gpuwarden.Offer, []string, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, nil, &gpuwarden.Error{Code: gpuwarden.ENotFound, Message: "read catalog", Err: err,
			Hint: "check the path of the price file given with --catalog"}
	}
	defer f.Close()
	return ReadOffers(name, f)
}
