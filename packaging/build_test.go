package packaging

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// testVersion is the release the tests package: not gpuwarden.go's, so that
// a test sees it travel through -X, nfpm, the labels and the chart.
const testVersion = "1.2.3-pkgtest.1"

// release is one run of scripts/package.sh and what it was told.
type release struct {
	dir    string   // its DIST
	arches []string // what it built
	commit string   // git rev-parse HEAD
	epoch  int64    // SOURCE_DATE_EPOCH: the commit's time
	date   string   // the same time, RFC 3339 UTC
	took   time.Duration
}

var (
	buildOnce  sync.Once
	built      *release
	buildErr   error
	buildTemp  string // removed by TestMain
	peersFatal = os.Getenv("GPUWARDEN_PEER_TESTS") == "1"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildTemp != "" {
		os.RemoveAll(buildTemp)
	}
	os.Exit(code)
}

// repoRoot is the repository root: tests run in their package's folder.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// need finds a tool on PATH, or skips the test (fails it where CI promises
// the tool: GPUWARDEN_PEER_TESTS=1).
func need(t testing.TB, tool, why string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		if peersFatal {
			t.Fatalf("%s not found (%s); GPUWARDEN_PEER_TESTS=1 requires it", tool, why)
		}
		t.Skipf("%s not found (%s)", tool, why)
	}
	return p
}

// helmPath is what package.sh would find: helm on PATH, else the peers cache.
func helmPath() string {
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	home, _ := os.UserHomeDir()
	p := filepath.Join(home, ".cache", "gpuwarden-peers", "bin", "helm")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return ""
}

// packaged runs scripts/package.sh once for every test of the package and
// returns what it made; a test that needs the artifacts calls it first.
func packaged(t testing.TB) *release {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: scripts/package.sh takes minutes")
	}
	if os.Getenv("GPUWARDEN_PACKAGE_TESTS") != "1" {
		// Minutes of cgo cross-builds: kept out of `go test ./...` (which
		// stays under ten minutes on two cores) and run by .ci/run as a
		// step of its own, timed there.
		t.Skip("builds every release artifact (minutes): set GPUWARDEN_PACKAGE_TESTS=1 (.ci/run does, in its packaging step)")
	}
	need(t, "gcc", "the linux/amd64 build is cgo")
	buildOnce.Do(func() {
		buildTemp, buildErr = os.MkdirTemp("", "gpuwarden-package-")
		if buildErr != nil {
			return
		}
		built, buildErr = runPackage(repoRoot(t), filepath.Join(buildTemp, "a"), nil, nil)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// runPackage runs scripts/package.sh into dir with extra environment,
// through wrap if any (a command that runs its trailing arguments).
func runPackage(root, dir string, env, wrap []string) (*release, error) {
	r := &release{dir: dir, arches: []string{"amd64", "arm64"}}
	if _, err := exec.LookPath("aarch64-linux-gnu-gcc"); err != nil {
		if peersFatal {
			return nil, errors.New("aarch64-linux-gnu-gcc not found (Debian's gcc-aarch64-linux-gnu; .ci/run installs it): GPUWARDEN_PEER_TESTS=1 requires the arm64 build")
		}
		r.arches = []string{"amd64"}
	}
	out, err := exec.Command("git", "-C", root, "log", "-1", "--format=%H %ct").Output()
	if err != nil {
		return nil, fmt.Errorf("git log: %w", err)
	}
	f := strings.Fields(string(out))
	r.commit = f[0]
	if r.epoch, err = strconv.ParseInt(f[1], 10, 64); err != nil {
		return nil, err
	}
	r.date = time.Unix(r.epoch, 0).UTC().Format(time.RFC3339)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	argv := []string{filepath.Join(root, "scripts", "package.sh"), testVersion}
	argv = append(slices.Clone(wrap), argv...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "DIST="+dir, "GPUWARDEN_ARCHES="+strings.Join(r.arches, " "))
	if h := helmPath(); h != "" {
		cmd.Env = append(cmd.Env, "HELM="+h)
	}
	cmd.Env = append(cmd.Env, env...)
	start := time.Now()
	log, err := cmd.CombinedOutput()
	r.took = time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("scripts/package.sh: %w\n%s", err, log)
	}
	return r, nil
}

// checksums reads checksums.txt: file name → SHA-256 in hex.
func readChecksums(t testing.TB, dir string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("checksums.txt:%d: %q is not `SHA256  NAME`", i+1, line)
		}
		sums[name] = sum
	}
	return sums
}

