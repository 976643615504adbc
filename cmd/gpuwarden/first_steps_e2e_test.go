package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// The small things a new user trips on (issue #32, item 11), each on the
// real binary as the user meets it.

// TestOffersCountryByName: a country is given by code or by name, in any
// case; a word that is no country is exit 2 naming the nearest one, never
// "no offers match" with exit 0.
func TestOffersCountryByName(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		country string
		code    int
		want    string // in stdout (exit 0) or stderr
	}{
		{"germany", 0, "Germany (DE)"},
		{"Germany", 0, "Germany (DE)"},
		{"de", 0, "Germany (DE)"},
		{"DE", 0, "Germany (DE)"},
		{"germany, united states", 0, "(US)"},
		{"germny", 2, `--country: "germny" is neither an ISO 3166 country code nor a country's name; did you mean Germany (DE)?`},
		{"XX", 2, `--country: "XX" is neither an ISO 3166 country code nor a country's name`},
		{"atlantis", 2, `"atlantis" is neither`},
	}
	for _, tt := range tests {
		t.Run(tt.country, func(t *testing.T) {
			r := gw(t, dir, "offers", "--country", tt.country)
			if r.code != tt.code {
				t.Fatalf("exit %d, want %d\n%s%s", r.code, tt.code, r.stdout, r.stderr)
			}
			out := r.stdout
			if tt.code != 0 {
				out = r.stderr
			}
			if !strings.Contains(out, tt.want) || strings.Contains(r.stdout, "no offers match") {
				t.Errorf("want %q in:\n%s%s", tt.want, r.stdout, r.stderr)
			}
		})
	}
}

// TestPlanErrorNamesTheLineOfTheMistake: a key indented one space too far
// is the mistake on its own line; the error names that line, not the one
// above it.
func TestPlanErrorNamesTheLineOfTheMistake(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "bad.yaml"), "name: x\nworkload:\n  kind: inference\n   params_b: 7\nwork_hours: 100\n")
	r := gw(t, dir, "plan", "bad.yaml")
	if r.code != 2 || !strings.HasPrefix(r.stderr, "error: bad.yaml:4:4: ") {
		t.Errorf("exit %d, want 2 and the error at bad.yaml:4:4 (the over-indented params_b):\n%s", r.code, r.stderr)
	}
}

// TestLogLevelHelpSaysEachDefault: up, run and server log INFO as they
// work, and their --help says so; the other commands log warnings.
func TestLogLevelHelpSaysEachDefault(t *testing.T) {
	dir := t.TempDir()
	flagLine := regexp.MustCompile(`(?m)^\s+--log-level string\s.*\(default "(\w+)"\)$`)
	for _, tt := range []struct{ command, want string }{
		{"up", "info"}, {"run", "info"}, {"server", "info"}, {"plan", "warn"}, {"offers", "warn"}, {"burnin", "warn"},
	} {
		r := gw(t, dir, tt.command, "--help")
		m := flagLine.FindAllStringSubmatch(r.stdout, -1)
		if len(m) != 1 || m[0][1] != tt.want {
			t.Errorf("%s --help: --log-level defaults %v, want one line with %q\n%s", tt.command, m, tt.want, r.stdout)
		}
	}
	// What the help says is what happens.
	args := []string{"run", "--cloud", "none", "--data-dir", filepath.Join(dir, "data"), "--checkpoint-dir", filepath.Join(dir, "ck")}
	if r := gw(t, dir, append(args, "--", "true")...); r.code != 0 || !strings.Contains(r.stderr, "level=INFO") {
		t.Errorf("run by default: exit %d, want INFO lines:\n%s", r.code, r.stderr)
	}
	if r := gw(t, dir, append(args, "--log-level", "warn", "--", "true")...); r.code != 0 || strings.Contains(r.stderr, "level=INFO") {
		t.Errorf("run --log-level warn: exit %d, want no INFO line:\n%s", r.code, r.stderr)
	}
}

