package objstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/manifest"
)

// harness is one store under test plus the back doors a test needs to
// damage or inspect what the store holds. Raw paths are slash paths relative
// to the store's root (DIR, or PREFIX in the bucket), "NAME/FILE" for a
// checkpoint's file.
type harness struct {
	store gpuwarden.CheckpointStore
	// setSent installs the upload hook.
	setSent func(func(file string, size int64))
	// get and put read and replace a raw file behind the store's back.
	get func(t *testing.T, rel string) []byte
	put func(t *testing.T, rel string, data []byte)
	// all lists every raw file under the store's root, sorted.
	all func(t *testing.T) []string
}

// stored lists the raw files held under a checkpoint name, manifest
// included, relative to the checkpoint.
func (h harness) stored(t *testing.T, name string) []string {
	t.Helper()
	var out []string
	for _, p := range h.all(t) {
		if rest, ok := strings.CutPrefix(p, name+"/"); ok {
			out = append(out, rest)
		}
	}
	return out
}

// rawFiles lists the raw paths a push of cp leaves: its files and manifest.
func rawFiles(cp gpuwarden.Checkpoint) []string {
	out := []string{cp.Name + "/" + manifest.Name}
	for _, f := range cp.Files {
		out = append(out, cp.Name+"/"+f.Path)
	}
	return out
}

// sorted returns the paths sorted, for comparing listings.
func sorted(lists ...[]string) []string {
	out := []string{}
	for _, l := range lists {
		out = append(out, l...)
	}
	sort.Strings(out)
	return out
}

// sentLog counts what a push sends.
type sentLog struct {
	mu    sync.Mutex
	files []string
}

func (s *sentLog) add(file string, _ int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files = append(s.files, file)
}

func (s *sentLog) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files
	s.files = nil
	return f
}

// newCheckpoint writes files into a fresh checkpoint directory and commits it.
func newCheckpoint(t *testing.T, name string, files map[string]string) gpuwarden.Checkpoint {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeTree(t, dir, files)
	cp, err := manifest.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

var ckptFiles = map[string]string{
	"model/shard-0.safetensors": strings.Repeat("weights0", 1000),
	"model/shard-1.safetensors": strings.Repeat("weights1", 777),
	"optim.pt":                  "adam state",
	"empty":                     "",
	"rng.json":                  `{"seed":1}`,
}

// sameTree fails unless every file of want's manifest is byte-identical under got.
func sameTree(t *testing.T, want gpuwarden.Checkpoint, gotDir string) {
	t.Helper()
	for _, f := range want.Files {
		w, err := os.ReadFile(filepath.Join(want.Path, filepath.FromSlash(f.Path)))
		if err != nil {
			t.Fatal(err)
		}
		g, err := os.ReadFile(filepath.Join(gotDir, filepath.FromSlash(f.Path)))
		if err != nil {
			t.Fatalf("pulled copy: %v", err)
		}
		if !bytes.Equal(g, w) {
			t.Errorf("%s differs after the round trip", f.Path)
		}
	}
}

// noLeftovers fails when a pull left hidden temp entries in dir.
func noLeftovers(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("leftover %s in %s", e.Name(), dir)
		}
	}
}

func names(cps []gpuwarden.Checkpoint) []string {
	out := []string{}
	for _, cp := range cps {
		out = append(out, cp.Name)
	}
	return out
}

