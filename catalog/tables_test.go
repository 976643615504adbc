package catalog

import (
	"bytes"
	"crypto/sha256"

	"github.com/gpuwarden/gpuwarden"
)

// The helpers below call the readers and the cache as the tests knew them:
// with the offers before and the result as slices, which reflect.DeepEqual
// compares field by field.

func parseSlice(name, provider, data string, before []gpuwarden.Offer) ([]gpuwarden.Offer, []string, error) {
	dst := builderOf(before)
	warns, err := parseOffers(name, provider, data, dst)
	if err != nil {
		return nil, nil, err
	}
	offers := dst.Offers()
	return offers.Slice(), warns, nil
}

func (c parseCache) readFileSlice(name string, before []gpuwarden.Offer) ([]gpuwarden.Offer, []string, error) {
	dst := builderOf(before)
	warns, err := c.readFile(name, dst)
	if err != nil {
		return nil, nil, err
	}
	offers := dst.Offers()
	return offers.Slice(), warns, nil
}

func (c parseCache) lookupSlice(name, provider string, content [sha256.Size]byte, size int, before []gpuwarden.Offer) ([]gpuwarden.Offer, []string, bool) {
	dst := builderOf(before)
	warns, ok := c.lookup(name, provider, content, size, dst)
	if !ok {
		return nil, nil, false
	}
	offers := dst.Offers()
	return offers.Slice(), warns, true
}

func encodeCacheBytes(key string, offers []gpuwarden.Offer, warns []string) []byte {
	var b bytes.Buffer
	tbl := builderOf(offers)
	if err := encodeCache(&b, key, tbl, 0, warns); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func decodeCacheBytes(b []byte, key string, before []gpuwarden.Offer) ([]gpuwarden.Offer, []string, error) {
	dst := builderOf(before)
	warns, err := decodeCache(bytes.NewReader(b), int64(len(b)), key, dst)
	if err != nil {
		if dst.Len() != len(before) {
			panic("decodeCache left offers behind on an error")
		}
		return nil, nil, err
	}
	offers := dst.Offers()
	return offers.Slice(), warns, nil
}

func builderOf(offers []gpuwarden.Offer) *gpuwarden.OffersBuilder {
	var b gpuwarden.OffersBuilder
	for i := range offers {
		b.Append(&offers[i])
	}
	return &b
}
