package catalog

import (
	"strconv"
	"strings"
)

// CanonicalGPU maps a GPU name as catalogs write it ("H100_SXM5",
// "GeForce RTX 4090", "A100", "nvidia-tesla-v100") to the model names of the
// GPU table (H100-SXM, RTX-4090, A100-80GB, V100-32GB). memGB, the memory per
// GPU when the source knows it (0 when not), settles names that several
// models share: "A100" with 80 GB is an A100-80GB, "H100" with 94 GB an
// H100-NVL. Unknown names come back normalised (upper case, dashes), never as
// an error, so that new cards still show up in rankings.
func CanonicalGPU(name string, memGB float64) string {
	c, _ := canonicalGPU(name, memGB)
	return c
}

// canonicalGPU returns the canonical model and the memory sizes (GB per GPU)
// the name can stand for: one size when the name pins the model, several when
// it names a family ("A100": 40 or 80), none for a model nobody told us about.
// The sizes let importers check the memory figures of a catalog.
func canonicalGPU(name string, memGB float64) (string, []float64) {
	tokens, explicitGB := gpuTokens(name)
	if len(tokens) == 0 {
		return "", nil
	}
	compact := strings.Join(tokens, "")
	if !strings.HasPrefix(compact, "A100") && !strings.HasPrefix(compact, "H100") {
		// Only the A100 and H100 come as boards that differ (SXM or PCIe);
		// other cards are PCIe whatever the catalog appends (SkyPilot v8
		// writes "L4-PCIE", "A6000-PCIE-LOW-RAM", "RTX-5090-PCIEBAREMETAL").
		compact = trimBoardSuffix(compact)
	}
	mem := memGB
	if explicitGB > 0 {
		mem = explicitGB
	}
	has := func(s string) bool { return strings.Contains(compact, s) }
	switch {
	case strings.HasPrefix(compact, "H100"):
		rest := compact[4:]
		switch {
		case strings.Contains(rest, "NVL") && !strings.Contains(rest, "NVLINK"):
			return "H100-NVL", []float64{94}
		case strings.Contains(rest, "PCIE"):
			return "H100-PCIe", []float64{80}
		case strings.Contains(rest, "SXM"), strings.Contains(rest, "MEGA"), strings.Contains(rest, "HBM3"):
			return "H100-SXM", []float64{80}
		case mem >= 90 && mem < 110:
			// Azure's NC H100 v5 and marketplaces list the NVL as a bare
			// "H100"; only its 94 GB gives it away.
			if explicitGB > 0 {
				return "H100-NVL", []float64{94}
			}
			return "H100-NVL", []float64{80, 94}
		case explicitGB > 0:
			return "H100-SXM", []float64{80}
		}
		return "H100-SXM", []float64{80, 94}
	case strings.HasPrefix(compact, "GH200"):
		return "GH200", []float64{96, 144}
	case strings.HasPrefix(compact, "H200"):
		if has("NVL") {
			return "H200-NVL", []float64{141}
		}
		return "H200", []float64{141}
	case strings.HasPrefix(compact, "B200"):
		return "B200", []float64{180, 192}
	case strings.HasPrefix(compact, "A100"):
		// The form factor stays in the name: an SXM board and a PCIe card
		// differ in power, NVLink and price (RunPod rents both).
		form := formFactor(compact[4:])
		switch {
		case strings.Contains(compact[4:], "80") || explicitGB >= 70:
			return "A100-80GB" + form, []float64{80}
		case strings.Contains(compact[4:], "40") || (explicitGB > 0 && explicitGB < 70):
			return "A100-40GB" + form, []float64{40}
		case mem >= 70:
			return "A100-80GB" + form, []float64{40, 80}
		}
		return "A100-40GB" + form, []float64{40, 80}
	case strings.HasPrefix(compact, "A10G"):
		return "A10G", []float64{24}
	case compact == "A10" || strings.HasPrefix(compact, "A10PCIE"):
		return "A10", []float64{24}
	case strings.HasPrefix(compact, "A800"):
		return "A800", []float64{80, 40}
	case compact == "A40":
		return "A40", []float64{48}
	case compact == "A30":
		return "A30", []float64{24}
	case strings.HasPrefix(compact, "L40S"):
		return "L40S", []float64{48}
	case strings.HasPrefix(compact, "L40"):
		return "L40", []float64{48}
	case compact == "L4":
		return "L4", []float64{24}
	case compact == "T4":
		return "T4", []float64{16}
	case compact == "T4G":
		return "T4G", []float64{16}
	case strings.HasPrefix(compact, "B300"):
		return "B300", []float64{268.59, 288}
	case strings.HasPrefix(compact, "RTXPRO6000") || strings.HasPrefix(compact, "RTXPROSERVER6000"):
		// The workstation, Max-Q and server editions share the chip and
		// memory; SkyPilot v8 writes "RTX--PRO6000", "RTX--PROSERVER6000",
		// "RTX--PRO6000S" and "RTX--PRO6000WK".
		return "RTX-PRO-6000", []float64{96}
	case strings.HasPrefix(compact, "V100"):
		switch {
		case strings.Contains(compact[4:], "32") || explicitGB >= 30:
			return "V100-32GB", []float64{32}
		case explicitGB > 0:
			return "V100", []float64{16}
		case mem >= 30:
			return "V100-32GB", []float64{16, 32}
		}
		return "V100", []float64{16, 32}
	case strings.HasPrefix(compact, "P100"):
		return "P100", []float64{16, 12}
	case compact == "P4":
		return "P4", []float64{8}
	case compact == "K80":
		return "K80", []float64{12}
	case strings.HasPrefix(compact, "RTX"):
		return rtxName(compact[3:])
	case isProAmpere(compact):
		// Lambda writes the RTX A6000 as "A6000".
		return rtxName(compact)
	}
	return strings.Join(append(tokens, memToken(explicitGB)...), "-"), nil
}

