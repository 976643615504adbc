package nvml

import (
	"context"
	"encoding/json"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestErrorCounters(t *testing.T) {
	notSupported := gonvml.ERROR_NOT_SUPPORTED
	tests := []struct {
		name  string
		setup func(*fakeNVML)
		want  string // the counters as JSON: absent fields were not reported
	}{
		{name: "h200, clean", want: `{"ecc_corrected_volatile":0,"ecc_uncorrected_volatile":0,"ecc_corrected_aggregate":0,"ecc_uncorrected_aggregate":0,"remapped_rows_correctable":0,"remapped_rows_uncorrectable":0,"pcie_replays":0}`},
		{name: "each count from its own query", setup: func(f *fakeNVML) {
			f.dev.GetTotalEccErrorsFunc = func(kind gonvml.MemoryErrorType, c gonvml.EccCounterType) (uint64, gonvml.Return) {
				v := uint64(1)
				if kind == gonvml.MEMORY_ERROR_TYPE_UNCORRECTED {
					v = 10
				}
				if c == gonvml.AGGREGATE_ECC {
					v *= 3
				}
				return v, gonvml.SUCCESS
			}
			f.dev.GetRemappedRowsFunc = func() (int, int, bool, bool, gonvml.Return) { return 4, 2, true, false, gonvml.SUCCESS }
			f.dev.GetPcieReplayCounterFunc = func() (int, gonvml.Return) { return 17, gonvml.SUCCESS }
		}, want: `{"ecc_corrected_volatile":1,"ecc_uncorrected_volatile":10,"ecc_corrected_aggregate":3,"ecc_uncorrected_aggregate":30,"remapped_rows_correctable":4,"remapped_rows_uncorrectable":2,"pcie_replays":17}`},
		{name: "consumer card: no ecc, no remap, no retirement", setup: func(f *fakeNVML) {
			f.dev.GetTotalEccErrorsFunc = func(gonvml.MemoryErrorType, gonvml.EccCounterType) (uint64, gonvml.Return) { return 0, notSupported }
			f.dev.GetRemappedRowsFunc = func() (int, int, bool, bool, gonvml.Return) { return 0, 0, false, false, notSupported }
		}, want: `{"pcie_replays":0}`},
		{name: "pre-ampere retires pages", setup: func(f *fakeNVML) {
			f.dev.GetRemappedRowsFunc = func() (int, int, bool, bool, gonvml.Return) { return 0, 0, false, false, notSupported }
			f.dev.GetRetiredPagesFunc = func(gonvml.PageRetirementCause) ([]uint64, gonvml.Return) {
				return []uint64{0x10, 0x20}, gonvml.SUCCESS
			}
		}, want: `{"ecc_corrected_volatile":0,"ecc_uncorrected_volatile":0,"ecc_corrected_aggregate":0,"ecc_uncorrected_aggregate":0,"retired_pages":4,"pcie_replays":0}`},
		{name: "replay counter not supported", setup: func(f *fakeNVML) {
			f.dev.GetPcieReplayCounterFunc = func() (int, gonvml.Return) { return 0, notSupported }
		}, want: `{"ecc_corrected_volatile":0,"ecc_uncorrected_volatile":0,"ecc_corrected_aggregate":0,"ecc_uncorrected_aggregate":0,"remapped_rows_correctable":0,"remapped_rows_uncorrectable":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			if tt.setup != nil {
				tt.setup(f)
			}
			g := f.open(t)
			g.kmsgPath = "testdata/no-such-kmsg"
			h, err := g.Health(context.Background(), 0)
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(h.Counters)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(b); got != tt.want {
				t.Errorf("counters =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}