// testStore runs the behaviour every CheckpointStore must share.
func testStore(t *testing.T, open func(t *testing.T) harness) {
	ctx := context.Background()

	t.Run("round trip", func(t *testing.T) {
		h := open(t)
		var sent sentLog
		h.setSent(sent.add)
		cp := newCheckpoint(t, "000001-step-000100", ckptFiles)
		if err := h.store.Push(ctx, cp); err != nil {
			t.Fatalf("Push: %v", err)
		}
		if got := len(sent.take()); got != len(ckptFiles) {
			t.Errorf("first push sent %d files, want %d", got, len(ckptFiles))
		}
		list, err := h.store.List(ctx)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if len(list) != 1 {
			t.Fatalf("List = %v, want one checkpoint", names(list))
		}
		got := list[0]
		if got.Name != cp.Name || got.Step != 100 || got.Bytes != cp.Bytes ||
			!got.Committed.Equal(cp.Committed) || !reflect.DeepEqual(got.Files, cp.Files) {
			t.Errorf("List()[0] = %+v, want %+v", got, cp)
		}
		dir := t.TempDir()
		pulled, err := h.store.Pull(ctx, cp.Name, dir)
		if err != nil {
			t.Fatalf("Pull: %v", err)
		}
		if want := filepath.Join(dir, cp.Name); pulled.Path != want {
			t.Errorf("Pull Path = %q, want %q", pulled.Path, want)
		}
		sameTree(t, cp, pulled.Path)
		noLeftovers(t, dir)
		// The pulled directory is a committed checkpoint in its own right.
		onDisk, err := manifest.Read(pulled.Path)
		if err != nil {
			t.Fatalf("manifest.Read of the pull: %v", err)
		}
		if err := manifest.Verify(onDisk); err != nil {
			t.Errorf("manifest.Verify of the pull: %v", err)
		}
		// Pulling again into the same place reuses the intact copy.
		if _, err := h.store.Pull(ctx, cp.Name, dir); err != nil {
			t.Errorf("second Pull into the same dir: %v", err)
		}
	})

	t.Run("second push sends nothing", func(t *testing.T) {
		h := open(t)
		var sent sentLog
		h.setSent(sent.add)
		cp := newCheckpoint(t, "c1", ckptFiles)
		if err := h.store.Push(ctx, cp); err != nil {
			t.Fatalf("first Push: %v", err)
		}
		if got := len(sent.take()); got != len(ckptFiles) {
			t.Errorf("first push sent %d files, want %d", got, len(ckptFiles))
		}
		if err := h.store.Push(ctx, cp); err != nil {
			t.Fatalf("second Push: %v", err)
		}
		if got := sent.take(); len(got) != 0 {
			t.Errorf("second push sent %v, want nothing", got)
		}
	})

	t.Run("changed file alone is re-sent", func(t *testing.T) {
		h := open(t)
		var sent sentLog
		h.setSent(sent.add)
		cp := newCheckpoint(t, "c1", ckptFiles)
		if err := h.store.Push(ctx, cp); err != nil {
			t.Fatal(err)
		}
		sent.take()
		writeTree(t, cp.Path, map[string]string{"optim.pt": "adam state, later"})
		cp2, err := manifest.Build(cp.Path)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.store.Push(ctx, cp2); err != nil {
			t.Fatal(err)
		}
		if got := sent.take(); !reflect.DeepEqual(got, []string{"optim.pt"}) {
			t.Errorf("re-push sent %v, want [optim.pt]", got)
		}
		pulled, err := h.store.Pull(ctx, "c1", t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		sameTree(t, cp2, pulled.Path)
	})

	t.Run("torn push is invisible and resumes", func(t *testing.T) {
		h := open(t)
		var sent sentLog
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		// Cut the push off right after its second file, as a preemption would.
		h.setSent(func(file string, size int64) {
			sent.add(file, size)
			if len(sent.files) == 2 {
				cancel()
			}
		})
		old := newCheckpoint(t, "c0", map[string]string{"a": "old"})
		if err := h.store.Push(ctx, old); err != nil {
			t.Fatal(err)
		}
		sent.take()
		cp := newCheckpoint(t, "c1", ckptFiles)
		err := h.store.Push(cctx, cp)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cut-off Push = %v, want context.Canceled", err)
		}
		if got := len(sent.take()); got != 2 {
			t.Fatalf("cut-off push sent %d files, want 2", got)
		}
		if held := h.stored(t, "c1"); len(held) != 2 {
			t.Errorf("store holds %v for the torn push, want the 2 sent files and no manifest", held)
		}
		list, err := h.store.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(list); !reflect.DeepEqual(got, []string{"c0"}) {
			t.Errorf("List after a torn push = %v, want [c0]", got)
		}
		if _, err := h.store.Pull(ctx, "c1", t.TempDir()); gpuwarden.ErrorCodeOf(err) != gpuwarden.ENotFound {
			t.Errorf("Pull of a torn push = %v, want not found", err)
		}
		// The next sync sends only what the torn one did not.
		if err := h.store.Push(ctx, cp); err != nil {
			t.Fatal(err)
		}
		if got := len(sent.take()); got != len(ckptFiles)-2 {
			t.Errorf("resumed push sent %d files, want %d", got, len(ckptFiles)-2)
		}
		list, _ = h.store.List(ctx)
		if got := names(list); !reflect.DeepEqual(got, []string{"c0", "c1"}) {
			t.Errorf("List after the resumed push = %v, want [c0 c1]", got)
		}
	})

	t.Run("pull detects a corrupted file", func(t *testing.T) {
		h := open(t)
		cp := newCheckpoint(t, "c1", ckptFiles)
		if err := h.store.Push(ctx, cp); err != nil {
			t.Fatal(err)
		}
		b := h.get(t, "c1/model/shard-1.safetensors")
		b[len(b)/2] ^= 0xff // same size, other bytes
		h.put(t, "c1/model/shard-1.safetensors", b)
		dir := t.TempDir()
		_, err := h.store.Pull(ctx, "c1", dir)
		if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
			t.Fatalf("Pull of a corrupted checkpoint = %v, want invalid", err)
		}
		if want := "checksum mismatch in model/shard-1.safetensors"; !strings.Contains(err.Error(), want) {
			t.Errorf("Pull error = %q, want it to say %q", err, want)
		}
		if _, err := os.Stat(filepath.Join(dir, "c1")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a failed pull left %s behind (%v)", filepath.Join(dir, "c1"), err)
		}
		noLeftovers(t, dir)
	})

	t.Run("push refuses a source changed since its manifest", func(t *testing.T) {
		h := open(t)
		cp := newCheckpoint(t, "c1", map[string]string{"a": "hello"})
		writeTree(t, cp.Path, map[string]string{"a": "jello"})
		err := h.store.Push(ctx, cp)
		if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || !strings.Contains(err.Error(), "checksum mismatch in a") {
			t.Fatalf("Push of a changed source = %v, want checksum mismatch in a", err)
		}
		if held := h.stored(t, "c1"); len(held) != 0 {
			t.Errorf("store holds %v after a refused push, want nothing", held)
		}
	})

	t.Run("list is oldest first and skips damaged manifests", func(t *testing.T) {
		h := open(t)
		base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		for i, name := range []string{"c-b", "c-a", "c-c"} {
			cp := newCheckpoint(t, name, map[string]string{"f": name})
			cp.Committed = base.Add(time.Duration(3-i) * time.Minute)
			if err := h.store.Push(ctx, cp); err != nil {
				t.Fatal(err)
			}
		}
		h.put(t, "c-a/"+manifest.Name, []byte(`{"name": "c-a", "files": [`))
		list, err := h.store.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := names(list), []string{"c-c", "c-b"}; !reflect.DeepEqual(got, want) {
			t.Errorf("List = %v, want %v", got, want)
		}
	})

	t.Run("pull refuses to overwrite a different directory", func(t *testing.T) {
		h := open(t)
		cp := newCheckpoint(t, "c1", ckptFiles)
		if err := h.store.Push(ctx, cp); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		writeTree(t, dir, map[string]string{"c1/mine": "keep me"})
		_, err := h.store.Pull(ctx, "c1", dir)
		if gpuwarden.ErrorCodeOf(err) != gpuwarden.EConflict {
			t.Fatalf("Pull over an existing directory = %v, want conflict", err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "c1", "mine")); string(b) != "keep me" {
			t.Error("Pull touched the existing directory")
		}
	})

	t.Run("delete", func(t *testing.T) {
		h := open(t)
		for _, name := range []string{"c1", "c2"} {
			if err := h.store.Push(ctx, newCheckpoint(t, name, ckptFiles)); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.store.Delete(ctx, "c1"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if held := h.stored(t, "c1"); len(held) != 0 {
			t.Errorf("store still holds %v after Delete", held)
		}
		list, _ := h.store.List(ctx)
		if got := names(list); !reflect.DeepEqual(got, []string{"c2"}) {
			t.Errorf("List after Delete = %v, want [c2]", got)
		}
		if _, err := h.store.Pull(ctx, "c1", t.TempDir()); gpuwarden.ErrorCodeOf(err) != gpuwarden.ENotFound {
			t.Errorf("Pull after Delete = %v, want not found", err)
		}
		if err := h.store.Delete(ctx, "c1"); err != nil {
			t.Errorf("second Delete = %v, want nil", err)
		}
		if err := h.store.Delete(ctx, "../c2"); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
			t.Errorf("Delete(../c2) = %v, want invalid", err)
		}
		if len(h.stored(t, "c2")) == 0 {
			t.Error("c2 vanished")
		}
	})

	t.Run("delete leaves what it did not write", func(t *testing.T) {
		for _, tt := range []struct {
			name string
			// foreign are raw paths someone else put into the store.
			foreign []string
		}{
			{"nothing foreign", nil},
			{"beside the checkpoint's files", []string{"c1/notes.txt"}},
			{"in a directory of its files", []string{"c1/model/extra.bin"}},
			{"in a directory of its own", []string{"c1/other/x"}},
			{"under the prefix", []string{"README", "c1x/f", "c1.bak"}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				h := open(t)
				c1, c2 := newCheckpoint(t, "c1", ckptFiles), newCheckpoint(t, "c2", ckptFiles)
				for _, cp := range []gpuwarden.Checkpoint{c1, c2} {
					if err := h.store.Push(ctx, cp); err != nil {
						t.Fatal(err)
					}
				}
				for _, p := range tt.foreign {
					h.put(t, p, []byte("not gpuwarden's: "+p))
				}
				if err := h.store.Delete(ctx, "c1"); err != nil {
					t.Fatalf("Delete: %v", err)
				}
				if got, want := h.all(t), sorted(rawFiles(c2), tt.foreign); !reflect.DeepEqual(got, want) {
					t.Errorf("store holds %v after Delete, want %v", got, want)
				}
				for _, p := range tt.foreign {
					if got, want := string(h.get(t, p)), "not gpuwarden's: "+p; got != want {
						t.Errorf("%s = %q after Delete, want %q", p, got, want)
					}
				}
				list, err := h.store.List(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if got := names(list); !reflect.DeepEqual(got, []string{"c2"}) {
					t.Errorf("List after Delete = %v, want [c2]", got)
				}
			})
		}
	})

	t.Run("delete without a readable manifest deletes nothing", func(t *testing.T) {
		other, err := manifest.Encode(gpuwarden.Checkpoint{Name: "other", Files: []gpuwarden.ManifestFile{{Path: "a", Size: 5, SHA256: helloSHA}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			name string
			// manifest is what c1/manifest.json holds, nil for none.
			manifest []byte
			wantCode gpuwarden.ErrorCode
		}{
			{"no manifest: a torn push", nil, ""},
			{"manifest not JSON", []byte(`{"name": "c1", "files": [`), gpuwarden.EInvalid},
			{"manifest of another checkpoint", other, gpuwarden.EInvalid},
		} {
			t.Run(tt.name, func(t *testing.T) {
				h := open(t)
				h.put(t, "c1/a", []byte("hello"))
				h.put(t, "c1/model/b", []byte("world"))
				if tt.manifest != nil {
					h.put(t, "c1/"+manifest.Name, tt.manifest)
				}
				before := h.all(t)
				err := h.store.Delete(ctx, "c1")
				if got := gpuwarden.ErrorCodeOf(err); got != tt.wantCode {
					t.Fatalf("Delete = %v, want code %q", err, tt.wantCode)
				}
				if err != nil && gpuwarden.ErrorHint(err) == "" {
					t.Errorf("Delete error %q has no hint", err)
				}
				if got := h.all(t); !reflect.DeepEqual(got, before) {
					t.Errorf("store holds %v after Delete, want %v untouched", got, before)
				}
			})
		}
	})

	t.Run("keep", func(t *testing.T) {
		// Commit times run against the sequence, so that an order by time
		// would pick the wrong checkpoints.
		base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		seqNames := []string{"000001-step-000010", "000002-step-000020", "000003-step-000030", "000004-step-000040", "000005-step-000050"}
		for _, tt := range []struct {
			name    string
			extra   []string // pushed besides seqNames
			keep    int
			protect string
			// wantDeleted is in the order Keep deletes, oldest first.
			wantDeleted []string
			wantCode    gpuwarden.ErrorCode
		}{
			{name: "keep 2 of 5", keep: 2,
				wantDeleted: []string{"000001-step-000010", "000002-step-000020", "000003-step-000030"}},
			{name: "protect the oldest", keep: 2, protect: "000001-step-000010",
				wantDeleted: []string{"000002-step-000020", "000003-step-000030"}},
			{name: "protect a kept one", keep: 2, protect: "000005-step-000050",
				wantDeleted: []string{"000001-step-000010", "000002-step-000020", "000003-step-000030"}},
			{name: "protect one not stored", keep: 2, protect: "000009-step-000090",
				wantDeleted: []string{"000001-step-000010", "000002-step-000020", "000003-step-000030"}},
			{name: "keep more than there are", keep: 6, wantDeleted: []string{}},
			{name: "other names are never touched", keep: 1,
				extra:       []string{"0000010-step-000100", "final", "12345-short", "step-000900", "000000-"},
				wantDeleted: []string{"000001-step-000010", "000002-step-000020", "000003-step-000030", "000004-step-000040", "000005-step-000050"}},
			{name: "keep 0", keep: 0, wantCode: gpuwarden.EInvalid},
			{name: "keep -1", keep: -1, wantCode: gpuwarden.EInvalid},
		} {
			t.Run(tt.name, func(t *testing.T) {
				h := open(t)
				all := append(append([]string{}, seqNames...), tt.extra...)
				for i, name := range all {
					cp := newCheckpoint(t, name, map[string]string{"w": name})
					cp.Committed = base.Add(-time.Duration(i) * time.Minute)
					if err := h.store.Push(ctx, cp); err != nil {
						t.Fatal(err)
					}
				}
				deleted, err := Keep(ctx, h.store, tt.keep, tt.protect)
				if got := gpuwarden.ErrorCodeOf(err); got != tt.wantCode {
					t.Fatalf("Keep = %v, want code %q", err, tt.wantCode)
				}
				if tt.wantCode == "" && !reflect.DeepEqual(deleted, tt.wantDeleted) {
					t.Errorf("Keep deleted %v, want %v", deleted, tt.wantDeleted)
				}
				list, err := h.store.List(ctx)
				if err != nil {
					t.Fatal(err)
				}
				gone := map[string]bool{}
				for _, n := range tt.wantDeleted {
					gone[n] = true
				}
				var want []string
				for _, n := range all {
					if !gone[n] {
						want = append(want, n)
					}
				}
				if got := sorted(names(list)); !reflect.DeepEqual(got, sorted(want)) {
					t.Errorf("List after Keep = %v, want %v", got, sorted(want))
				}
				for _, n := range tt.wantDeleted {
					if held := h.stored(t, n); len(held) != 0 {
						t.Errorf("%s left %v behind", n, held)
					}
				}
			})
		}
	})

	t.Run("bad names", func(t *testing.T) {
		h := open(t)
		for _, name := range []string{"", "..", "a/b"} {
			if _, err := h.store.Pull(ctx, name, t.TempDir()); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
				t.Errorf("Pull(%q) = %v, want invalid", name, err)
			}
		}
		cp := newCheckpoint(t, "c1", map[string]string{"a": "x"})
		cp.Path = ""
		if err := h.store.Push(ctx, cp); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
			t.Errorf("Push without a path = %v, want invalid", err)
		}
	})

	t.Run("empty store", func(t *testing.T) {
		h := open(t)
		list, err := h.store.List(ctx)
		if err != nil || len(list) != 0 {
			t.Errorf("List of an empty store = %v, %v; want nothing", names(list), err)
		}
		if r, err := RegionOf(ctx, h.store); err != nil {
			t.Errorf("RegionOf = %q, %v", r, err)
		}
	})
}

