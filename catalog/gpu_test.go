package catalog

import "testing"

func TestCanonicalGPU(t *testing.T) {
	tests := []struct {
		name  string
		memGB float64
		want  string
	}{
		{"H100", 0, "H100-SXM"},
		{"H100", 80, "H100-SXM"},
		{"H100-SXM", 0, "H100-SXM"},
		{"H100-SXM5", 0, "H100-SXM"},
		{"H100_SXM", 0, "H100-SXM"},
		{"h100 sxm5 80gb", 0, "H100-SXM"},
		{"NVIDIA-H100-80GB-HBM3", 0, "H100-SXM"},
		{"H100-MEGA", 0, "H100-SXM"},
		{"nvidia-h100-80gb", 0, "H100-SXM"},
		{"H100-PCIE", 0, "H100-PCIe"},
		{"NVIDIA H100 PCIe", 0, "H100-PCIe"},
		{"H100-PCIe", 0, "H100-PCIe"},
		{"H100-NVL", 0, "H100-NVL"},
		{"H100NVL", 0, "H100-NVL"},
		{"H100", 94, "H100-NVL"},
		{"H100", 93.58, "H100-NVL"},
		{"H100_NVLINK", 0, "H100-SXM"},
		{"A100", 0, "A100-40GB"},
		{"A100", 40, "A100-40GB"},
		{"A100", 80, "A100-80GB"},
		{"A100", 70, "A100-80GB"},
		{"A100-80GB", 0, "A100-80GB"},
		{"A100_80GB", 0, "A100-80GB"},
		{"A100-80GB-PCIe", 0, "A100-80GB-PCIe"},
		{"A100 PCIE 80GB", 0, "A100-80GB-PCIe"},
		{"A100-80GB-SXM", 0, "A100-80GB-SXM"},
		{"NVIDIA A100-SXM4-80GB", 0, "A100-80GB-SXM"},
		{"A100-SXM4-40GB", 80, "A100-40GB-SXM"},
		{"nvidia-tesla-a100", 0, "A100-40GB"},
		{"A100-40GB", 0, "A100-40GB"},
		{"RTX4090", 0, "RTX-4090"},
		{"RTX_4090", 0, "RTX-4090"},
		{"RTX-4090", 0, "RTX-4090"},
		{"GeForce RTX 4090", 0, "RTX-4090"},
		{"NVIDIA GeForce RTX 4090", 24, "RTX-4090"},
		{"RTX 3090 Ti", 0, "RTX-3090-TI"},
		{"RTX6000-Ada", 0, "RTX-6000-ADA"},
		{"RTXA6000", 0, "RTX-A6000"},
		{"A6000", 0, "RTX-A6000"},
		// SkyPilot v8's board and host suffixes.
		{"A6000-PCIE-LOW-RAM", 48, "RTX-A6000"},
		{"A6000-PCIE-HIGH-PERF", 48, "RTX-A6000"},
		{"A4000-PCIE", 16, "RTX-A4000"},
		{"A5000-PCIE", 24, "RTX-A5000"},
		{"L4-PCIE", 24, "L4"},
		{"RTX-6000-ADAPCIE", 48, "RTX-6000-ADA"},
		{"RTX-5090-PCIEBAREMETAL", 32, "RTX-5090"},
		{"RTX--PRO6000", 96, "RTX-PRO-6000"},
		{"RTX--PRO6000PCIEBAREMETAL", 96, "RTX-PRO-6000"},
		{"RTX--PROSERVER6000", 96, "RTX-PRO-6000"},
		{"RTX--PRO6000WK", 96, "RTX-PRO-6000"},
		{"RTX-6000", 24, "RTX-6000"},
		{"T4G", 16, "T4G"},
		{"B300", 288, "B300"},
		// The A100 and H100 keep their board: it changes power and NVLink.
		{"A100-80GB-PCIe", 80, "A100-80GB-PCIe"},
		{"H100-PCIe", 80, "H100-PCIe"},
		{"A10G", 0, "A10G"},
		{"a10g", 24, "A10G"},
		{"A10", 0, "A10"},
		{"L4", 0, "L4"},
		{"nvidia-l4", 0, "L4"},
		{"L40S", 0, "L40S"},
		{"L40", 0, "L40"},
		{"T4", 0, "T4"},
		{"nvidia-tesla-t4", 0, "T4"},
		{"V100", 0, "V100"},
		{"V100", 16, "V100"},
		{"V100", 32, "V100-32GB"},
		{"V100-32GB", 0, "V100-32GB"},
		{"Tesla V100-SXM2-16GB", 0, "V100"},
		{"H200", 0, "H200"},
		{"nvidia-h200-141gb", 0, "H200"},
		{"GH200", 0, "GH200"},
		{"B200", 0, "B200"},
		{"Tesla P100-PCIE-16GB", 0, "P100"},
		// Unknown names come back normalised, not refused.
		{"Quadro X9000", 0, "QUADRO-X9000"},
		{"mi300x", 192, "MI300X"},
		{"  some_new gpu  ", 0, "SOME-NEW-GPU"},
		{"Foo 48GB", 0, "FOO-48GB"},
		{"", 0, ""},
	}
	for _, tt := range tests {
		if got := CanonicalGPU(tt.name, tt.memGB); got != tt.want {
			t.Errorf("CanonicalGPU(%q, %v) = %q, want %q", tt.name, tt.memGB, got, tt.want)
		}
	}
}