// boardSuffixes are what catalogs append to a PCIe card's name about the
// board or the host, longest first.
var boardSuffixes = []string{"PCIEBAREMETAL", "PCIELOWRAM", "PCIEHIGHPERF", "BAREMETAL", "PCIE"}

// trimBoardSuffix drops one board or host suffix from a compact name.
func trimBoardSuffix(compact string) string {
	for _, s := range boardSuffixes {
		if rest, ok := strings.CutSuffix(compact, s); ok && rest != "" {
			return rest
		}
	}
	return compact
}

// formFactor is the "-SXM" or "-PCIe" suffix a name's remaining tokens
// state, or "" when they say neither.
func formFactor(rest string) string {
	switch {
	case strings.Contains(rest, "SXM"):
		return "-SXM"
	case strings.Contains(rest, "PCIE"):
		return "-PCIe"
	}
	return ""
}

// gpuTokens upper-cases a GPU name, splits it on separators, drops the
// vendor words that catalogs prepend ("NVIDIA", "Tesla", "GeForce") and pulls
// out a memory token such as "80GB" or "80G".
func gpuTokens(name string) ([]string, float64) {
	fields := strings.FieldsFunc(strings.ToUpper(name), func(r rune) bool {
		return r == '-' || r == '_' || r == ' ' || r == '/' || r == '\t'
	})
	tokens := fields[:0]
	var explicitGB float64
	for _, f := range fields {
		switch f {
		case "NVIDIA", "TESLA", "GEFORCE":
			continue
		}
		if gb, ok := memoryToken(f); ok && len(tokens) > 0 {
			explicitGB = gb
			continue
		}
		tokens = append(tokens, f)
	}
	return tokens, explicitGB
}

// memoryToken reads "80GB" or "80G" as 80.
func memoryToken(t string) (float64, bool) {
	num := strings.TrimSuffix(strings.TrimSuffix(t, "B"), "G")
	if len(num) == len(t) || num == "" {
		return 0, false
	}
	v, err := strconv.Atoi(num)
	if err != nil || v <= 0 || v > 1024 {
		return 0, false
	}
	return float64(v), true
}

func memToken(gb float64) []string {
	if gb <= 0 {
		return nil
	}
	return []string{strconv.FormatFloat(gb, 'f', -1, 64) + "GB"}
}

// isProAmpere reports the RTX A-series workstation cards: A2000 … A6000.
func isProAmpere(c string) bool {
	switch c {
	case "A2000", "A4000", "A4500", "A5000", "A5500", "A6000":
		return true
	}
	return false
}

