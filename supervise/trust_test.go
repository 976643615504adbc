package supervise

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/manifest"
	"github.com/gpuwarden/gpuwarden/objstore"
)

func TestCommitRefusesNamesGpuwardenDoesNotWrite(t *testing.T) {
	for _, tt := range []struct {
		folder string
		ok     bool
	}{
		{"step-000120", true},
		{"epoch_3.5", true},
		{"x$(touch${IFS}PWNED)", false},
		{"has space", false},
		{"quote'd", false},
		{"-leading-dash", false},
		{"_leading_underscore", false},
		{"ünïcode", false},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
	} {
		t.Run(tt.folder, func(t *testing.T) {
			root := t.TempDir()
			dir := writeCheckpoint(t, root, tt.folder, map[string]string{"w.bin": "weights"}, true)
			cp, err := Commit(root, dir)
			if tt.ok {
				if err != nil || cp.Name != "000001-"+tt.folder {
					t.Fatalf("Commit(%q) = %q, %v; want 000001-%s", tt.folder, cp.Name, err, tt.folder)
				}
				return
			}
			if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || !strings.Contains(gpuwarden.ErrorHint(err), "step-000120") {
				t.Fatalf("Commit(%q) = %v (hint %q), want invalid with a hint to name folders like step-000120", tt.folder, err, gpuwarden.ErrorHint(err))
			}
			if _, err := os.Stat(dir); err != nil {
				t.Errorf("the refused folder moved: %v", err)
			}
			if des, _ := os.ReadDir(filepath.Join(root, CommittedDir)); len(des) != 0 {
				t.Errorf("committed/ holds %d entries after a refusal", len(des))
			}
		})
	}
}

// commitTrainer commits a checkpoint the helper trainer can resume at step.
func commitTrainer(t *testing.T, root string, step int) gpuwarden.Checkpoint {
	t.Helper()
	state, _ := json.Marshal(trainerState{Step: step, Digest: wantDigest(step)})
	cp, err := Commit(root, writeCheckpoint(t, root, fmt.Sprintf("step-%06d", step), map[string]string{"state.json": string(state)}, false))
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// plant puts a complete, self-consistent checkpoint under committed/ with
// any name, as someone other than gpuwarden could.
func plant(t *testing.T, root, name string, step int) {
	t.Helper()
	dir := filepath.Join(root, CommittedDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	state, _ := json.Marshal(trainerState{Step: step, Digest: wantDigest(step)})
	if err := os.WriteFile(filepath.Join(dir, "state.json"), state, 0o644); err != nil {
		t.Fatal(err)
	}
	cp, err := manifest.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := manifest.Write(cp); err != nil {
		t.Fatal(err)
	}
}

// TestForeignCommittedNamesAreNeverResumed: a valid checkpoint under
// committed/ whose name gpuwarden does not write is neither resumed nor
// pruned, and is named in a warning.
func TestForeignCommittedNamesAreNeverResumed(t *testing.T) {
	for _, name := range []string{"000009-x$(touch${IFS}PWNED)", "best", "000009-has space"} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, "H_STEPS=10")
			root := h.s.CheckpointDir
			commitTrainer(t, root, 5)
			plant(t, root, name, 9)
			var logs bytes.Buffer
			h.s.Log = slog.New(slog.NewTextHandler(&logs, nil))
			report, err := h.s.Run(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := report.Attempts[0].ResumedFrom; got != "000001-step-000005" {
				t.Errorf("resumed from %q, want 000001-step-000005", got)
			}
			// The name is logged quoted (%q), which the text handler quotes again.
			if want := "name=" + strconv.Quote(strconv.Quote(name)); !strings.Contains(logs.String(), "never resumed") || !strings.Contains(logs.String(), want) {
				t.Errorf("no warning with %s:\n%s", want, logs.String())
			}
			if _, err := os.Stat(filepath.Join(root, CommittedDir, name)); err != nil {
				t.Errorf("the foreign folder was touched: %v", err)
			}
			if st := h.finalState(t); st.Step != 10 || st.Digest != wantDigest(10) {
				t.Errorf("final state %+v, want the uninterrupted one", st)
			}
		})
	}
}

