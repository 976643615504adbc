package manifest

import (
	"encoding/json"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

// FuzzDecode feeds Decode the manifest bytes a restore reads from object
// storage, which anyone with write access to the bucket can forge. What
// Decode accepts must be safe to join onto the checkpoint's folder: every
// file lands strictly below it, none is the manifest, none is listed twice
// or is the folder of another, and every hash is a sha256.
func FuzzDecode(f *testing.F) {
	good := gpuwarden.Checkpoint{Name: "000003-step-000120", Step: 120, Bytes: 5,
		Files: []gpuwarden.ManifestFile{{Path: "model/weights.bin", Size: 5, SHA256: helloSHA}, {Path: "opt.pt", Size: 0, SHA256: helloSHA}}}
	b, _ := json.Marshal(good)
	f.Add(b, good.Name)
	for _, p := range []string{".", "..", "../x", "a/../../x", "/etc/passwd", "a\\b", "model", "model/weights.bin/x", Name, "./a", "a//b"} {
		bad := good
		bad.Files = append([]gpuwarden.ManifestFile{{Path: p, Size: 1, SHA256: helloSHA}}, good.Files...)
		b, _ := json.Marshal(bad)
		f.Add(b, good.Name)
	}
	f.Add([]byte(`{"name":"..","files":[]}`), "..")
	f.Add([]byte(`{"name":"c","files":[{"path":"a","size":-1,"sha256":"00"}]}`), "c")
	f.Add([]byte(`not json`), "c")
	const root = "/ckpt/root"
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		cp, err := Decode(data, name)
		if err != nil {
			if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
				t.Fatalf("Decode error %v has code %q, want invalid", err, gpuwarden.ErrorCodeOf(err))
			}
			return
		}
		if cp.Name != name || cp.Path != "" {
			t.Fatalf("accepted name %q path %q for %q", cp.Name, cp.Path, name)
		}
		if dir := filepath.Join(root, cp.Name); filepath.Dir(dir) != root {
			t.Fatalf("name %q leaves the checkpoints' folder: %s", cp.Name, dir)
		}
		files := map[string]bool{}
		for _, f := range cp.Files {
			files[f.Path] = true
		}
		if len(files) != len(cp.Files) {
			t.Fatalf("a path is listed twice: %+v", cp.Files)
		}
		for _, f := range cp.Files {
			full := filepath.Join(root, filepath.FromSlash(f.Path))
			rel, err := filepath.Rel(root, full)
			if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || rel != filepath.FromSlash(f.Path) {
				t.Fatalf("file %q does not land strictly below the checkpoint: %s", f.Path, full)
			}
			if f.Path == Name || f.Size < 0 || len(f.SHA256) != 64 {
				t.Fatalf("accepted %+v", f)
			}
			for dir := path.Dir(f.Path); dir != "."; dir = path.Dir(dir) {
				if files[dir] {
					t.Fatalf("%q is listed as a file and as the folder of %q", dir, f.Path)
				}
			}
		}
	})
}
