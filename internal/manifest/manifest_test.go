package manifest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

// sha256 of "hello" and of the empty string.
const (
	helloSHA = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
	emptySHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

// writeTree creates files (slash paths → content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStepOf(t *testing.T) {
	tests := []struct {
		name string
		want int64
	}{
		{"000003-step-000120", 120},
		{"step-7", 7},
		{"step7", 7},
		{"ckpt_step_42", 42},
		{"Step-0009", 9},
		{"000003", -1},
		{"footstep", -1},
		{"", -1},
		{"step-", -1},
	}
	for _, tt := range tests {
		if got := StepOf(tt.name); got != tt.want {
			t.Errorf("StepOf(%q) = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestManifest(t *testing.T) {
	tests := []struct {
		name      string
		files     map[string]string
		wantFiles []gpuwarden.ManifestFile
		wantBytes int64
	}{
		{
			name: "nested files sorted, manifest left out",
			files: map[string]string{
				"optim.pt":        "hello",
				"model/shard-1":   "",
				"model/shard-0":   "hello",
				Name:              `{"stale":true}`,
				"model/" + ".tmp": "hello",
			},
			wantFiles: []gpuwarden.ManifestFile{
				{Path: "model/.tmp", Size: 5, SHA256: helloSHA},
				{Path: "model/shard-0", Size: 5, SHA256: helloSHA},
				{Path: "model/shard-1", Size: 0, SHA256: emptySHA},
				{Path: "optim.pt", Size: 5, SHA256: helloSHA},
			},
			wantBytes: 15,
		},
		{
			name:      "empty directory",
			files:     map[string]string{},
			wantFiles: []gpuwarden.ManifestFile{},
		},
		{
			name:      "nested manifest.json is data",
			files:     map[string]string{"sub/" + Name: "hello"},
			wantFiles: []gpuwarden.ManifestFile{{Path: "sub/manifest.json", Size: 5, SHA256: helloSHA}},
			wantBytes: 5,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "000003-step-000120")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			writeTree(t, dir, tt.files)
			cp, err := Build(dir)
			if err != nil {
				t.Fatalf("Manifest: %v", err)
			}
			if !reflect.DeepEqual(cp.Files, tt.wantFiles) {
				t.Errorf("Files = %+v, want %+v", cp.Files, tt.wantFiles)
			}
			if cp.Bytes != tt.wantBytes {
				t.Errorf("Bytes = %d, want %d", cp.Bytes, tt.wantBytes)
			}
			if cp.Name != "000003-step-000120" || cp.Step != 120 || cp.Path != dir {
				t.Errorf("Name, Step, Path = %q, %d, %q", cp.Name, cp.Step, cp.Path)
			}
			if cp.Committed.IsZero() {
				t.Error("Committed is zero")
			}
			if err := Verify(cp); err != nil {
				t.Errorf("Verify of a fresh manifest: %v", err)
			}
		})
	}
}

func TestManifestErrors(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"file": "x", "linked/a": "x"})
	if err := os.Symlink(filepath.Join(root, "file"), filepath.Join(root, "linked", "b")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir string
		code      gpuwarden.ErrorCode
	}{
		{"missing", filepath.Join(root, "nope"), gpuwarden.ENotFound},
		{"not a directory", filepath.Join(root, "file"), gpuwarden.EInvalid},
		{"symlink inside", filepath.Join(root, "linked"), gpuwarden.EInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Build(tt.dir)
			if got := gpuwarden.ErrorCodeOf(err); got != tt.code {
				t.Errorf("Build(%s) = %v (code %q), want code %q", tt.dir, err, got, tt.code)
			}
		})
	}
}

func TestVerify(t *testing.T) {
	tests := []struct {
		name    string
		damage  func(t *testing.T, cp *gpuwarden.Checkpoint)
		code    gpuwarden.ErrorCode
		message string
	}{
		{name: "intact", damage: func(*testing.T, *gpuwarden.Checkpoint) {}},
		{
			name: "extra file is ignored",
			damage: func(t *testing.T, cp *gpuwarden.Checkpoint) {
				writeTree(t, cp.Path, map[string]string{"new": "x"})
			},
		},
		{
			name: "same size, different bytes",
			damage: func(t *testing.T, cp *gpuwarden.Checkpoint) {
				writeTree(t, cp.Path, map[string]string{"w/a.bin": "jello"})
			},
			code: gpuwarden.EInvalid, message: "checksum mismatch in w/a.bin",
		},
		{
			name: "truncated",
			damage: func(t *testing.T, cp *gpuwarden.Checkpoint) {
				writeTree(t, cp.Path, map[string]string{"b.bin": "hell"})
			},
			code: gpuwarden.EInvalid, message: "size mismatch in b.bin",
		},
		{
			name: "missing file",
			damage: func(t *testing.T, cp *gpuwarden.Checkpoint) {
				if err := os.Remove(filepath.Join(cp.Path, "b.bin")); err != nil {
					t.Fatal(err)
				}
			},
			code: gpuwarden.ENotFound, message: "b.bin",
		},
		{
			name: "path escaping the directory",
			damage: func(t *testing.T, cp *gpuwarden.Checkpoint) {
				cp.Files[0].Path = "../b.bin"
			},
			code: gpuwarden.EInvalid, message: "invalid file path",
		},
		{
			name:   "no path",
			damage: func(t *testing.T, cp *gpuwarden.Checkpoint) { cp.Path = "" },
			code:   gpuwarden.EInvalid, message: "no path",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "c1")
			writeTree(t, dir, map[string]string{"w/a.bin": "hello", "b.bin": "hello"})
			cp, err := Build(dir)
			if err != nil {
				t.Fatal(err)
			}
			tt.damage(t, &cp)
			err = Verify(cp)
			if got := gpuwarden.ErrorCodeOf(err); got != tt.code {
				t.Fatalf("Verify = %v (code %q), want code %q", err, got, tt.code)
			}
			if err != nil && !strings.Contains(err.Error(), tt.message) {
				t.Errorf("Verify = %q, want it to mention %q", err, tt.message)
			}
		})
	}
}

func TestManifestFileRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c-step-3")
	writeTree(t, dir, map[string]string{"a": "hello"})
	cp, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(cp); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Path != dir || got.Name != cp.Name || !got.Committed.Equal(cp.Committed) || !reflect.DeepEqual(got.Files, cp.Files) {
		t.Errorf("Read = %+v, want %+v", got, cp)
	}
	// Committing again must not list the manifest itself.
	again, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Files) != 1 {
		t.Errorf("Manifest after Write lists %d files, want 1", len(again.Files))
	}
	// A manifest moved under another name is not trusted.
	other := filepath.Join(t.TempDir(), "other")
	if err := os.Rename(dir, other); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(other); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
		t.Errorf("Read of a renamed checkpoint = %v, want invalid", err)
	}
}

func TestCheckManifest(t *testing.T) {
	good := gpuwarden.ManifestFile{Path: "a", Size: 5, SHA256: helloSHA}
	tests := []struct {
		name string
		cp   gpuwarden.Checkpoint
		ok   bool
	}{
		{"good", gpuwarden.Checkpoint{Name: "c", Files: []gpuwarden.ManifestFile{good}}, true},
		{"empty name", gpuwarden.Checkpoint{Name: ""}, false},
		{"dot dot name", gpuwarden.Checkpoint{Name: ".."}, false},
		{"slash in name", gpuwarden.Checkpoint{Name: "a/b"}, false},
		{"absolute path", gpuwarden.Checkpoint{Name: "c", Files: []gpuwarden.ManifestFile{{Path: "/etc/passwd", SHA256: helloSHA}}}, false},
		{"unclean path", gpuwarden.Checkpoint{Name: "c", Files: []gpuwarden.ManifestFile{{Path: "a/../b", SHA256: helloSHA}}}, false},
		{"manifest as file", gpuwarden.Checkpoint{Name: "c", Files: []gpuwarden.ManifestFile{{Path: Name, SHA256: helloSHA}}}, false},
		{"duplicate", gpuwarden.Checkpoint{Name: "c", Files: []gpuwarden.ManifestFile{good, good}}, false},
		{"the folder itself", gpuwarden.Checkpoint{Name: "c", Files: []gpuwarden.ManifestFile{{Path: ".", SHA256: helloSHA}}}, false},
		{"a file and a folder", gpuwarden.Checkpoint{Name: "c", Files: []gpuwarden.ManifestFile{{Path: "a/b/c", SHA256: helloSHA}, good}}, false},
		{"a file beside a folder", gpuwarden.Checkpoint{Name: "c", Files: []gpuwarden.ManifestFile{{Path: "ab/c", SHA256: helloSHA}, good, {Path: "a.b", SHA256: helloSHA}}}, true},
		{"bad hash", gpuwarden.Checkpoint{Name: "c", Files: []gpuwarden.ManifestFile{{Path: "a", SHA256: "abc"}}}, false},
		{"negative size", gpuwarden.Checkpoint{Name: "c", Files: []gpuwarden.ManifestFile{{Path: "a", Size: -1, SHA256: helloSHA}}}, false},
	}
	for _, tt := range tests {
		err := Check(tt.cp)
		if (err == nil) != tt.ok {
			t.Errorf("%s: Check = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
			t.Errorf("%s: code %q, want invalid", tt.name, gpuwarden.ErrorCodeOf(err))
		}
	}
}

func TestWalkSkipsManifestTempAndSkipped(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"a":                 "hello",
		Name:                "{}",
		TempPrefix + "-123": "{}",
		"sub/" + TempPrefix: "hello",
		".complete":         "",
	})
	files, dirs, err := Walk(dir, func(rel string) bool { return rel == ".complete" }, HashFile)
	if err != nil {
		t.Fatal(err)
	}
	want := []gpuwarden.ManifestFile{
		{Path: "a", Size: 5, SHA256: helloSHA},
		{Path: "sub/" + TempPrefix, Size: 5, SHA256: helloSHA},
	}
	if !reflect.DeepEqual(files, want) {
		t.Errorf("Walk = %+v, want %+v", files, want)
	}
	if len(dirs) != 2 || dirs[0] != dir {
		t.Errorf("dirs = %v, want %s first and sub", dirs, dir)
	}
}