func sha256File(t testing.TB, name string) string {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// topFiles lists the regular files directly in dir.
func topFiles(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	return names
}

// TestDistHasEveryArtifact checks that one run made each artifact the
// issue lists, and that checksums.txt covers exactly them with the right sums.
func TestDistHasEveryArtifact(t *testing.T) {
	r := packaged(t)
	t.Logf("scripts/package.sh took %s (arches %v)", r.took.Round(time.Second), r.arches)
	want := []string{"checksums.txt", "install.sh", "gpuwarden_" + testVersion + "_sbom.cdx.json", "gpuwarden_" + testVersion + "_image.oci.tar"}
	for _, a := range r.arches {
		want = append(want, "gpuwarden_"+testVersion+"_linux_"+a+".tar.gz", "gpuwarden_"+testVersion+"_"+a+".deb")
	}
	if helmPath() != "" {
		want = append(want, "gpuwarden-"+testVersion+".tgz")
	}
	got := topFiles(t, r.dir)
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("dist has no %s; it has %v", w, got)
		}
	}
	rpms := 0
	for _, g := range got {
		if strings.HasSuffix(g, ".rpm") {
			rpms++
		}
	}
	if rpms != len(r.arches) {
		t.Errorf("dist has %d .rpm files, want one per architecture (%v): %v", rpms, r.arches, got)
	}

	sums := readChecksums(t, r.dir)
	for _, name := range got {
		if name == "checksums.txt" {
			continue
		}
		want, ok := sums[name]
		if !ok {
			t.Errorf("checksums.txt has no line for %s", name)
			continue
		}
		if got := sha256File(t, filepath.Join(r.dir, name)); got != want {
			t.Errorf("%s: SHA-256 %s, checksums.txt says %s", name, got, want)
		}
	}
	for name := range sums {
		if !slices.Contains(got, name) {
			t.Errorf("checksums.txt names %s, which dist does not have", name)
		}
	}

	var sbom struct {
		BOMFormat string `json:"bomFormat"`
		Metadata  struct {
			Component struct {
				Name string `json:"name"`
			} `json:"component"`
		} `json:"metadata"`
		Components []struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"components"`
	}
	b, err := os.ReadFile(filepath.Join(r.dir, "gpuwarden_"+testVersion+"_sbom.cdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sbom); err != nil {
		t.Fatalf("SBOM: %v", err)
	}
	if sbom.BOMFormat != "CycloneDX" || sbom.Metadata.Component.Name != "github.com/gpuwarden/gpuwarden" {
		t.Errorf("SBOM: format %q, component %q; want CycloneDX of github.com/gpuwarden/gpuwarden", sbom.BOMFormat, sbom.Metadata.Component.Name)
	}
	// The modules the binary is built from must be in it: go-nvml at its pin.
	found := false
	for _, c := range sbom.Components {
		if c.Name == "github.com/NVIDIA/go-nvml" && c.Version == "v0.12.9-0" {
			found = true
		}
	}
	if !found {
		t.Errorf("SBOM lists %d components, none github.com/NVIDIA/go-nvml v0.12.9-0", len(sbom.Components))
	}
}

// tarEntry is what the tests read of one archive entry.
type tarEntry struct {
	mode     int64
	uid, gid int
	uname    string
	mtime    time.Time
	typ      byte
	data     []byte
}

// readTarGz reads a .tar.gz whole, checking that its gzip header carries no
// name and no time, and returns its entries in order.
func readTarGz(t testing.TB, name string) ([]string, map[string]tarEntry) {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("%s: gzip header has name %q, time %v: want neither (gzip -n)", filepath.Base(name), zr.Name, zr.ModTime)
	}
	var order []string
	entries := map[string]tarEntry{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, h.Name)
		entries[h.Name] = tarEntry{mode: h.Mode, uid: h.Uid, gid: h.Gid, uname: h.Uname, mtime: h.ModTime, typ: h.Typeflag, data: data}
	}
	return order, entries
}

// TestArchives checks each release archive: its files, their modes, fixed
// owners and times, sorted entries, and that its binary is built for its
// architecture and, where it can run here, says its version, commit and date.
func TestArchives(t *testing.T) {
	r := packaged(t)
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for _, arch := range r.arches {
		t.Run(arch, func(t *testing.T) {
			top := "gpuwarden_" + testVersion + "_linux_" + arch + "/"
			order, entries := readTarGz(t, filepath.Join(r.dir, "gpuwarden_"+testVersion+"_linux_"+arch+".tar.gz"))
			wantFiles := map[string]int64{
				"gpuwarden": 0o755, "README.md": 0o644, "gpuwarden.service": 0o644, "gpuwarden-server.service": 0o644,
				"gpuwarden.yaml": 0o644, "gpuwarden.default": 0o644, "examples/qlora-7b.yaml": 0o644,
				"examples/notebook-a100.csv": 0o644,
			}
			for name, mode := range wantFiles {
				e, ok := entries[top+name]
				if !ok {
					t.Errorf("no %s%s in the archive", top, name)
					continue
				}
				if e.mode&0o7777 != mode {
					t.Errorf("%s: mode %o, want %o", name, e.mode&0o7777, mode)
				}
			}
			if !slices.IsSorted(order) {
				t.Errorf("entries are not sorted by name: %v", order)
			}
			for name, e := range entries {
				if !strings.HasPrefix(name, top) {
					t.Errorf("%s is outside %s", name, top)
				}
				if e.uid != 0 || e.gid != 0 || e.uname != "" || e.mtime.Unix() != r.epoch {
					t.Errorf("%s: owner %d:%d %q, mtime %v; want 0:0, no names, the commit's time %v", name, e.uid, e.gid, e.uname, e.mtime, time.Unix(r.epoch, 0).UTC())
				}
			}
			bin := entries[top+"gpuwarden"].data
			f, err := elf.NewFile(bytes.NewReader(bin))
			if err != nil {
				t.Fatalf("gpuwarden: %v", err)
			}
			if f.Machine != machines[arch] {
				t.Errorf("gpuwarden is built for %v, want %v", f.Machine, machines[arch])
			}
			if arch != runtime.GOARCH {
				return
			}
			exe := filepath.Join(t.TempDir(), "gpuwarden")
			if err := os.WriteFile(exe, bin, 0o755); err != nil {
				t.Fatal(err)
			}
			checkVersion(t, r, exe)
		})
	}
}

// checkVersion runs `gpuwarden version` (table and JSON) through argv (the
// binary, or chroot and the binary) and checks the version, commit and
// date that the build gave it.
func checkVersion(t *testing.T, r *release, argv ...string) {
	t.Helper()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(argv[0], append(argv[1:len(argv):len(argv)], args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
		}
		return string(out)
	}
	table := run("version")
	for _, want := range []string{"gpuwarden " + testVersion, "(" + r.commit + ")", "built " + r.date} {
		if !strings.Contains(table, want) {
			t.Errorf("gpuwarden version printed %q, want it to contain %q", firstLine(table), want)
		}
	}
	var v struct{ Schema, Version, Commit, Date, Platform string }
	if err := json.Unmarshal([]byte(run("version", "-o", "json")), &v); err != nil {
		t.Fatalf("gpuwarden version -o json: %v", err)
	}
	want := struct{ Schema, Version, Commit, Date, Platform string }{"gpuwarden.version/v1", testVersion, r.commit, r.date, "linux/" + runtime.GOARCH}
	if v != want {
		t.Errorf("gpuwarden version -o json = %+v, want %+v", v, want)
	}
}

// firstLine returns the first line of s, for messages.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// scanLines calls fn on each line read from r until fn returns true.
func scanLines(r io.Reader, fn func(string) bool) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if fn(sc.Text()) {
			return
		}
	}
}
