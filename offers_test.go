package gpuwarden

import (
	"bytes"
	"reflect"
	"testing"
)

func sampleOffers() []Offer {
	return []Offer{
		{Provider: "aws", Region: "us-east-1", Country: "US", Instance: "p5.48xlarge", GPU: "H100-SXM", GPUCount: 8,
			VRAMGBPerGPU: 80, VCPUs: 192, RAMGB: 2048, Currency: "USD", OnDemandHourly: 98_320_000, SpotHourly: 30_000_000,
			Zones: 3, AsOf: "2026-11", Source: "aws pricing", Origin: Origin{File: "aws.csv", Line: 2}},
		{Provider: "aws", Region: "us-east-1", Country: "US", Instance: "p5.4xlarge", GPU: "H100-SXM", GPUCount: 1,
			VRAMGBPerGPU: 80, VCPUs: 16, RAMGB: 256, Currency: "USD", OnDemandHourly: 12_290_000,
			AsOf: "2026-11", Source: "aws pricing", Origin: Origin{File: "aws.csv", Line: 3}},
		{Provider: "vast", Region: "Germany", Country: "DE", GPU: "RTX-4090", GPUCount: 0.5, VRAMGBPerGPU: 24,
			Currency: "EUR", Monthly: 250_000_000},
		{}, // every field empty
	}
}

// TestOffersKeepEveryField: what goes into the table comes back out, field
// for field, in order, whatever groups the offers share.
func TestOffersKeepEveryField(t *testing.T) {
	want := sampleOffers()
	tbl := OffersOf(want...)
	if tbl.Len() != len(want) {
		t.Fatalf("Len = %d, want %d", tbl.Len(), len(want))
	}
	if got := tbl.Slice(); !reflect.DeepEqual(got, want) {
		t.Errorf("Slice:\n%+v\nwant\n%+v", got, want)
	}
	n := 0
	for i, o := range tbl.All() {
		if !reflect.DeepEqual(o, want[i]) {
			t.Errorf("All[%d] = %+v, want %+v", i, o, want[i])
		}
		n++
	}
	if n != len(want) {
		t.Errorf("All walked %d, want %d", n, len(want))
	}
	if len(tbl.groups) != 3 {
		t.Errorf("%d groups, want 3 (the two aws rows share one)", len(tbl.groups))
	}
}

// TestOffersBuilderJoins: joining builders keeps the order and merges their
// groups, leaves the builders joined as they were, and a table built stays
// as it was while building goes on.
func TestOffersBuilderJoins(t *testing.T) {
	all := sampleOffers()
	builder := func(offers []Offer) *OffersBuilder {
		var b OffersBuilder
		for i := range offers {
			b.Append(&offers[i])
		}
		return &b
	}
	a, c := builder(all[:2]), builder(all[1:])
	var b OffersBuilder
	b.AppendBuilder(a)
	b.AppendBuilder(c)
	joined := b.Offers()
	want := append(append([]Offer{}, all[:2]...), all[1:]...)
	if got := joined.Slice(); !reflect.DeepEqual(got, want) {
		t.Errorf("joined:\n%+v\nwant\n%+v", got, want)
	}
	if len(joined.groups) != 3 {
		t.Errorf("%d groups after the join, want 3", len(joined.groups))
	}
	if a.Len() != 2 || c.Len() != len(all)-1 {
		t.Errorf("the builders joined changed: %d and %d offers", a.Len(), c.Len())
	}
	b.AppendBuilder(a)
	b.AppendBuilder(c)
	extra := Offer{Provider: "lambda", Instance: "gpu_1x_h100", Origin: Origin{File: "l.csv", Line: 9}}
	b.Append(&extra)
	b.Truncate(b.Len() - 1)
	b.Append(&extra)
	more := b.Offers()
	if joined.Len() != len(want) || !reflect.DeepEqual(joined.Slice(), want) {
		t.Error("building on changed the table built before")
	}
	if more.Len() != len(want)+1 || !reflect.DeepEqual(more.At(len(want)), extra) || !reflect.DeepEqual(more.Slice()[:len(want)], want) {
		t.Errorf("built on: %d offers, last %+v", more.Len(), more.At(more.Len()-1))
	}
}

