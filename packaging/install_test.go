package packaging

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// serve serves dir on 127.0.0.1 for the test's life, as a release's
// download location.
func serve(t *testing.T, dir string) string {
	t.Helper()
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	return srv.URL
}

// shellBin makes a folder of links to the tools install.sh may use, less
// the ones left out, so that a case can take curl away and see wget used.
func shellBin(t *testing.T, leaveOut ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, tool := range []string{"sh", "dash", "uname", "awk", "mktemp", "curl", "wget", "tar", "gzip", "sha256sum",
		"cut", "mkdir", "cp", "chmod", "mv", "sed", "rm", "wc", "dirname", "basename", "cat"} {
		if slices.Contains(leaveOut, tool) {
			continue
		}
		p, err := exec.LookPath(tool)
		if err != nil {
			continue
		}
		if err := os.Symlink(p, filepath.Join(dir, tool)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// treeOf lists every path under root (relative, sorted).
func treeOf(t *testing.T, root string) []string {
	t.Helper()
	var got []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root {
			rel, _ := filepath.Rel(root, p)
			got = append(got, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestInstallScript runs scripts/install.sh under dash (POSIX sh) against
// a loopback server that serves the built release, into a --root folder:
// with curl, with wget only, and with a tampered archive, which must be
// refused with nothing written outside its temporary folder and nothing
// of it run.
func TestInstallScript(t *testing.T) {
	r := packaged(t)
	need(t, "dash", "runs install.sh as POSIX sh")
	root := repoRoot(t)
	script := filepath.Join(root, "scripts", "install.sh")
	archive := "gpuwarden_" + testVersion + "_linux_" + runtime.GOARCH + ".tar.gz"
	good := serve(t, r.dir)

	// The tampered release: the same checksums.txt, an archive whose
	// gpuwarden would leave a mark if anything ran it.
	bad := t.TempDir()
	mark := filepath.Join(t.TempDir(), "ran")
	sums, err := os.ReadFile(filepath.Join(r.dir, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(bad, "checksums.txt"), string(sums))
	evil := tarGz(t, map[string]string{
		strings.TrimSuffix(archive, ".tar.gz") + "/gpuwarden":      "#!/bin/sh\ntouch " + mark + "\n",
		strings.TrimSuffix(archive, ".tar.gz") + "/gpuwarden.yaml": "x: 1\n",
	})
	writeFile(t, filepath.Join(bad, archive), string(evil))
	badURL := serve(t, bad)

	cases := []struct {
		name     string
		from     string
		args     []string
		leaveOut []string
		wantErr  string // empty: it installs
	}{
		{name: "curl", from: good},
		{name: "wget only", from: good, leaveOut: []string{"curl"}},
		{name: "version named", from: good, args: []string{"--version", "v" + testVersion, "--prefix", "/opt/gw"}},
		{name: "no unit", from: good, args: []string{"--no-unit"}},
		{name: "tampered archive", from: badURL, wantErr: "refusing to install it"},
		{name: "no such version", from: good, args: []string{"--version", "9.9.9"}, wantErr: "checksums.txt at " + good + " has no line for gpuwarden_9.9.9_linux_"},
		{name: "nothing served", from: good + "/nowhere", wantErr: "cannot download " + good + "/nowhere/checksums.txt"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dest, tmp := t.TempDir(), t.TempDir()
			args := append([]string{script, "--from", c.from, "--root", dest}, c.args...)
			cmd := exec.Command(filepath.Join(shellBin(t, c.leaveOut...), "dash"), args...)
			cmd.Env = []string{"PATH=" + filepath.Dir(cmd.Path), "TMPDIR=" + tmp, "HOME=" + tmp}
			out, err := cmd.CombinedOutput()
			if left := treeOf(t, tmp); len(left) > 0 {
				t.Errorf("install.sh left %v in its temporary folder", left)
			}
			if c.wantErr != "" {
				if err == nil || !strings.Contains(string(out), c.wantErr) {
					t.Fatalf("install.sh: err %v, output:\n%s\nwant a failure saying %q", err, out, c.wantErr)
				}
				if got := treeOf(t, dest); len(got) > 0 {
					t.Errorf("refused, yet it wrote %v under --root", got)
				}
				if _, err := os.Stat(mark); err == nil {
					t.Errorf("the tampered archive's binary ran")
				}
				return
			}
			if err != nil {
				t.Fatalf("install.sh: %v\n%s", err, out)
			}
			prefix := "/usr/local"
			if i := slices.Index(c.args, "--prefix"); i >= 0 {
				prefix = c.args[i+1]
			}
			bin := prefix + "/bin/gpuwarden"
			want := []string{strings.TrimPrefix(bin, "/"), "etc/default/gpuwarden", "etc/gpuwarden/gpuwarden.yaml"}
			withUnit := !slices.Contains(c.args, "--no-unit")
			if withUnit {
				want = append(want, "etc/systemd/system/gpuwarden.service")
			}
			var files []string
			for _, p := range treeOf(t, dest) {
				if fi, err := os.Stat(filepath.Join(dest, p)); err == nil && !fi.IsDir() {
					files = append(files, p)
				}
			}
			slices.Sort(want)
			if !slices.Equal(files, want) {
				t.Errorf("installed %v, want %v", files, want)
			}
			_, entries := readTarGz(t, filepath.Join(r.dir, archive))
			top := strings.TrimSuffix(archive, ".tar.gz") + "/"
			got, err := os.ReadFile(filepath.Join(dest, bin))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, entries[top+"gpuwarden"].data) {
				t.Errorf("%s differs from the archive's binary", bin)
			}
			if !strings.Contains(string(out), "gpuwarden "+testVersion) {
				t.Errorf("install.sh did not show the installed version:\n%s", out)
			}
			if !withUnit {
				return
			}
			unit, err := os.ReadFile(filepath.Join(dest, "etc/systemd/system/gpuwarden.service"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(unit), "\nExecStart="+bin+" up ") || strings.Contains(string(unit), "/usr/bin/gpuwarden") {
				t.Errorf("the installed unit does not run %s:\n%s", bin, unit)
			}
		})
	}

	t.Run("keeps an edited config", func(t *testing.T) {
		dest := t.TempDir()
		writeFile(t, filepath.Join(dest, "etc/gpuwarden/gpuwarden.yaml"), "# mine\n")
		cmd := exec.Command("dash", script, "--from", good, "--root", dest)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("install.sh: %v\n%s", err, out)
		}
		if b, _ := os.ReadFile(filepath.Join(dest, "etc/gpuwarden/gpuwarden.yaml")); string(b) != "# mine\n" {
			t.Errorf("install.sh replaced the admin's gpuwarden.yaml with:\n%s", b)
		}
	})
}

// tarGz builds a small .tar.gz from name → content; names ending in
// gpuwarden are executable.
func tarGz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		mode := int64(0o644)
		if strings.HasSuffix(n, "/gpuwarden") {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: mode, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[n])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
