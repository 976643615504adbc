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
		verify bool
		pass   bool
		reason string
	}{
		{"resuming job passes", []string{"H_STEPS=100000"}, false, true, "the training state was not compared"},
		{"resuming job passes the state check", []string{"H_STEPS=100000"}, true, true, "matches the uninterrupted run's byte for byte (2 files"},
		{"job that restores the step but not the state fails the state check", []string{"H_STEPS=100000", "H_RESTORE_STEP_ONLY=1"}, true, false,
			"differs from the uninterrupted run's: shards/0.bin has sha256"},
		{"job that starts over fails", []string{"H_STEPS=100000", "H_IGNORE_RESUME=1"}, false, false, "started over: wrote step 5 again after resuming from step"},
		{"checkpoints without a step number fail", []string{"H_STEPS=100000", "H_NAME=latest"}, false, false, "no step number"},
		{"job that dies before a checkpoint fails", []string{"H_OOM=1"}, false, false, "before committing a checkpoint"},
		{"restarted job that dies fails", []string{"H_STEPS=100000", "H_FAIL_ON=2", "H_FAIL_TEXT=ValueError: cannot load"}, false, false, "restarted job died (exit 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, tt.env...)
			// Existing checkpoints must not leak into the drill.
			commitSteps(t, h.s.CheckpointDir, 90)
			res, err := Drill(context.Background(), h.s, DrillOptions{Timeout: 20 * time.Second, VerifyState: tt.verify})
			if err != nil {
				t.Fatal(err)
			}
			evidence := strings.Join(res.Evidence, "\n")
			if res.Pass != tt.pass || !strings.Contains(res.Reason, tt.reason) {
				t.Fatalf("pass %v reason %q; want %v and %q\n%s\n%s", res.Pass, res.Reason, tt.pass, tt.reason, evidence, h.out.String())
			}
			_, statErr := os.Stat(res.Dir)
			wantProof := ProofProgress
			if tt.verify {
				wantProof = ProofState
			}
			if tt.pass && res.Proof != wantProof {
				t.Errorf("proof %q, want %q", res.Proof, wantProof)
			}
			if tt.pass && tt.verify && (res.Straight == nil || res.Straight.Step != res.Next.Step) {
				t.Errorf("straight = %+v, want the uninterrupted checkpoint at step %d", res.Straight, res.Next.Step)
			}
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
