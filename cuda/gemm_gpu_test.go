//go:build gpu

package cuda

import (
	"context"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

// TestGPUGEMMSoak runs the bf16 cuBLASLt soak where the library is
// installed and logs its figures; without cuBLASLt it logs why it skipped.
// On a real GPU the heuristic must answer for this plain bf16 GEMM, with
// an algorithm whose workspace fits the soak's buffer.
func TestGPUGEMMSoak(t *testing.T) {
	d := openGPU(t)
	res, err := d.GEMMSoak(context.Background(), 0, "", 5)
	if err != nil {
		t.Fatalf("%v (hint: %s)", err, gpuwarden.ErrorHint(err))
	}
	if !res.Available {
		t.Skipf("no GEMM soak: %s", res.Reason)
	}
	t.Logf("bf16 GEMM soak: %d×%d×%d, %d runs, %.1f TFLOP/s, %d mismatching elements",
		res.Dim, res.Dim, res.Dim, res.Runs, res.TFLOPs, res.Mismatches)
	t.Logf("algo: %s, workspace %d of %d bytes", res.Algo, res.WorkspaceBytes, gemmWorkspace)
	if res.Algo != "heuristic" {
		t.Errorf("no heuristic algorithm: %s", res.Algo)
	}
	if res.WorkspaceBytes > gemmWorkspace {
		t.Errorf("the algorithm uses %d bytes of workspace, over the %d-byte buffer", res.WorkspaceBytes, gemmWorkspace)
	}
	if res.Runs < 1 || res.TFLOPs <= 0 {
		t.Errorf("got %+v, want runs and a rate", res)
	}
	if res.Mismatches != 0 {
		t.Errorf("%d bf16 elements differ from the first result", res.Mismatches)
	}
}
