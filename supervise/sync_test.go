package supervise

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/objstore"
)

// flakyStore is a directory store whose pushes start failing after okPushes,
// as a bucket does when its server breaks mid-run.
type flakyStore struct {
	*objstore.Local
	mu       sync.Mutex
	okPushes int
	pushes   int
	listErr  error
}

func (f *flakyStore) Push(ctx context.Context, cp gpuwarden.Checkpoint) error {
	f.mu.Lock()
	f.pushes++
	n := f.pushes
	f.mu.Unlock()
	if f.okPushes >= 0 && n > f.okPushes {
		return errors.New("503 Service Unavailable: the server is down")
	}
	return f.Local.Push(ctx, cp)
}

func (f *flakyStore) List(ctx context.Context) ([]gpuwarden.Checkpoint, error) {
	if f.listErr != nil {
		return nil, f.listErr
	}
	return f.Local.List(ctx)
}

func newStore(t *testing.T, okPushes int) *flakyStore {
	t.Helper()
	return &flakyStore{Local: &objstore.Local{Dir: filepath.Join(t.TempDir(), "bucket")}, okPushes: okPushes}
}

func TestRunReportsDurability(t *testing.T) {
	t.Parallel()
	t.Run("every checkpoint reaches the store", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, "H_STEPS=20")
		store := newStore(t, -1)
		h.s.Store = store
		var protected []string
		h.s.KeepRemote = func(ctx context.Context, protect string) ([]string, error) {
			protected = append(protected, protect)
			return nil, nil
		}
		report, err := h.s.Run(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		st := report.Sync
		if report.Result != gpuwarden.ResultOK || st == nil || !st.Durable || st.Uploaded != 4 || st.Failed != 0 {
			t.Fatalf("result %s sync %+v, want ok with 4 verified uploads", report.Result, st)
		}
		if st.NewestDurable == nil || st.NewestDurable.Step != 20 || st.NewestDurable.URL != store.Where()+"/"+st.NewestCommitted {
			t.Errorf("newest durable = %+v, want step 20 at its URL", st.NewestDurable)
		}
		if len(protected) != 4 || protected[3] != st.NewestCommitted {
			t.Errorf("KeepRemote protected %v, want each new durable checkpoint", protected)
		}
	})
	t.Run("a job faster than the sync: nothing is pruned before it is synced", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, "H_STEPS=50", "H_STEP_MS=1")
		h.s.Store, h.s.Keep = newStore(t, -1), 2
		report, err := h.s.Run(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if st := report.Sync; len(report.Checkpoints) != 10 || st.Uploaded != 10 || !st.Durable {
			t.Errorf("%d checkpoints reported, sync %+v; want all 10 reported and uploaded", len(report.Checkpoints), st)
		}
	})
	t.Run("a store that breaks mid-run: not durable, and the newest durable step is named", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, "H_STEPS=20")
		h.s.Store = newStore(t, 2)
		var heard []gpuwarden.SyncReport
		h.s.OnSync = func(r gpuwarden.SyncReport) { heard = append(heard, r) }
		report, err := h.s.Run(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		st := report.Sync
		if report.Result != gpuwarden.ResultNotDurable || st.Durable || st.Uploaded != 2 || st.Failed != 3 {
			t.Fatalf("result %s sync %+v, want not-durable: 2 uploads, 2 failures and the retry at the end", report.Result, st)
		}
		if st.NewestDurable == nil || st.NewestDurable.Step != 10 || !strings.Contains(report.Why, "newest durable one is step 10") {
			t.Errorf("why %q newest durable %+v, want step 10 named", report.Why, st.NewestDurable)
		}
		if len(st.Failures) == 0 || !strings.Contains(st.Failures[0].Error, "503") {
			t.Errorf("failures = %+v", st.Failures)
		}
		if last := heard[len(heard)-1]; last.Durable {
			t.Errorf("the agent was told the run is durable: %+v", last)
		}
	})
	t.Run("a fresh box resumes the store's newest checkpoint that verifies", func(t *testing.T) {
		t.Parallel()
		store := newStore(t, -1)
		first := newHarness(t, "H_STEPS=15")
		first.s.Store = store
		if r, err := first.s.Run(context.Background(), nil); err != nil || r.Result != gpuwarden.ResultOK {
			t.Fatalf("first box: %v %+v", err, r)
		}
		remote, err := store.List(context.Background())
		if err != nil || len(remote) != 3 {
			t.Fatalf("store holds %d checkpoints (%v)", len(remote), err)
		}
		// The newest one's bytes go bad in the store.
		if err := os.WriteFile(filepath.Join(store.Dir, remote[2].Name, "state.json"), []byte(`{"step":15,"digest":"bad"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		fresh := newHarness(t, "H_STEPS=30")
		fresh.s.Store = store
		report, err := fresh.s.Run(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if report.Sync.Restored != remote[1].Name || report.Attempts[0].ResumedFrom != remote[1].Name {
			t.Errorf("restored %q, resumed from %q; want the newest that verifies, %s", report.Sync.Restored, report.Attempts[0].ResumedFrom, remote[1].Name)
		}
		if st := fresh.finalState(t); st.Step != 30 || st.Digest != wantDigest(30) {
			t.Errorf("final state = %+v, want the uninterrupted one", st)
		}
	})
	t.Run("a store that cannot be listed stops a box with nothing to resume", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, "H_STEPS=10")
		store := newStore(t, -1)
		store.listErr = errors.New("dial tcp: connection refused")
		h.s.Store = store
		report, err := h.s.Run(context.Background(), nil)
		if err == nil || !strings.Contains(gpuwarden.ErrorHint(err), "could redo work") || len(report.Attempts) != 0 {
			t.Errorf("err = %v (hint %q), attempts %d; want a refusal before the job starts", err, gpuwarden.ErrorHint(err), len(report.Attempts))
		}
	})
	t.Run("a newest checkpoint the store lacks is uploaded before the job starts", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, "H_STEPS=10", "H_IGNORE_RESUME=1")
		commitSteps(t, h.s.CheckpointDir, 5)
		store := newStore(t, -1)
		h.s.Store = store
		report, err := h.s.Run(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if report.Sync.Uploaded != 3 || !report.Sync.Durable {
			t.Errorf("sync %+v, want the old checkpoint healed and the new one uploaded", report.Sync)
		}
	})
}
