package objstore

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/manifest"
)

// snapshot maps every file under dir to its content, links as "-> target".
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			out[rel] = "-> " + target
			return err
		}
		b, err := os.ReadFile(p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLocalRefusesSymlinks moves a part of a stored checkpoint out of the
// store and links it back in, as someone sharing the directory might, and
// checks that no operation reaches through the link.
func TestLocalRefusesSymlinks(t *testing.T) {
	ctx := context.Background()
	// linked is the newest checkpoint, the one with a link in it; older is
	// the one Keep would delete if it believed linked listed.
	const linked, older = "000002-step-000020", "000001-step-000010"
	for _, link := range []struct {
		name string
		// rel is the part of the linked checkpoint that becomes a link.
		rel string
	}{
		{"checkpoint directory", linked},
		{"subdirectory", linked + "/model"},
		{"manifest", linked + "/" + manifest.Name},
		{"file", linked + "/optim.pt"},
	} {
		for _, op := range []struct {
			name string
			// do runs the operation and reports whether it refused.
			do func(t *testing.T, l *Local) error
		}{
			{"push", func(t *testing.T, l *Local) error {
				// Other bytes under the same name, so a push through the
				// link would write into the linked place.
				changed := map[string]string{}
				for p := range ckptFiles {
					changed[p] = "changed " + p
				}
				return l.Push(ctx, newCheckpoint(t, linked, changed))
			}},
			{"pull", func(t *testing.T, l *Local) error {
				dir := t.TempDir()
				_, err := l.Pull(ctx, linked, dir)
				if _, serr := os.Lstat(filepath.Join(dir, linked)); !errors.Is(serr, fs.ErrNotExist) {
					t.Errorf("a refused pull left %s behind", filepath.Join(dir, linked))
				}
				return err
			}},
			{"delete", func(t *testing.T, l *Local) error { return l.Delete(ctx, linked) }},
			{"keep", func(t *testing.T, l *Local) error {
				// Were the linked checkpoint listed, keeping 1 would delete
				// the older one and trust the linked one as the newest.
				deleted, err := Keep(ctx, l, 1, "")
				if err != nil || len(deleted) != 0 {
					t.Errorf("Keep = %v, %v; want nothing deleted", deleted, err)
				}
				return nil
			}},
		} {
			t.Run(link.name+"/"+op.name, func(t *testing.T) {
				l := &Local{Dir: filepath.Join(t.TempDir(), "store")}
				if err := l.Push(ctx, newCheckpoint(t, older, map[string]string{"a": "hello"})); err != nil {
					t.Fatal(err)
				}
				if err := l.Push(ctx, newCheckpoint(t, linked, ckptFiles)); err != nil {
					t.Fatal(err)
				}
				outside := filepath.Join(t.TempDir(), "elsewhere")
				if err := os.Rename(filepath.Join(l.Dir, filepath.FromSlash(link.rel)), outside); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(outside, filepath.Join(l.Dir, filepath.FromSlash(link.rel))); err != nil {
					t.Fatal(err)
				}
				before := snapshot(t, filepath.Dir(outside))
				store := snapshot(t, l.Dir)

				err := op.do(t, l)
				if op.name != "keep" {
					if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || !strings.Contains(err.Error(), "is a symlink") || gpuwarden.ErrorHint(err) == "" {
						t.Errorf("%s through a linked %s = %v (hint %q), want a refusal with a hint", op.name, link.name, err, gpuwarden.ErrorHint(err))
					}
				}
				if got := snapshot(t, filepath.Dir(outside)); !reflect.DeepEqual(got, before) {
					t.Errorf("the linked-to place changed:\n got %v\nwant %v", got, before)
				}
				if got := snapshot(t, l.Dir); !reflect.DeepEqual(got, store) {
					t.Errorf("the store changed:\n got %v\nwant %v", got, store)
				}
				list, err := l.List(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if got := names(list); !reflect.DeepEqual(got, []string{older}) {
					t.Errorf("List = %v, want the linked checkpoint left out: [%s]", got, older)
				}
			})
		}
	}
}

// dirsUnder lists the directories under root, root left out.
func dirsUnder(t *testing.T, root string) []string {
	t.Helper()
	out := []string{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != root {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(out)
	return out
}

func TestLocalDeleteRemovesOnlyDirectoriesItEmptied(t *testing.T) {
	ctx := context.Background()
	files := map[string]string{"a": "1", "model/deep/w": "2", "model/x": "3", "opt/s": "4"}
	for _, tt := range []struct {
		name string
		// foreign are files and (ending in /) empty directories someone
		// else put into the checkpoint's directory.
		foreign  []string
		wantDirs []string
	}{
		{"all of it", nil, []string{}},
		{"a foreign file deep down", []string{"c1/model/deep/mine"}, []string{"c1", "c1/model", "c1/model/deep"}},
		{"a foreign file at the top", []string{"c1/mine"}, []string{"c1"}},
		{"a foreign empty directory", []string{"c1/opt/cache/"}, []string{"c1", "c1/opt", "c1/opt/cache"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := &Local{Dir: filepath.Join(t.TempDir(), "store")}
			if err := l.Push(ctx, newCheckpoint(t, "c1", files)); err != nil {
				t.Fatal(err)
			}
			for _, p := range tt.foreign {
				if dir, ok := strings.CutSuffix(p, "/"); ok {
					if err := os.MkdirAll(filepath.Join(l.Dir, filepath.FromSlash(dir)), 0o755); err != nil {
						t.Fatal(err)
					}
					continue
				}
				writeTree(t, l.Dir, map[string]string{p: "mine"})
			}
			if err := l.Delete(ctx, "c1"); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if got := dirsUnder(t, l.Dir); !reflect.DeepEqual(got, tt.wantDirs) {
				t.Errorf("directories after Delete = %v, want %v", got, tt.wantDirs)
			}
		})
	}
}

func TestLocalDeleteLeavesWhatReplacedAListedFile(t *testing.T) {
	// A directory where the manifest lists a file, or a file where it
	// implies a directory, was put there by someone else and must stay.
	ctx := context.Background()
	for _, tt := range []struct {
		name, rel string
		// replace turns the stored rel into something the push did not write.
		replace func(t *testing.T, p string)
		want    []string
	}{
		{"directory instead of a file", "c1/model/w", func(t *testing.T, p string) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			writeTree(t, p, map[string]string{"inner": "mine"})
		}, []string{"c1/model/w/inner"}},
		{"file instead of a directory", "c1/model", func(t *testing.T, p string) {
			if err := os.RemoveAll(p); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("mine"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, []string{"c1/model"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := &Local{Dir: filepath.Join(t.TempDir(), "store")}
			h := localHarness(l)
			if err := l.Push(ctx, newCheckpoint(t, "c1", map[string]string{"a": "1", "model/w": "2"})); err != nil {
				t.Fatal(err)
			}
			tt.replace(t, filepath.Join(l.Dir, filepath.FromSlash(tt.rel)))
			if err := l.Delete(ctx, "c1"); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if got := h.all(t); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("store holds %v after Delete, want %v", got, tt.want)
			}
		})
	}
}