// TestOffersLayoutRoundTrip: WriteFrom then AppendFrom gives the same
// offers, after those already in the builder.
func TestOffersLayoutRoundTrip(t *testing.T) {
	all := sampleOffers()
	for first := range len(all) + 1 {
		var src OffersBuilder
		for i := range all {
			src.Append(&all[i])
		}
		var buf bytes.Buffer
		if err := src.WriteFrom(&buf, first); err != nil {
			t.Fatal(err)
		}
		var dst OffersBuilder
		dst.Append(&all[2])
		if err := dst.AppendFrom(bytes.NewReader(buf.Bytes()), int64(buf.Len())); err != nil {
			t.Fatalf("from %d: %v", first, err)
		}
		got := dst.Offers()
		want := append([]Offer{all[2]}, all[first:]...)
		if !reflect.DeepEqual(got.Slice(), want) {
			t.Errorf("from %d, read back:\n%+v\nwant\n%+v", first, got.Slice(), want)
		}
	}
}

func layout(t testing.TB, offers ...Offer) []byte {
	t.Helper()
	var b OffersBuilder
	for i := range offers {
		b.Append(&offers[i])
	}
	var buf bytes.Buffer
	if err := b.WriteFrom(&buf, 0); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestOffersLayoutDamage: a cut, foreign or lying layout is an error and
// leaves the builder as it was.
func TestOffersLayoutDamage(t *testing.T) {
	good := layout(t, sampleOffers()...)
	pastNames := layout(t, sampleOffers()...)
	// The first row's name length, 56 bytes into the row, after the header
	// and groups: find it as the only place holding len("p5.48xlarge").
	rowsAt := len(pastNames) - len("p5.48xlargep5.4xlarge") - 4*offerRowSize
	pastNames[rowsAt+56] = 0xff
	tests := []struct {
		name string
		data []byte
		size int64
	}{
		{"empty", nil, 0},
		{"cut in the rows", good[:len(good)-40], int64(len(good))},
		{"cut in the names", good[:len(good)-1], int64(len(good))},
		{"other magic", append([]byte("gpuwarden offerz\n"), good[len(offersMagic):]...), int64(len(good))},
		{"larger than its size", good, 10},
		{"row points past the names", pastNames, int64(len(pastNames))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var dst OffersBuilder
			first := sampleOffers()[0]
			dst.Append(&first)
			err := dst.AppendFrom(bytes.NewReader(tt.data), tt.size)
			if err == nil {
				t.Fatal("no error")
			}
			extra := sampleOffers()[1]
			dst.Append(&extra) // still usable
			got := dst.Offers()
			if want := []Offer{first, extra}; !reflect.DeepEqual(got.Slice(), want) {
				t.Errorf("after the error: %+v", got.Slice())
			}
		})
	}
}

// TestOffersAppendRefusesWhatDoesNotFit: counts past 32 bits would be cut,
// so Append refuses them rather than store a wrong number.
func TestOffersAppendRefusesWhatDoesNotFit(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic for vcpus past maxOfferInt")
		}
	}()
	var b OffersBuilder
	b.Append(&Offer{VCPUs: maxOfferInt + 1})
}

// FuzzOffersAppendFrom: no layout makes AppendFrom panic, and what it
// accepts can be read whole.
func FuzzOffersAppendFrom(f *testing.F) {
	f.Add(layout(f, sampleOffers()...))
	f.Add([]byte(offersMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		var b OffersBuilder
		if err := b.AppendFrom(bytes.NewReader(data), int64(len(data))); err != nil {
			if b.Len() != 0 {
				t.Fatalf("error %v left %d offers", err, b.Len())
			}
			return
		}
		tbl := b.Offers()
		for range tbl.All() {
		}
	})
}
