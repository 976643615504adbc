package packaging

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReproducible runs scripts/package.sh a second time, into another
// folder, and compares every artifact byte for byte with the first run's,
// and the two checksums.txt. The second run re-links both binaries (go
// build writes a new executable) and redoes every archive, package, image
// and chart; it reuses the compiled packages of Go's build cache, which
// are keyed by their inputs. GPUWARDEN_REPRO_COLD=1 gives the second run a
// build cache of its own: every package is compiled again (minutes more).
func TestReproducible(t *testing.T) {
	first := packaged(t)
	var env []string
	if os.Getenv("GPUWARDEN_REPRO_COLD") == "1" {
		env = append(env, "GOCACHE="+t.TempDir())
	}
	// As root, the second run also gets another host name (its own UTS
	// namespace) and a umask of 077: neither may reach the bytes.
	var wrap []string
	if unshare, err := exec.LookPath("unshare"); err == nil && os.Geteuid() == 0 {
		wrap = []string{unshare, "--uts", "sh", "-c", `hostname gpuwarden-repro-check && umask 077 && exec "$0" "$@"`}
	}
	second, err := runPackage(repoRoot(t), filepath.Join(t.TempDir(), "b"), env, wrap)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second run of scripts/package.sh: %s", second.took)
	a, b := topFiles(t, first.dir), topFiles(t, second.dir)
	if !slices.Equal(a, b) {
		t.Fatalf("the two runs made different files:\n%v\n%v", a, b)
	}
	for _, name := range a {
		x, err := os.ReadFile(filepath.Join(first.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(filepath.Join(second.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between two builds of one commit (%d and %d bytes)%s", name, len(x), len(y),
				entriesThatDiffer(t, filepath.Join(first.dir, name), filepath.Join(second.dir, name)))
		}
	}
	sa, sb := readChecksums(t, first.dir), readChecksums(t, second.dir)
	for name, sum := range sa {
		if sb[name] != sum {
			t.Errorf("checksums.txt: %s is %s in one run, %s in the other", name, sum, sb[name])
		}
	}
}

// entriesThatDiffer names, for two release archives, the entries whose
// contents or headers differ: a source file edited between the two runs
// (README.md in a shared work tree) reads differently from a build that
// is not reproducible.
func entriesThatDiffer(t *testing.T, a, b string) string {
	t.Helper()
	if !strings.HasSuffix(a, ".tar.gz") {
		return ""
	}
	_, ea := readTarGz(t, a)
	_, eb := readTarGz(t, b)
	var names []string
	for name, x := range ea {
		y, ok := eb[name]
		if !ok || !bytes.Equal(x.data, y.data) || x.mode != y.mode || x.mtime != y.mtime || x.uid != y.uid {
			names = append(names, name)
		}
	}
	for name := range eb {
		if _, ok := ea[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return ": entries " + strings.Join(names, ", ")
}
