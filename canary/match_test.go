package canary

import (
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

func TestDefaultMatch(t *testing.T) {
	const (
		exact   = gpuwarden.MatchExact
		major   = gpuwarden.MatchMajor
		atLeast = gpuwarden.MatchAtLeast
		ignore  = gpuwarden.MatchIgnore
	)
	tests := []struct {
		field string
		want  gpuwarden.Match
	}{
		{"gpu.count", exact},
		{"gpu.model", exact},
		{"gpu.vram_gb", exact},
		{"gpu.compute_capability", exact},
		{"gpu.ecc", exact},
		{"gpu.mig", exact},
		{"gpu.persistence", exact},
		{"driver.version", major},
		{"cuda.driver_version", atLeast},
		{"os.id", exact},
		{"os.version_id", exact},
		{"os.kernel", ignore},
		{"cudnn.version", major},
		{"nccl.version", major},
		{"container.runtime", exact},
		{"container.image", exact},
		{"container.name", ignore},
		{"env.CUDA_VISIBLE_DEVICES", exact},
		{"env.NVIDIA_VISIBLE_DEVICES", exact},
		{"env.NCCL_DEBUG", exact},
		{"python.python3.version", major},
		{"python.python3.12.version", major},
		{"python.python3.torch.version", exact},
		{"python.python3.torch.cuda", exact},
		{"python.python3.torch.cudnn", exact},
		{"python.python3.torch.sees_gpu", exact},
		{"python.python3.jax.version", exact},
		{"python.python3.tensorflow.version", exact},
		{"python.python3.tensorflow.sees_gpu", exact},
		{"python.torch.version", major}, // an interpreter named torch
		{"disk.model", exact},           // a fact no rule knows yet
		{"", exact},
	}
	for _, tt := range tests {
		if got := DefaultMatch(tt.field); got != tt.want {
			t.Errorf("DefaultMatch(%q) = %q, want %q", tt.field, got, tt.want)
		}
	}
}
