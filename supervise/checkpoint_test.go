package supervise

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/manifest"
)

// writeCheckpoint writes a checkpoint directory under root/incoming with
// the given files, and the marker when marked.
func writeCheckpoint(t *testing.T, root, name string, files map[string]string, marked bool) string {
	t.Helper()
	dir := filepath.Join(root, IncomingDir, name)
	for rel, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if marked {
		if err := os.WriteFile(filepath.Join(dir, MarkerName), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// openRoot opens a checkpoint root for a test and closes it at the end.
func openRoot(t *testing.T, dir string) *Root {
	t.Helper()
	r, err := OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// validatePath validates the committed checkpoint at path, for tests that
// hold only its path.
func validatePath(t *testing.T, path string) (gpuwarden.Checkpoint, error) {
	t.Helper()
	return openRoot(t, filepath.Dir(filepath.Dir(path))).validate(filepath.Base(path), nil)
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestStepOf(t *testing.T) {
	tests := []struct {
		name string
		want int64
	}{
		{"step-000120", 120},
		{"epoch3-step120", 120},
		{"global_step7_final", 7},
		{"120", 120},
		{"latest", -1},
		{"", -1},
		{"step-99999999999999999999999", -1},
	}
	for _, tt := range tests {
		if got := stepOf(tt.name); got != tt.want {
			t.Errorf("stepOf(%q) = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestCommitWritesManifestAndRenamesAtomically(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{"model.bin": "weights", "optim/state.bin": "adam", "rng.json": "{}"}
	dir := writeCheckpoint(t, root, "step-000120", files, true)
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

	cp, err := commit(openRoot(t, root), dir, func() time.Time { return now }, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantPath := filepath.Join(root, CommittedDir, "000001-step-000120")
	if cp.Name != "000001-step-000120" || cp.Path != wantPath || cp.Step != 120 || !cp.Committed.Equal(now) {
		t.Errorf("got %s at %s step %d committed %v", cp.Name, cp.Path, cp.Step, cp.Committed)
	}
	wantFiles := []gpuwarden.ManifestFile{
		{Path: "model.bin", Size: 7, SHA256: sum("weights")},
		{Path: "optim/state.bin", Size: 4, SHA256: sum("adam")},
		{Path: "rng.json", Size: 2, SHA256: sum("{}")},
	}
	if !reflect.DeepEqual(cp.Files, wantFiles) {
		t.Errorf("files = %+v, want %+v (sorted, marker and manifest left out)", cp.Files, wantFiles)
	}
	if cp.Bytes != 13 {
		t.Errorf("bytes = %d, want 13", cp.Bytes)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("incoming directory still there after the commit: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(wantPath, manifest.Name))
	if err != nil {
		t.Fatal(err)
	}
	var onDisk gpuwarden.Checkpoint
	if err := json.Unmarshal(data, &onDisk); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(onDisk.Files, wantFiles) || onDisk.Name != cp.Name || onDisk.Step != 120 {
		t.Errorf("manifest on disk = %+v", onDisk)
	}
	for _, gone := range []string{manifest.TempPrefix, MarkerName} {
		if _, err := os.Stat(filepath.Join(wantPath, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left in the committed checkpoint", gone)
		}
	}
	got, err := validatePath(t, wantPath)
	if err != nil {
		t.Fatalf("validate a fresh commit: %v", err)
	}
	if got.Path != wantPath || got.Name != cp.Name {
		t.Errorf("validate = %s at %s", got.Name, got.Path)
	}

	// The sequence is one above the highest existing one, pruned or not.
	if err := os.Mkdir(filepath.Join(root, CommittedDir, "000007-old"), 0o755); err != nil {
		t.Fatal(err)
	}
	cp2, err := Commit(root, writeCheckpoint(t, root, "latest", map[string]string{"a": "b"}, false))
	if err != nil {
		t.Fatal(err)
	}
	if cp2.Name != "000008-latest" || cp2.Step != -1 {
		t.Errorf("second commit = %s step %d, want 000008-latest step -1", cp2.Name, cp2.Step)
	}
}

func TestCommitRefuses(t *testing.T) {
	root := t.TempDir()
	t.Run("symlink", func(t *testing.T) {
		dir := writeCheckpoint(t, root, "step-1", map[string]string{"a": "x"}, true)
		if err := os.Symlink("/etc/hostname", filepath.Join(dir, "link")); err != nil {
			t.Fatal(err)
		}
		if _, err := Commit(root, dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("err = %v, want a refusal of the symlink", err)
		}
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("refused checkpoint moved: %v", err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		_, err := Commit(root, filepath.Join(root, IncomingDir, "nope"))
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("err = %v, want not exist", err)
		}
	})
	t.Run("already committed", func(t *testing.T) {
		cp, err := Commit(root, writeCheckpoint(t, root, "step-2", map[string]string{"a": "x"}, true))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Commit(root, cp.Path); gpuwarden.ErrorCodeOf(err) != gpuwarden.EConflict {
			t.Errorf("err = %v, want a conflict", err)
		}
	})
}

// commitSteps commits one small checkpoint per step, returning them in order.
func commitSteps(t *testing.T, root string, steps ...int) []gpuwarden.Checkpoint {
	t.Helper()
	var out []gpuwarden.Checkpoint
	for _, s := range steps {
		name := fmt.Sprintf("step-%06d", s)
		cp, err := Commit(root, writeCheckpoint(t, root, name, map[string]string{"w.bin": name + " weights", "sub/o.bin": "optimizer"}, true))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, cp)
	}
	return out
}

func TestTornCheckpointIsNeverChosen(t *testing.T) {
	tests := []struct {
		name   string
		tear   func(t *testing.T, cp gpuwarden.Checkpoint)
		reason string
	}{
		{"corrupted after commit", func(t *testing.T, cp gpuwarden.Checkpoint) {
			p := filepath.Join(cp.Path, "w.bin")
			b, _ := os.ReadFile(p)
			b[0] ^= 0xff
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "sha256"},
		{"truncated", func(t *testing.T, cp gpuwarden.Checkpoint) {
			if err := os.Truncate(filepath.Join(cp.Path, "sub", "o.bin"), 3); err != nil {
				t.Fatal(err)
			}
		}, "is 3 bytes"},
		{"file deleted", func(t *testing.T, cp gpuwarden.Checkpoint) {
			if err := os.Remove(filepath.Join(cp.Path, "w.bin")); err != nil {
				t.Fatal(err)
			}
		}, "missing"},
		{"no manifest", func(t *testing.T, cp gpuwarden.Checkpoint) {
			if err := os.Remove(filepath.Join(cp.Path, manifest.Name)); err != nil {
				t.Fatal(err)
			}
		}, "no manifest"},
		{"garbled manifest", func(t *testing.T, cp gpuwarden.Checkpoint) {
			if err := os.WriteFile(filepath.Join(cp.Path, manifest.Name), []byte("{\"files\": ["), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "unreadable"},
		{"manifest escapes", func(t *testing.T, cp gpuwarden.Checkpoint) {
			cp.Files = append(cp.Files, gpuwarden.ManifestFile{Path: "../../etc/passwd"})
			b, _ := json.Marshal(cp)
			if err := os.WriteFile(filepath.Join(cp.Path, manifest.Name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "outside"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			cps := commitSteps(t, root, 10, 20)
			// An unmarked write of a newer step is not even a candidate.
			writeCheckpoint(t, root, "step-000030", map[string]string{"w.bin": "half"}, false)
			tt.tear(t, cps[1])

			newest, ok, err := Newest(root)
			if err != nil || !ok {
				t.Fatalf("newest: ok %v err %v", ok, err)
			}
			if newest.Name != cps[0].Name {
				t.Errorf("newest = %s, want the older valid %s", newest.Name, cps[0].Name)
			}
			valid, torn, err := List(root)
			if err != nil {
				t.Fatal(err)
			}
			if len(valid) != 1 || valid[0].Name != cps[0].Name {
				t.Errorf("valid = %v", valid)
			}
			if len(torn) != 1 || torn[0].Name != cps[1].Name || !strings.Contains(torn[0].Reason, tt.reason) {
				t.Errorf("torn = %+v, want %s with a reason containing %q", torn, cps[1].Name, tt.reason)
			}
		})
	}
}

func TestPrune(t *testing.T) {
	root := t.TempDir()
	cps := commitSteps(t, root, 1, 2, 3, 4, 5)
	for _, i := range []int{1, 4} { // step 2 (older than valid ones) and step 5 (the newest)
		if err := os.Remove(filepath.Join(cps[i].Path, "w.bin")); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := Prune(root, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{cps[1].Name, cps[0].Name}; !reflect.DeepEqual(removed, want) {
		t.Errorf("removed = %v, want %v", removed, want)
	}
	es, _ := openRoot(t, root).entries()
	var left []string
	for _, e := range es {
		left = append(left, e.name)
	}
	// The two newest valid ones, and the torn one newer than both.
	if want := []string{cps[2].Name, cps[3].Name, cps[4].Name}; !reflect.DeepEqual(left, want) {
		t.Errorf("left = %v, want %v", left, want)
	}
	if _, err := Prune(root, 0); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
		t.Errorf("keep 0: err = %v, want invalid", err)
	}
}

// The prune cache must not hide a file rewritten after its commit.
func TestPruneCacheSeesRewrites(t *testing.T) {
	root := t.TempDir()
	r := openRoot(t, root)
	cache := newHashCache()
	var cps []gpuwarden.Checkpoint
	for _, name := range []string{"step-1", "step-2"} {
		cp, err := commit(r, writeCheckpoint(t, root, name, map[string]string{"w.bin": "0123456789"}, true), time.Now, cache)
		if err != nil {
			t.Fatal(err)
		}
		cps = append(cps, cp)
	}
	if removed, err := r.prune(2, cache, 0); err != nil || len(removed) != 0 {
		t.Fatalf("prune of two valid ones: removed %v, err %v", removed, err)
	}
	time.Sleep(20 * time.Millisecond) // past the file system's timestamp granularity
	if err := os.WriteFile(filepath.Join(cps[1].Path, "w.bin"), []byte("9876543210"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := r.validate(cps[1].Name, cache); err == nil {
		t.Fatal("a rewritten file passed validation through the cache")
	}
}

func TestWatcherCommitsMarkedAndReportsNew(t *testing.T) {
	root := t.TempDir()
	old := commitSteps(t, root, 1)
	var got []string
	w, err := NewWatcher(openRoot(t, root), func(cp gpuwarden.Checkpoint) { got = append(got, cp.Name) }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cps := w.Scan(); len(cps) != 0 {
		t.Errorf("reported %v committed before the watcher started", cps)
	}
	dir := writeCheckpoint(t, root, "step-000020", map[string]string{"w.bin": "x"}, false)
	if cps := w.Scan(); len(cps) != 0 {
		t.Fatalf("committed %v without its marker", cps)
	}
	if err := os.WriteFile(filepath.Join(dir, MarkerName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Written by another process: `gpuwarden checkpoint commit DIR`.
	if _, err := Commit(root, writeCheckpoint(t, root, "step-000030", map[string]string{"w.bin": "y"}, false)); err != nil {
		t.Fatal(err)
	}
	w.Scan()
	want := []string{"000002-step-000030", "000003-step-000020"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("reported %v, want %v (not %s)", got, want, old[0].Name)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("marked directory not moved: %v", err)
	}
}

// precious fills a folder outside the checkpoint root with data that is
// not gpuwarden's, and returns a check that it is all still there.
func precious(t *testing.T) (string, func(t *testing.T)) {
	t.Helper()
	dir := t.TempDir()
	for _, p := range []string{"precious-data/a.bin", "precious-data/sub/b.bin", "notes.txt"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, func(t *testing.T) {
		t.Helper()
		for _, p := range []string{"precious-data/a.bin", "precious-data/sub/b.bin", "notes.txt"} {
			if b, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(b) != p {
				t.Errorf("%s outside the root was touched: %v", p, err)
			}
		}
	}
}

// TestRootRefusesSymlinkedFolders: a symlinked incoming/ or committed/ is
// refused before anything is renamed or deleted in its target.
func TestRootRefusesSymlinkedFolders(t *testing.T) {
	for _, sub := range []string{IncomingDir, CommittedDir} {
		t.Run(sub, func(t *testing.T) {
			target, intact := precious(t)
			root := t.TempDir()
			if err := os.Symlink(target, filepath.Join(root, sub)); err != nil {
				t.Fatal(err)
			}
			_, err := OpenRoot(root)
			if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || !strings.Contains(err.Error(), "is a symlink") ||
				!strings.Contains(gpuwarden.ErrorHint(err), "point --checkpoint-dir at the real folder") {
				t.Errorf("err = %v (hint %q), want a refusal naming the symlink and the fix", err, gpuwarden.ErrorHint(err))
			}
			h := newHarness(t, "H_STEPS=10")
			h.s.CheckpointDir = root
			if _, err := h.s.Run(context.Background(), nil); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
				t.Errorf("run over a symlinked %s: err = %v, want invalid", sub, err)
			}
			intact(t)
		})
	}
}

// The root itself may be a symlink to a bigger disk: it is resolved once.
func TestRootMayItselfBeASymlink(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "ckpt")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	cps := commitSteps(t, link, 1)
	if want := filepath.Join(real, CommittedDir, cps[0].Name); cps[0].Path != want {
		t.Errorf("committed at %s, want the resolved %s", cps[0].Path, want)
	}
	if _, ok, err := Newest(link); !ok || err != nil {
		t.Errorf("newest through the link: ok %v err %v", ok, err)
	}
}

// Only what gpuwarden committed is pruned; a person's folder in committed/
// and a symlink in incoming/ are left alone, and so are their targets.
func TestOnlyGpuwardensEntriesAreRemoved(t *testing.T) {
	target, intact := precious(t)
	root := t.TempDir()
	r := openRoot(t, root)
	foreign := filepath.Join(root, CommittedDir, "precious-data")
	if err := os.MkdirAll(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(foreign, "keep.bin"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(target, "precious-data"), filepath.Join(root, IncomingDir, "linked")); err != nil {
		t.Fatal(err)
	}
	commitSteps(t, root, 1, 2, 3, 4)
	writeCheckpoint(t, root, "step-000005", map[string]string{"w.bin": "half"}, false)
	removed, err := r.prune(1, nil, 0)
	if err != nil || len(removed) != 3 {
		t.Errorf("prune removed %v (err %v), want the 3 older checkpoints", removed, err)
	}
	cleaned, err := r.cleanIncoming()
	if err != nil || !reflect.DeepEqual(cleaned, []string{"step-000005"}) {
		t.Errorf("clean removed %v (err %v), want only the partial step-000005", cleaned, err)
	}
	if b, err := os.ReadFile(filepath.Join(foreign, "keep.bin")); err != nil || string(b) != "mine" {
		t.Errorf("a folder gpuwarden did not commit was touched: %v", err)
	}
	valid, torn, err := r.list()
	if err != nil || len(valid) != 1 || len(torn) != 0 {
		t.Errorf("list = %d valid, %v torn (err %v): a foreign folder is not a checkpoint", len(valid), torn, err)
	}
	intact(t)
}

// TestManifestMustVouchForEveryFile: a manifest that lists nothing, or
// files behind a symlink, never validates.
func TestManifestMustVouchForEveryFile(t *testing.T) {
	tests := []struct {
		name   string
		tear   func(t *testing.T, root string, cp gpuwarden.Checkpoint)
		reason string
	}{
		{"no files listed", func(t *testing.T, root string, cp gpuwarden.Checkpoint) {
			cp.Files, cp.Path = []gpuwarden.ManifestFile{}, ""
			b, _ := json.Marshal(cp)
			if err := os.WriteFile(filepath.Join(root, CommittedDir, cp.Name, manifest.Name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "lists no files"},
		{"a folder replaced by a symlink out of the root", func(t *testing.T, root string, cp gpuwarden.Checkpoint) {
			outside := t.TempDir()
			// The same bytes outside: only the symlink gives it away.
			if err := os.WriteFile(filepath.Join(outside, "o.bin"), []byte("optimizer"), 0o644); err != nil {
				t.Fatal(err)
			}
			sub := filepath.Join(root, CommittedDir, cp.Name, "sub")
			if err := os.RemoveAll(sub); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, sub); err != nil {
				t.Fatal(err)
			}
		}, "symlink"},
		{"a folder replaced by a symlink inside the root", func(t *testing.T, root string, cp gpuwarden.Checkpoint) {
			other := filepath.Join(root, "elsewhere")
			if err := os.MkdirAll(other, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(other, "o.bin"), []byte("optimizer"), 0o644); err != nil {
				t.Fatal(err)
			}
			sub := filepath.Join(root, CommittedDir, cp.Name, "sub")
			if err := os.RemoveAll(sub); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("../../elsewhere", sub); err != nil {
				t.Fatal(err)
			}
		}, "symlink"},
		{"a file replaced by a symlink", func(t *testing.T, root string, cp gpuwarden.Checkpoint) {
			outside := filepath.Join(t.TempDir(), "w.bin")
			if err := os.WriteFile(outside, []byte(cp.Name[7:]+" weights"), 0o644); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(root, CommittedDir, cp.Name, "w.bin")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, p); err != nil {
				t.Fatal(err)
			}
		}, "symlink"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			cps := commitSteps(t, root, 10, 20)
			tt.tear(t, root, cps[1])
			newest, ok, err := Newest(root)
			if err != nil || !ok || newest.Name != cps[0].Name {
				t.Errorf("newest = %s (ok %v, err %v), want the older %s", newest.Name, ok, err, cps[0].Name)
			}
			_, torn, err := List(root)
			if err != nil || len(torn) != 1 || !strings.Contains(torn[0].Reason, tt.reason) {
				t.Errorf("torn = %+v (err %v), want %s torn for %q", torn, err, cps[1].Name, tt.reason)
			}
		})
	}
}

func TestCommitStaysInIncoming(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "step-1")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "w.bin"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Commit(root, outside); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || !strings.Contains(err.Error(), "outside the checkpoint root") {
		t.Errorf("commit of a folder outside the root: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(root, IncomingDir, "step-2"), 0o755); err != nil {
		t.Fatal(err)
	}
	empty := writeCheckpoint(t, root, "step-2", nil, true)
	if _, err := Commit(root, empty); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || !strings.Contains(err.Error(), "holds no files") {
		t.Errorf("commit of an empty checkpoint: %v", err)
	}
}