// Every model of the GPU table must map to itself, or offers would be
// renamed away from the specs sizing looks up.
func TestCanonicalGPUKeepsTableNames(t *testing.T) {
	table, err := gpuTable()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range table {
		for _, mem := range []float64{0, g.VRAMGB} {
			if got := CanonicalGPU(g.Model, mem); got != g.Model {
				t.Errorf("CanonicalGPU(%q, %v) = %q", g.Model, mem, got)
			}
		}
	}
}

func TestResolveGPUMemory(t *testing.T) {
	tests := []struct {
		name                     string
		acc                      string
		count, sizeMiB, totalMiB float64
		totals                   bool
		wantName                 string
		wantVRAM                 float64
		wantFixed                bool
	}{
		{"AWS per GPU with total", "A100", 8, 40960, 327680, false, "A100-40GB", 40, false},
		{"marketing 80GB", "H100", 1, 81920, 81920, false, "H100-SXM", 80, false},
		{"Vast box total", "A100", 2, 81920, 81920, true, "A100-40GB", 40, false},
		{"Lambda per GPU, total equal", "V100", 8, 16384, 16384, false, "V100", 16, false},
		{"fractional slice", "L4", 0.125, 2861, 2861, false, "L4", 24, false},
		{"host RAM instead of GPU memory", "L40S", 1, 32768, 32768, false, "L40S", 48, true},
		{"no memory figure", "A100-80GB", 1, 0, 0, false, "A100-80GB", 80, false},
		{"unknown model keeps its figure", "RTX3060", 1, 12288, 12288, false, "RTX-3060", 12, false},
		{"unknown model on Vast", "Quadro X", 2, 49152, 49152, true, "QUADRO-X", 24, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := resolveGPU(tt.acc, "", tt.count, tt.sizeMiB, tt.totalMiB, tt.totals)
			if g.name != tt.wantName || g.vram != tt.wantVRAM || g.fixed != tt.wantFixed {
				t.Errorf("got %+v, want {name:%s vram:%v fixed:%v}", g, tt.wantName, tt.wantVRAM, tt.wantFixed)
			}
		})
	}
}

func TestInfoValue(t *testing.T) {
	info := `{'Gpus': [{'Name': 'NVIDIA H100 PCIe', 'Manufacturer': 'NVIDIA', 'Count': '1.0', 'MemoryInfo': {'SizeInMiB': 81559}}], 'TotalGpuMemoryInMiB': 163118}`
	tests := []struct{ info, key, want string }{
		{info, "Name", "NVIDIA H100 PCIe"},
		{info, "Manufacturer", "NVIDIA"},
		{info, "Count", "1.0"},
		{info, "SizeInMiB", "81559"},
		{info, "TotalGpuMemoryInMiB", "163118"},
		{info, "Missing", ""},
		{`{"Gpus": [{"MemoryInfo": {"SizeInMiB": 40960}}]}`, "SizeInMiB", "40960"},
		{"A100-80GB", "SizeInMiB", ""},
		{"'SizeInMiB'", "SizeInMiB", ""},
		{"'Name': 'unterminated", "Name", ""},
	}
	for _, tt := range tests {
		if got := infoValue(tt.info, tt.key); got != tt.want {
			t.Errorf("infoValue(%q, %q) = %q, want %q", tt.info, tt.key, got, tt.want)
		}
	}
}
