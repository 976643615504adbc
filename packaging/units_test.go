package packaging

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// exposure matches systemd-analyze security's verdict line.
var exposure = regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`)

// TestUnitSecurity rates both units with `systemd-analyze security
// --offline=yes` on the unit files (no running systemd needed): the
// server's exposure must stay below 5.0; the agent's, which keeps root to
// stop the box, is logged and must not pass 5.0 either.
func TestUnitSecurity(t *testing.T) {
	sa := need(t, "systemd-analyze", "rates the units")
	cases := []struct {
		unit string
		max  float64
	}{
		{"gpuwarden-server.service", 5.0},
		{"gpuwarden.service", 5.0},
	}
	for _, c := range cases {
		t.Run(c.unit, func(t *testing.T) {
			unit, err := filepath.Abs(filepath.Join("systemd", c.unit))
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(sa, "security", "--offline=yes", unit)
			out, _ := cmd.CombinedOutput() // exits non-zero above its own threshold
			m := exposure.FindSubmatch(out)
			if m == nil {
				t.Fatalf("systemd-analyze security printed no exposure level:\n%s", out)
			}
			got, err := strconv.ParseFloat(string(m[1]), 64)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: exposure %.1f", c.unit, got)
			if got >= c.max {
				t.Errorf("%s: exposure %.1f, want below %.1f:\n%s", c.unit, got, c.max, out)
			}
		})
	}
}

// TestUnitsMatchThePackages checks what ties the units to the packages:
// each ExecStart runs the binary the packages put in /usr/bin, reads
// /etc/default/gpuwarden, and the agent runs on the config the packages
// install.
func TestUnitsMatchThePackages(t *testing.T) {
	nfpm, err := os.ReadFile("nfpm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"dst: /usr/bin/gpuwarden", "dst: /etc/gpuwarden/gpuwarden.yaml", "dst: /etc/default/gpuwarden",
		"dst: /usr/lib/systemd/system/gpuwarden.service", "dst: /usr/lib/systemd/system/gpuwarden-server.service"} {
		if !bytes.Contains(nfpm, []byte(want)) {
			t.Errorf("nfpm.yaml has no %q", want)
		}
	}
	cases := []struct {
		unit, execStart string
	}{
		{"gpuwarden.service", "/usr/bin/gpuwarden up /etc/gpuwarden/gpuwarden.yaml --data-dir /var/lib/gpuwarden $GPUWARDEN_UP_ARGS"},
		{"gpuwarden-server.service", "/usr/bin/gpuwarden server --data-dir /var/lib/gpuwarden-server $GPUWARDEN_SERVER_ARGS"},
	}
	for _, c := range cases {
		b, err := os.ReadFile(filepath.Join("systemd", c.unit))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]string{}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), "="); ok && !strings.HasPrefix(k, "#") {
				got[k] = append(got[k], v)
			}
		}
		if s := strings.Join(got["ExecStart"], "|"); s != c.execStart {
			t.Errorf("%s: ExecStart=%s, want %s", c.unit, s, c.execStart)
		}
		if s := strings.Join(got["EnvironmentFile"], "|"); s != "-/etc/default/gpuwarden" {
			t.Errorf("%s: EnvironmentFile=%s, want -/etc/default/gpuwarden", c.unit, s)
		}
	}
}

// TestShippedConfigRunsTheAgent runs the released binary's `gpuwarden up`
// on the gpuwarden.yaml the archive and the packages ship (simulated GPUs,
// dry run) until the agent is up, then stops it with SIGTERM: the config
// must be one the agent accepts as it is.
func TestShippedConfigRunsTheAgent(t *testing.T) {
	r := packaged(t)
	archive := filepath.Join(r.dir, "gpuwarden_"+testVersion+"_linux_"+runtime.GOARCH+".tar.gz")
	_, entries := readTarGz(t, archive)
	top := "gpuwarden_" + testVersion + "_linux_" + runtime.GOARCH + "/"
	dir := t.TempDir()
	bin, cfg := filepath.Join(dir, "gpuwarden"), filepath.Join(dir, "gpuwarden.yaml")
	if err := os.WriteFile(bin, entries[top+"gpuwarden"].data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, entries[top+"gpuwarden.yaml"].data, 0o644); err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile(filepath.Join("etc", "gpuwarden.yaml"))
	if err != nil || !bytes.Equal(shipped, entries[top+"gpuwarden.yaml"].data) {
		t.Fatalf("the archive's gpuwarden.yaml is not packaging/etc/gpuwarden.yaml (%v)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "up", cfg, "--simulate", "1xH100", "--dry-run", "--listen", "",
		"--data-dir", filepath.Join(dir, "data"), "--cloud", "none", "--kubelet-socket", "")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_STATE_HOME="+filepath.Join(dir, "state"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	up := false
	scanLines(stderr, func(line string) bool {
		log.WriteString(line + "\n")
		up = strings.Contains(line, `msg="agent up"`)
		return up
	})
	if up {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	// Read to the end before Wait, which closes the pipe.
	scanLines(stderr, func(line string) bool { log.WriteString(line + "\n"); return false })
	err = cmd.Wait()
	if !up || err != nil {
		t.Fatalf("gpuwarden up %s: up %v, exit %v:\n%s", cfg, up, err, log.String())
	}
	if !strings.Contains(log.String(), "idle_window=30m0s") {
		t.Errorf("the agent did not take the idle window (30 min) from the shipped config:\n%s", log.String())
	}
}