// rtxVRAM is the memory of the workstation and gaming cards marketplaces rent.
var rtxVRAM = map[string][]float64{
	"RTX-3060": {12}, "RTX-3070": {8}, "RTX-3080": {10, 12}, "RTX-3090": {24},
	"RTX-3090-TI": {24}, "RTX-4070": {12}, "RTX-4080": {16}, "RTX-4080-SUPER": {16},
	"RTX-4090": {24}, "RTX-5090": {32}, "RTX-A4000": {16}, "RTX-A4500": {20},
	"RTX-A5000": {24}, "RTX-A6000": {48}, "RTX-4000-ADA": {20}, "RTX-6000-ADA": {48}, "RTX-6000": {24},
}

// rtxName writes the part after "RTX" as RTX-<digits>[-<suffix>] or RTX-A<digits>.
func rtxName(rest string) (string, []float64) {
	i := 0
	if strings.HasPrefix(rest, "A") {
		i = 1
	}
	for i < len(rest) && isDigit(rest[i]) {
		i++
	}
	name := "RTX-" + rest[:i]
	if i < len(rest) {
		name += "-" + rest[i:]
	}
	if rest == "" {
		name = "RTX"
	}
	return name, rtxVRAM[name]
}

// nonNVIDIANames are accelerator names catalogs list next to GPUs that the
// planner cannot run CUDA work on; they are skipped.
var nonNVIDIANames = []string{
	"TPU", "INFERENTIA", "TRAINIUM", "GAUDI", "HL-205", "HL205", "RADEON", "INSTINCT",
	"MI100", "MI210", "MI250", "MI300", "MI325", "MI355", "VU9P", "VU47P", "U30", "QUALCOMM",
	"AI100", "MAX-1100", "MAX1100", "TENSTORRENT",
}

// isNonNVIDIA reports whether an accelerator name or vendor is not an NVIDIA GPU.
func isNonNVIDIA(name, vendor string) bool {
	if vendor != "" && !strings.EqualFold(vendor, "nvidia") {
		return true
	}
	u := strings.ToUpper(name)
	for _, p := range nonNVIDIANames {
		if strings.HasPrefix(u, p) {
			return true
		}
	}
	return false
}

// isBareH100 reports an H100 name that does not say which of the three
// H100 models it is; the instance name may.
func isBareH100(name string) bool {
	tokens, _ := gpuTokens(name)
	return len(tokens) == 1 && tokens[0] == "H100"
}

// h100Hint picks the H100 model from words in instance or GPU-info names:
// Lambda's gpu_1x_h100_pcie and Cudo's h100-nvl-pcie say what "H100" hides.
// "NVLINK" (Fluidstack's 8-GPU SXM boards) is not the NVL card.
func h100Hint(texts ...string) string {
	for _, t := range texts {
		u := strings.ToUpper(t)
		if strings.Contains(strings.ReplaceAll(u, "NVLINK", ""), "NVL") {
			return "H100-NVL"
		}
	}
	for _, t := range texts {
		if strings.Contains(strings.ToUpper(t), "PCIE") {
			return "H100-PCIE"
		}
	}
	return "H100"
}

// withinTenPercent reports whether a memory figure is one of the sizes a
// model ships with; 10 % absorbs GiB-versus-GB and reserved memory (an L4
// reports 22,888 MiB, 22.35 GiB, for its 24 GB).
func withinTenPercent(gb float64, sizes []float64) bool {
	return marketedSize(gb, sizes, 0.9, 1.1) > 0
}

// marketedSize is the size in sizes that gb is within [lo, hi] of, or 0.
func marketedSize(gb float64, sizes []float64, lo, hi float64) float64 {
	for _, s := range sizes {
		if gb >= s*lo && gb <= s*hi {
			return s
		}
	}
	return 0
}

// snapVRAM gives a listed memory figure the card's marketed size when it is
// within 8 % under or 3 % over it: a listing reports what the driver
// exposes (an H100's 81,559 MiB is 79.65 GiB, an L4's 22,888 MiB 22.35),
// while cards are compared at the size they are sold as (docs/sizing.md),
// so that two listings of one card never fit differently.
func snapVRAM(gb float64, sizes []float64) float64 {
	if s := marketedSize(gb, sizes, 0.92, 1.03); s > 0 {
		return s
	}
	return gb
}