// TestPlanPerResultNamesItsUnit: the results are counted in the plan's
// unit ("1k requests"), with thousands grouped, not a bare 21900: the
// month's, or with a load the whole work's ("to finish").
func TestPlanPerResultNamesItsUnit(t *testing.T) {
	r := gw(t, t.TempDir(), "plan", filepath.Join(repoRoot(t), "examples", "inference-13b-int4.yaml"), "--limit", "3")
	lines := regexp.MustCompile(`(?m)^  per result .*$`).FindAllString(r.stdout, -1)
	if r.code != 0 || len(lines) == 0 {
		t.Fatalf("exit %d, no per-result line:\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, l := range lines {
		if !regexp.MustCompile(`^  per result +\d{1,3}(,\d{3})*(\.\d+)? × 1k requests (a month|to finish) +\$[\d.]+/1k requests$`).MatchString(l) {
			t.Errorf("per-result line %q does not say how many of what", l)
		}
	}
}

// TestSimulatedBurninSaysItsOwnSoak: a simulated quick burn-in takes
// seconds; it does not claim the 15 s soak a real card gets.
func TestSimulatedBurninSaysItsOwnSoak(t *testing.T) {
	dir := t.TempDir()
	r := gw(t, dir, "burnin", "--quick", "--simulate", "1xH200", "--data-dir", filepath.Join(dir, "data"), "--disk-bytes", "8388608")
	m := regexp.MustCompile(`verified over a (\S+) soak`).FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil {
		t.Fatalf("exit %d, no FMA soak line:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.HasSuffix(m[1], "ms") {
		t.Errorf("the simulated burn-in claims a %s soak; it soaked for milliseconds", m[1])
	}
}

// TestNodesNamesTheSimulatedLedger: after a simulated burn-in without
// --data-dir, nodes (reading DATA_DIR) names DATA_DIR/simulated, where the
// burn-in went, rather than asking for the burn-in just run. It runs as a
// new user would, with a home of its own (nobody, when the test is root,
// so that DATA_DIR is not /var/lib/gpuwarden).
func TestNodesNamesTheSimulatedLedger(t *testing.T) {
	home := newUserHome(t)
	sim := filepath.Join(home, ".local", "state", "gpuwarden", "simulated")
	r := gwAsNewUser(t, home, "burnin", "--quick", "--simulate", "1xH100", "--disk-bytes", "8388608")
	if r.code != 0 {
		t.Fatalf("burnin: exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(sim, "ledger.db")); err != nil {
		t.Fatalf("the simulated burn-in's ledger: %v", err)
	}
	r = gwAsNewUser(t, home, "nodes")
	if r.code != 2 || !strings.Contains(r.stderr, "gpuwarden nodes --data-dir "+sim) {
		t.Errorf("nodes: exit %d, want 2 and a hint naming %s:\n%s", r.code, sim, r.stderr)
	}
	if r = gwAsNewUser(t, home, "nodes", "--data-dir", sim); r.code != 0 || !strings.Contains(r.stdout, "1× H100") {
		t.Errorf("nodes --data-dir %s: exit %d\n%s%s", sim, r.code, r.stdout, r.stderr)
	}
}

// TestRunJSONNamesTheJobsFields: a job that exits 0 whose checkpoint never
// reaches the store ends not-durable, exit 74; -o json says exit_code 74,
// gpuwarden's, and the job's 0 and ok as job_exit_code and job_class.
func TestRunJSONNamesTheJobsFields(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	// A file where each checkpoint's folder would go: every upload fails.
	if err := os.Mkdir(store, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"000001-step-000010", "000002-step-000020"} {
		writeFile(t, filepath.Join(store, name), "")
	}
	r := gw(t, dir, "run", "-o", "json", "--cloud", "none", "--data-dir", filepath.Join(dir, "data"), "--checkpoint-dir", filepath.Join(dir, "ck"),
		"--sync", store, "--", trainer, "--steps", "20", "--every", "10", "--step-time", "5ms")
	var got map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("exit %d: %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	want := map[string]any{"schema": "gpuwarden.run/v2", "result": "not-durable", "exit_code": 74.0, "job_exit_code": 0.0, "job_class": "ok"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if _, ok := got["class"]; ok {
		t.Errorf("a top-level class is back: %v", got["class"])
	}
	if r.code != 74 {
		t.Errorf("exit %d, want 74 as exit_code says", r.code)
	}
}

// TestInitSaysWhatItWrote: init FILE says what it wrote and the next step;
// init to stdout writes the plan alone.
func TestInitSaysWhatItWrote(t *testing.T) {
	dir := t.TempDir()
	r := gw(t, dir, "init", "--non-interactive", "--countries", "germany,FR", "my plan.yaml")
	if r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "wrote my plan.yaml") || !strings.Contains(r.stderr, "next: gpuwarden plan 'my plan.yaml'") {
		t.Errorf("init FILE: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
	}
	if b := readFile(t, filepath.Join(dir, "my plan.yaml")); !strings.Contains(b, "countries: [DE, FR]") {
		t.Errorf("--countries germany,FR wrote:\n%s", b)
	}
	if r = gw(t, dir, "init", "--non-interactive"); r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "#") {
		t.Errorf("init to stdout: exit %d, stderr %q", r.code, r.stderr)
	}
	if r = gw(t, dir, "init", "--non-interactive", "--countries", "narnia", "x.yaml"); r.code != 2 || !strings.Contains(r.stderr, "--countries") {
		t.Errorf("--countries narnia: exit %d\n%s", r.code, r.stderr)
	}
}

// newUserHome makes a home folder a new user owns: nobody's when the test
// runs as root.
func newUserHome(t *testing.T) string {
	t.Helper()
	home, err := os.MkdirTemp("", "gw-home")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	if err := os.Chmod(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(home, readmeNobody, readmeNobody); err != nil {
			t.Fatal(err)
		}
	}
	return home
}

// gwAsNewUser runs the binary in home as a user with that home and nothing
// else of the test's environment (nobody, when the test runs as root).
func gwAsNewUser(t *testing.T, home string, args ...string) result {
	t.Helper()
	readmeBinDir(t) // lets nobody through to the built binary's folder
	cmd := exec.Command(binary, append([]string{"--now", "2026-11-29"}, args...)...)
	cmd.Dir = home
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/local/bin:/usr/bin:/bin", "TZ=UTC"}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: readmeNobody, Gid: readmeNobody, Groups: []uint32{}}}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}
