package supervise

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

func TestDrill(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		env    []string
		pass   bool
		reason string
	}{
		{"resuming job passes", []string{"H_STEPS=100000"}, true, "resumed from step"},
		{"job that starts over fails", []string{"H_STEPS=100000", "H_IGNORE_RESUME=1"}, false, "started over: wrote step 5 again after resuming from step"},
		{"checkpoints without a step number fail", []string{"H_STEPS=100000", "H_NAME=latest"}, false, "no step number"},
		{"job that dies before a checkpoint fails", []string{"H_OOM=1"}, false, "before committing a checkpoint"},
		{"restarted job that dies fails", []string{"H_STEPS=100000", "H_FAIL_ON=2", "H_FAIL_TEXT=ValueError: cannot load"}, false, "restarted job died (exit 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, tt.env...)
			// Existing checkpoints must not leak into the drill.
			commitSteps(t, h.s.CheckpointDir, 90)
			res, err := Drill(context.Background(), h.s, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			evidence := strings.Join(res.Evidence, "\n")
			if res.Pass != tt.pass || !strings.Contains(res.Reason, tt.reason) {
				t.Fatalf("pass %v reason %q; want %v and %q\n%s\n%s", res.Pass, res.Reason, tt.pass, tt.reason, evidence, h.out.String())
			}
			_, statErr := os.Stat(res.Dir)
			if tt.pass {
				if res.Next.Step <= res.Resumed.Step || res.Resumed.Step < 5 {
					t.Errorf("resumed step %d, next %d", res.Resumed.Step, res.Next.Step)
				}
				if !strings.Contains(evidence, "killed the job's process group with SIGKILL") || !strings.Contains(evidence, "GPUWARDEN_RESUME_FROM=") {
					t.Errorf("evidence lacks the kill or the resume:\n%s", evidence)
				}
				if statErr == nil {
					t.Errorf("drill directory %s kept after a PASS", res.Dir)
				}
			} else if statErr != nil {
				t.Errorf("drill directory removed after a FAIL: %v", statErr)
			}
			if !strings.HasPrefix(res.Dir, h.s.CheckpointDir+"/drill-") {
				t.Errorf("drill dir %s not under the checkpoint root", res.Dir)
			}
		})
	}
}