func TestLocal(t *testing.T) {
	testStore(t, func(t *testing.T) harness {
		l := &Local{Dir: filepath.Join(t.TempDir(), "store")}
		return localHarness(l)
	})
}

// localHarness reaches into l's directory.
func localHarness(l *Local) harness {
	return harness{
		store:   l,
		setSent: func(f func(string, int64)) { l.Sent = f },
		get: func(t *testing.T, rel string) []byte {
			b, err := os.ReadFile(filepath.Join(l.Dir, filepath.FromSlash(rel)))
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		put: func(t *testing.T, rel string, data []byte) {
			writeTree(t, l.Dir, map[string]string{rel: string(data)})
		},
		all: func(t *testing.T) []string {
			out := []string{}
			filepath.WalkDir(l.Dir, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					rel, _ := filepath.Rel(l.Dir, p)
					out = append(out, filepath.ToSlash(rel))
				}
				return nil
			})
			sort.Strings(out)
			return out
		},
	}
}

func TestLocalWhereAndRegion(t *testing.T) {
	l := &Local{Dir: "/mnt/ckpt"}
	if got := l.Where(); got != "/mnt/ckpt" {
		t.Errorf("Where = %q", got)
	}
	if r, err := l.Region(context.Background()); r != "" || err != nil {
		t.Errorf("Region = %q, %v; want \"\", nil", r, err)
	}
}

func TestLocalPushSkipsByContentNotName(t *testing.T) {
	// A stored file of the right size but other bytes must be replaced, or a
	// half-written copy from a crashed push would live on.
	ctx := context.Background()
	l := &Local{Dir: t.TempDir()}
	var sent sentLog
	l.Sent = sent.add
	cp := newCheckpoint(t, "c1", map[string]string{"a": "hello", "b": "world"})
	writeTree(t, l.Dir, map[string]string{"c1/a": "jello", "c1/b": "world"})
	if err := l.Push(ctx, cp); err != nil {
		t.Fatal(err)
	}
	if got := sent.take(); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("push sent %v, want [a]", got)
	}
	if b, _ := os.ReadFile(filepath.Join(l.Dir, "c1", "a")); string(b) != "hello" {
		t.Errorf("stored a = %q, want hello", b)
	}
}
