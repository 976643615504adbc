package nvml

import (
	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gpuwarden/gpuwarden"
)

// errorCounters reads the counts /metrics exports, in dcgm-exporter's set:
// ECC single- and double-bit, volatile and aggregate; remapped rows; retired
// pages; PCIe replays. A query the card does not support leaves its field
// nil, so that "not reported" never reads as a clean 0. The uncorrected ECC
// counts are read again here rather than shared with Health's, which do not
// say whether the driver answered: two more sub-microsecond calls per GPU
// and tick, well inside the sampling budget.
func errorCounters(c *call, dev gonvml.Device) gpuwarden.ErrorCounters {
	var out gpuwarden.ErrorCounters
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
	out.ECCCorrectedVolatile = ecc(gonvml.MEMORY_ERROR_TYPE_CORRECTED, gonvml.VOLATILE_ECC)
	out.ECCUncorrectedVolatile = ecc(gonvml.MEMORY_ERROR_TYPE_UNCORRECTED, gonvml.VOLATILE_ECC)
	out.ECCCorrectedAggregate = ecc(gonvml.MEMORY_ERROR_TYPE_CORRECTED, gonvml.AGGREGATE_ECC)
	out.ECCUncorrectedAggregate = ecc(gonvml.MEMORY_ERROR_TYPE_UNCORRECTED, gonvml.AGGREGATE_ECC)

	rows, remaps := get(c, "nvmlDeviceGetRemappedRows", func() ([2]uint64, gonvml.Return) {
		corr, unc, _, _, ret := dev.GetRemappedRows()
		return [2]uint64{uint64(max(corr, 0)), uint64(max(unc, 0))}, ret
	})
	if remaps {
		out.RemappedRowsCorrectable, out.RemappedRowsUncorrectable = &rows[0], &rows[1]
	} else {
		// Cards before Ampere retire pages instead of remapping rows.
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
			out.RetiredPages = &pages
		}
	}
	out.PCIeReplays = count("nvmlDeviceGetPcieReplayCounter", func() (uint64, gonvml.Return) {
		n, ret := dev.GetPcieReplayCounter()
		return uint64(max(n, 0)), ret
	})
	return out
}
