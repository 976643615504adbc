package nvml

import (
	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gpuwarden/gpuwarden"
)

// readErrorCounts reads a card's error counts once per health reading and
// fills both what judges the card (the uncorrected ECC counts, the remap
// flags, the retired pages of h) and the dcgm-exporter set /metrics exports
// (h.Counters: ECC single- and double-bit, volatile and aggregate; remapped
// rows; retired pages; PCIe replays). A query the card does not support
// leaves its counter nil, so that "not reported" never reads as a clean 0;
// unknown records why for the fields of h, called while the reason is the
// failed query's own. Row remapping is NOT_SUPPORTED under MIG (nvml.h), so
// only there are the remap flags unknown rather than false.
func readErrorCounts(c *call, dev gonvml.Device, mig bool, h *gpuwarden.Health, unknown func(fields ...string)) {
	n := &h.Counters
	count := func(fn string, query func() (uint64, gonvml.Return)) *uint64 {
		v, ok := get(c, fn, query)
		if !ok {
			return nil
		}
		return &v
	}
	ecc := func(kind gonvml.MemoryErrorType, counter gonvml.EccCounterType) *uint64 {
		return count("nvmlDeviceGetTotalEccErrors", func() (uint64, gonvml.Return) {
			return dev.GetTotalEccErrors(kind, counter)
		})
	}
	n.ECCCorrectedVolatile = ecc(gonvml.MEMORY_ERROR_TYPE_CORRECTED, gonvml.VOLATILE_ECC)
	// Consumer cards have no ECC: NOT_SUPPORTED leaves the counts unknown,
	// which is not the same as none.
	if n.ECCUncorrectedVolatile = ecc(gonvml.MEMORY_ERROR_TYPE_UNCORRECTED, gonvml.VOLATILE_ECC); n.ECCUncorrectedVolatile != nil {
		h.ECCVolatileUncorrected = *n.ECCUncorrectedVolatile
	} else {
		unknown("ecc_volatile_uncorrected")
	}
	n.ECCCorrectedAggregate = ecc(gonvml.MEMORY_ERROR_TYPE_CORRECTED, gonvml.AGGREGATE_ECC)
	if n.ECCUncorrectedAggregate = ecc(gonvml.MEMORY_ERROR_TYPE_UNCORRECTED, gonvml.AGGREGATE_ECC); n.ECCUncorrectedAggregate != nil {
		h.ECCAggregateUncorrected = *n.ECCUncorrectedAggregate
	} else {
		unknown("ecc_aggregate_uncorrected")
	}

	type remapReading struct {
		rows            [2]uint64
		pending, failed bool
	}
	remap, remapped := get(c, "nvmlDeviceGetRemappedRows", func() (remapReading, gonvml.Return) {
		corr, unc, pending, failed, ret := dev.GetRemappedRows()
		return remapReading{[2]uint64{uint64(max(corr, 0)), uint64(max(unc, 0))}, pending, failed}, ret
	})
	switch {
	case remapped:
		h.RemapPending, h.RemapFailed = remap.pending, remap.failed
		n.RemappedRowsCorrectable, n.RemappedRowsUncorrectable = &remap.rows[0], &remap.rows[1]
	case mig:
		unknown("remap_pending", "remap_failed")
	default:
		// Cards before Ampere retire pages instead of remapping rows; a
		// card that remaps rows has nothing to retire.
		var pages uint64
		answered := false
		for _, cause := range []gonvml.PageRetirementCause{
			gonvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
			gonvml.PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
		} {
			list, ok := get(c, "nvmlDeviceGetRetiredPages", func() ([]uint64, gonvml.Return) {
				return dev.GetRetiredPages(cause)
			})
			answered = answered || ok
			pages += uint64(len(list))
		}
		if answered {
			h.RetiredPages, n.RetiredPages = int(pages), &pages
		}
	}
	n.PCIeReplays = count("nvmlDeviceGetPcieReplayCounter", func() (uint64, gonvml.Return) {
		v, ret := dev.GetPcieReplayCounter()
		return uint64(max(v, 0)), ret
	})
}
