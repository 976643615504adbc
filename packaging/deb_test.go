package packaging

import (
	"archive/tar"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// debFor and rpmFor find an architecture's packages in dist.
func debFor(t testing.TB, r *release, arch string) string {
	t.Helper()
	p := filepath.Join(r.dir, "gpuwarden_"+testVersion+"_"+arch+".deb")
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func rpmFor(t testing.TB, r *release, arch string) string {
	t.Helper()
	rpmArch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[arch]
	m, _ := filepath.Glob(filepath.Join(r.dir, "gpuwarden-*."+rpmArch+".rpm"))
	if len(m) != 1 {
		t.Fatalf("want one %s .rpm in dist, found %v", rpmArch, m)
	}
	return m[0]
}

// debContents lists a .deb's files and folders, read by dpkg-deb: path →
// whether it is a folder.
func debContents(t testing.TB, deb string) map[string]bool {
	t.Helper()
	cmd := exec.Command("dpkg-deb", "--fsys-tarfile", deb)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("dpkg-deb --fsys-tarfile %s: %v", deb, err)
		}
		name := "/" + strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		if name != "/" {
			got[name] = h.Typeflag == tar.TypeDir
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("dpkg-deb --fsys-tarfile %s: %v", deb, err)
	}
	return got
}

// TestRPMHasTheDebsFiles checks, with Debian's rpm, that each .rpm installs
// the same files as the .deb, the same config files, and owns the folders
// the .deb declares (a .deb also lists every parent folder, /usr included,
// which an .rpm leaves to the filesystem package).
func TestRPMHasTheDebsFiles(t *testing.T) {
	r := packaged(t)
	need(t, "dpkg-deb", "reads the .deb")
	need(t, "rpm", "Debian's rpm package reads the .rpm; .ci/run installs it")
	for _, arch := range r.arches {
		t.Run(arch, func(t *testing.T) {
			deb := debContents(t, debFor(t, r, arch))
			rpmPath := rpmFor(t, r, arch)
			out, err := exec.Command("rpm", "-qlp", rpmPath).Output()
			if err != nil {
				t.Fatalf("rpm -qlp: %v", err)
			}
			rpmList := strings.Fields(string(out))
			var debFiles, rpmFiles []string
			for name, dir := range deb {
				if !dir {
					debFiles = append(debFiles, name)
				}
			}
			for _, name := range rpmList {
				if dir, ok := deb[name]; ok && dir {
					continue // a folder both declare; checked below
				}
				rpmFiles = append(rpmFiles, name)
			}
			slices.Sort(debFiles)
			slices.Sort(rpmFiles)
			if !slices.Equal(rpmFiles, debFiles) {
				t.Errorf("rpm -qlp files:\n  %v\nthe .deb's:\n  %v", rpmFiles, debFiles)
			}
			for _, dir := range []string{"/etc/gpuwarden", "/var/lib/gpuwarden"} {
				if !deb[dir] || !slices.Contains(rpmList, dir) {
					t.Errorf("%s: in the .deb as a folder %v, in rpm -qlp %v; want both", dir, deb[dir], slices.Contains(rpmList, dir))
				}
			}
			for _, want := range []string{"/usr/bin/gpuwarden", "/usr/lib/systemd/system/gpuwarden.service",
				"/usr/lib/systemd/system/gpuwarden-server.service", "/usr/share/doc/gpuwarden/examples/qlora-7b.yaml"} {
				if !slices.Contains(rpmFiles, want) {
					t.Errorf("the packages have no %s", want)
				}
			}

			conf, err := exec.Command("rpm", "-qcp", rpmPath).Output()
			if err != nil {
				t.Fatalf("rpm -qcp: %v", err)
			}
			debConf, err := exec.Command("dpkg-deb", "--info", debFor(t, r, arch), "conffiles").Output()
			if err != nil {
				t.Fatalf("dpkg-deb --info conffiles: %v", err)
			}
			wantConf := []string{"/etc/default/gpuwarden", "/etc/gpuwarden/gpuwarden.yaml"}
			for what, list := range map[string]string{"rpm -qcp": string(conf), "the .deb's conffiles": string(debConf)} {
				got := strings.Fields(list)
				slices.Sort(got)
				if !slices.Equal(got, wantConf) {
					t.Errorf("%s = %v, want %v", what, got, wantConf)
				}
			}
		})
	}
}

// pathsAside are what the .deb and a purge touch outside /usr: the test
// moves any that this machine already has aside and puts them back, so that
// a purge cannot delete an agent's ledger that was there before.
var pathsAside = []string{"/etc/gpuwarden", "/etc/default/gpuwarden", "/var/lib/gpuwarden", "/var/lib/gpuwarden-server", "/usr/bin/gpuwarden"}

// TestDebInstallRemovePurge installs the .deb into this machine's real root
// with dpkg, checks what it installed and that it enabled nothing, runs the
// installed units through systemd-analyze verify and the installed binary,
// then checks that dpkg -r keeps the config and the data and dpkg -P
// removes them. It runs only with GPUWARDEN_PACKAGE_TESTS=1 (.ci/run sets
// it), as root, and leaves the machine as it found it, on failure too.
func TestDebInstallRemovePurge(t *testing.T) {
	if os.Getenv("GPUWARDEN_PACKAGE_TESTS") != "1" {
		t.Skip("installs into this machine's root: set GPUWARDEN_PACKAGE_TESTS=1 (.ci/run does)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("GPUWARDEN_PACKAGE_TESTS=1 needs root: dpkg -i installs into /")
	}
	need(t, "dpkg", "installs the .deb")
	sa := need(t, "systemd-analyze", "verifies the installed units")
	r := packaged(t)
	deb := debFor(t, r, runtime.GOARCH)
	if out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", "gpuwarden").CombinedOutput(); err == nil && strings.Contains(string(out), "installed") {
		t.Fatalf("the gpuwarden package is already installed here (%s): the test would remove it", out)
	}
	// First, so that its cleanups run last: after the purge below.
	aside(t, pathsAside)
	_, userErr := exec.Command("getent", "passwd", "gpuwarden").Output()
	_, groupErr := exec.Command("getent", "group", "gpuwarden").Output()
	t.Cleanup(func() {
		if out, err := exec.Command("dpkg", "-P", "gpuwarden").CombinedOutput(); err != nil {
			t.Logf("cleanup: dpkg -P gpuwarden: %v\n%s", err, out)
		}
		if userErr != nil {
			_ = exec.Command("userdel", "gpuwarden").Run()
		}
		if groupErr != nil {
			_ = exec.Command("groupdel", "gpuwarden").Run()
		}
	})

	dpkg := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("dpkg", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := dpkg("-i", deb)
	if !strings.Contains(out, "nothing was enabled or started") || !strings.Contains(out, "systemctl enable --now gpuwarden") {
		t.Errorf("dpkg -i printed no next step:\n%s", out)
	}

	units := []string{"/usr/lib/systemd/system/gpuwarden.service", "/usr/lib/systemd/system/gpuwarden-server.service"}
	modes := map[string]fs.FileMode{
		"/usr/bin/gpuwarden": 0o755, "/etc/gpuwarden/gpuwarden.yaml": 0o640, "/etc/default/gpuwarden": 0o640,
		"/var/lib/gpuwarden": fs.ModeDir | 0o700, units[0]: 0o644, units[1]: 0o644,
		"/usr/share/doc/gpuwarden/examples/qlora-7b.yaml": 0o644,
	}
	for p, want := range modes {
		if fi, err := os.Stat(p); err != nil {
			t.Errorf("after dpkg -i: %v", err)
		} else if fi.Mode()&(fs.ModeDir|fs.ModePerm) != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
		}
	}
	if _, err := exec.Command("getent", "passwd", "gpuwarden").Output(); err != nil {
		t.Errorf("no gpuwarden system user after dpkg -i")
	}
	for _, u := range []string{"gpuwarden.service", "gpuwarden-server.service"} {
		if m, _ := filepath.Glob("/etc/systemd/system/*.wants/" + u); len(m) > 0 {
			t.Errorf("dpkg -i enabled %s (%v): it must enable nothing", u, m)
		}
	}

	verify := exec.Command(sa, append([]string{"verify"}, units...)...)
	if out, err := verify.CombinedOutput(); err != nil || strings.Contains(string(out), "gpuwarden") {
		t.Errorf("systemd-analyze verify %v: %v\n%s", units, err, out)
	}
	checkVersion(t, r, "/usr/bin/gpuwarden")
	plan, err := exec.Command("/usr/bin/gpuwarden", "plan", "/usr/share/doc/gpuwarden/examples/qlora-7b.yaml").CombinedOutput()
	if err != nil || !strings.Contains(string(plan), "llama-7b-qlora (/usr/share/doc/gpuwarden/examples/qlora-7b.yaml)") {
		t.Errorf("gpuwarden plan /usr/share/doc/gpuwarden/examples/qlora-7b.yaml: %v\n%s", err, plan)
	}

	// What an admin and the services leave: an edited config and ledgers.
	edited := "\n# edited by the admin\n"
	appendFile(t, "/etc/gpuwarden/gpuwarden.yaml", edited)
	writeFile(t, "/var/lib/gpuwarden/ledger.db", "agent data")
	writeFile(t, "/var/lib/gpuwarden-server/server.db", "server data")

	dpkg("-r", "gpuwarden")
	for _, gone := range append([]string{"/usr/bin/gpuwarden"}, units...) {
		if _, err := os.Lstat(gone); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after dpkg -r, %s is still there (%v)", gone, err)
		}
	}
	for _, kept := range []string{"/etc/gpuwarden/gpuwarden.yaml", "/etc/default/gpuwarden", "/var/lib/gpuwarden/ledger.db", "/var/lib/gpuwarden-server/server.db"} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("dpkg -r removed %s: %v", kept, err)
		}
	}
	if b, _ := os.ReadFile("/etc/gpuwarden/gpuwarden.yaml"); !strings.HasSuffix(string(b), edited) {
		t.Errorf("dpkg -r lost the admin's edit of /etc/gpuwarden/gpuwarden.yaml")
	}

	dpkg("-P", "gpuwarden")
	for _, gone := range []string{"/etc/gpuwarden", "/etc/default/gpuwarden", "/var/lib/gpuwarden", "/var/lib/gpuwarden-server"} {
		if _, err := os.Lstat(gone); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after dpkg -P, %s is still there (%v)", gone, err)
		}
	}
	if out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", "gpuwarden").CombinedOutput(); err == nil && strings.TrimSpace(string(out)) != "" && !strings.Contains(string(out), "not-installed") {
		t.Errorf("after dpkg -P, dpkg still knows gpuwarden: %s", out)
	}
}

// aside renames each existing path to path.pkgtest-aside and renames it
// back when the test ends; a path that did not exist is removed then. Cleanups run last-registered first: the caller
// registers the purge after calling aside, so the purge runs before this.
func aside(t *testing.T, paths []string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); err != nil {
			// Not there before: not there after, whatever the test did.
			t.Cleanup(func() {
				if err := os.RemoveAll(p); err != nil {
					t.Errorf("cleanup: %v", err)
				}
			})
			continue
		}
		saved := p + ".pkgtest-aside"
		if _, err := os.Lstat(saved); err == nil {
			t.Fatalf("%s exists: a killed run of this test left it; move it back to %s by hand", saved, p)
		}
		if err := os.Rename(p, saved); err != nil {
			t.Fatal(err)
		}
		t.Logf("moved %s aside for the test", p)
		t.Cleanup(func() {
			if err := os.RemoveAll(p); err != nil {
				t.Errorf("cleanup: %v", err)
			}
			if err := os.Rename(saved, p); err != nil {
				t.Errorf("cleanup: putting %s back: %v", p, err)
			}
		})
	}
}

func writeFile(t *testing.T, name, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, name, data string) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