// seedStore pushes a checkpoint of the helper trainer at step into store
// under name, committed at the given time; edit, when set, damages the
// store's copy afterwards.
func seedStore(t *testing.T, store *objstore.Local, name string, step int, committed time.Time, files bool) gpuwarden.Checkpoint {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(filepath.Join(dir, "shards"), 0o755); err != nil {
		t.Fatal(err)
	}
	state, _ := json.Marshal(trainerState{Step: step, Digest: wantDigest(step)})
	if err := os.WriteFile(filepath.Join(dir, "state.json"), state, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "shards", "0.bin"), bytes.Repeat([]byte{byte(step)}, 256<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	cp, err := manifest.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	cp.Step, cp.Committed = int64(step), committed.UTC()
	if !files {
		cp.Files, cp.Bytes = []gpuwarden.ManifestFile{}, 0
	}
	if err := store.Push(context.Background(), cp); err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestRestoreTrustsTheStoreOnlyAsFarAsItVerifies: the restore tries the
// store's checkpoints by sequence, newest first, skips each one that the
// resume would reject or that does not verify, resumes the next, and the
// report says which one was restored and what was skipped, and why.
func TestRestoreTrustsTheStoreOnlyAsFarAsItVerifies(t *testing.T) {
	now := time.Now()
	dayAhead := now.Add(24 * time.Hour)
	type want struct {
		restored string
		skipped  map[string]string // name → a phrase of the reason
	}
	for _, tt := range []struct {
		name  string
		local []int // steps committed on the box first
		seed  func(t *testing.T, s *objstore.Local)
		want  want
	}{
		{"the highest sequence wins over a clock a day ahead",
			nil,
			func(t *testing.T, s *objstore.Local) {
				seedStore(t, s, "000001-step-000005", 5, dayAhead, true)
				seedStore(t, s, "000002-step-000010", 10, now, true)
			},
			want{restored: "000002-step-000010"}},
		{"a box whose own checkpoint's clock ran ahead still takes the store's higher sequence",
			[]int{5},
			func(t *testing.T, s *objstore.Local) {
				seedStore(t, s, "000002-step-000010", 10, now.Add(-time.Hour), true)
			},
			want{restored: "000002-step-000010"}},
		{"an empty manifest is skipped, not restored",
			nil,
			func(t *testing.T, s *objstore.Local) {
				seedStore(t, s, "000001-step-000005", 5, now, true)
				seedStore(t, s, "000002-step-000010", 10, now, false)
			},
			want{restored: "000001-step-000005", skipped: map[string]string{"000002-step-000010": "lists no files"}}},
		{"a name without a sequence is skipped, not restored",
			nil,
			func(t *testing.T, s *objstore.Local) {
				seedStore(t, s, "000001-step-000005", 5, now, true)
				seedStore(t, s, "best", 10, dayAhead, true)
			},
			want{restored: "000001-step-000005", skipped: map[string]string{"best": "not a name gpuwarden writes"}}},
		{"a name that would run in a shell is never pulled",
			nil,
			func(t *testing.T, s *objstore.Local) {
				seedStore(t, s, "000001-step-000005", 5, now, true)
				seedStore(t, s, "000009-x$(touch${IFS}PWNED)", 10, dayAhead, true)
			},
			want{restored: "000001-step-000005", skipped: map[string]string{"000009-x$(touch${IFS}PWNED)": "not a name gpuwarden writes"}}},
		{"a file longer than its manifest is cut at size+1 and skipped",
			nil,
			func(t *testing.T, s *objstore.Local) {
				seedStore(t, s, "000001-step-000005", 5, now, true)
				seedStore(t, s, "000002-step-000010", 10, now, true)
				if err := os.Truncate(filepath.Join(s.Dir, "000002-step-000010", "shards", "0.bin"), 1<<30); err != nil {
					t.Fatal(err)
				}
			},
			want{restored: "000001-step-000005", skipped: map[string]string{"000002-step-000010": "more than the 262144 bytes"}}},
		{"a FIFO where a file belongs is refused, not waited on",
			nil,
			func(t *testing.T, s *objstore.Local) {
				seedStore(t, s, "000001-step-000005", 5, now, true)
				seedStore(t, s, "000002-step-000010", 10, now, true)
				fifo := filepath.Join(s.Dir, "000002-step-000010", "shards", "0.bin")
				if err := os.Remove(fifo); err != nil {
					t.Fatal(err)
				}
				if err := syscall.Mkfifo(fifo, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want{restored: "000001-step-000005", skipped: map[string]string{"000002-step-000010": "FIFO"}}},
		{"a FIFO for a manifest is passed over by the listing",
			nil,
			func(t *testing.T, s *objstore.Local) {
				seedStore(t, s, "000001-step-000005", 5, now, true)
				seedStore(t, s, "000002-step-000010", 10, now, true)
				fifo := filepath.Join(s.Dir, "000002-step-000010", manifest.Name)
				if err := os.Remove(fifo); err != nil {
					t.Fatal(err)
				}
				if err := syscall.Mkfifo(fifo, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want{restored: "000001-step-000005"}},
		{"nothing verifies: nothing is restored, and the report says why",
			nil,
			func(t *testing.T, s *objstore.Local) {
				seedStore(t, s, "000001-step-000005", 5, now, false)
				seedStore(t, s, "best", 10, now, true)
			},
			want{skipped: map[string]string{"000001-step-000005": "lists no files", "best": "not a name"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, "H_STEPS=15")
			for _, step := range tt.local {
				commitTrainer(t, h.s.CheckpointDir, step)
			}
			store := &objstore.Local{Dir: filepath.Join(t.TempDir(), "store")}
			tt.seed(t, store)
			h.s.Store = store
			done := make(chan struct{})
			var report gpuwarden.RunReport
			var err error
			go func() {
				defer close(done)
				report, err = h.s.Run(context.Background(), nil)
			}()
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				t.Fatal("the run hung on the store")
			}
			if err != nil {
				t.Fatal(err)
			}
			st := report.Sync
			if st.Restored != tt.want.restored || report.Attempts[0].ResumedFrom != orLocal(tt.want.restored, tt.local) {
				t.Errorf("restored %q, resumed from %q; want %q", st.Restored, report.Attempts[0].ResumedFrom, tt.want.restored)
			}
			got := map[string]string{}
			for _, s := range st.RestoreSkipped {
				got[s.Checkpoint] = s.Reason
			}
			if len(got) != len(tt.want.skipped) {
				t.Errorf("skipped %v, want %v", st.RestoreSkipped, tt.want.skipped)
			}
			for name, phrase := range tt.want.skipped {
				if !strings.Contains(got[name], phrase) {
					t.Errorf("skipped %s for %q, want a reason with %q", name, got[name], phrase)
				}
			}
			pulled, _ := os.ReadDir(filepath.Join(h.s.CheckpointDir, CommittedDir))
			for _, d := range pulled {
				if _, _, ok := gpuwarden.ParseCheckpointName(d.Name()); !ok {
					t.Errorf("%q was pulled onto the box", d.Name())
				}
			}
			if fs := h.finalState(t); fs.Step != 15 || fs.Digest != wantDigest(15) {
				t.Errorf("final state %+v, want the uninterrupted one", fs)
			}
		})
	}
}

// orLocal is the checkpoint the first attempt resumes: the restored one,
// else the box's own newest.
func orLocal(restored string, local []int) string {
	if restored != "" || len(local) == 0 {
		return restored
	}
	return fmt.Sprintf("%06d-step-%06d", len(local), local[len(local)-1])
}

// TestRestoreEndsWithItsContext: a stopped supervisor stops the restore
// and starts no job.
func TestRestoreEndsWithItsContext(t *testing.T) {
	h := newHarness(t, "H_STEPS=10")
	store := &objstore.Local{Dir: filepath.Join(t.TempDir(), "store")}
	seedStore(t, store, "000001-step-000005", 5, time.Now(), true)
	h.s.Store = store
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	report, err := h.s.Run(ctx, nil)
	if err == nil || len(report.Attempts) != 0 {
		t.Errorf("err %v, %d attempts; want the cancellation and no job", err, len(report.Attempts))
	}
}

// TestAFIFOOnTheBoxIsTornNotWaitedOn: a FIFO where a committed
// checkpoint's manifest or file belongs makes it torn at once; it never
// holds the supervisor in open(2) before the job starts.
func TestAFIFOOnTheBoxIsTornNotWaitedOn(t *testing.T) {
	for _, file := range []string{manifest.Name, "state.json"} {
		t.Run(file, func(t *testing.T) {
			h := newHarness(t, "H_STEPS=10")
			root := h.s.CheckpointDir
			commitTrainer(t, root, 5)
			newer := commitTrainer(t, root, 8)
			p := filepath.Join(newer.Path, file)
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			var report gpuwarden.RunReport
			var err error
			go func() {
				defer close(done)
				report, err = h.s.Run(context.Background(), nil)
			}()
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				t.Fatal("the supervisor hung on a FIFO")
			}
			if err != nil || report.Attempts[0].ResumedFrom != "000001-step-000005" {
				t.Errorf("err %v, resumed from %q; want 000001-step-000005, the torn one skipped", err, report.Attempts[0].ResumedFrom)
			}
		})
	}
}
