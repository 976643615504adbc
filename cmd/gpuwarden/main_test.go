package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/ledgertest"
	"github.com/spf13/cobra"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// binary is the real gpuwarden, built once for the end-to-end tests, and
// trainer the example job of examples/trainer.
var binary, trainer string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "gpuwarden-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "gpuwarden")
	trainer = filepath.Join(dir, "trainer")
	builds := map[string]string{binary: ".", trainer: "../../examples/trainer"}
	if old := os.Getenv("GPUWARDEN_TEST_BINARY"); old != "" {
		// Run the end-to-end tests against another build, such as the last
		// release, to show which of them its behaviour fails.
		binary = old
		builds = map[string]string{trainer: "../../examples/trainer"}
	}
	for out, pkg := range builds {
		build := exec.Command("go", "build", "-o", out, pkg)
		build.Stderr = os.Stderr
		if err := build.Run(); err != nil {
			panic("build " + pkg + ": " + err.Error())
		}
	}
	code := m.Run()
	ledgertest.StopPostgres() // the server the postgres cases shared, if one started
	// A test leaves no process behind: whatever still runs one of the
	// programs built here (or the README's copies of them) is named,
	// killed, and fails the run.
	if left := leftovers(10*time.Second, dir, readmeBinOnce.dir); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: the tests left %d processes running (killed now):\n  %s\n", len(left), strings.Join(left, "\n  "))
		if code == 0 {
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// leftovers waits up to grace for the processes running a program from one
// of dirs to end (a test's cleanup may have signalled them a moment ago),
// then kills those still there and describes them: PID, state, command.
func leftovers(grace time.Duration, dirs ...string) []string {
	find := func() map[int]string {
		found := map[int]string{}
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
			if err != nil { // gone, or a zombie: nothing runs
				continue
			}
			for _, d := range dirs {
				if d != "" && strings.HasPrefix(exe, d+string(filepath.Separator)) {
					cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
					found[pid] = strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
				}
			}
		}
		return found
	}
	deadline := time.Now().Add(grace)
	left := find()
	for len(left) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		left = find()
	}
	var out []string
	for pid, cmdline := range left {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		out = append(out, fmt.Sprintf("pid %d: %s", pid, cmdline))
	}
	sort.Strings(out)
	return out
}

type result struct {
	stdout, stderr string
	code           int
}

// gw runs the real binary in dir with a fixed date, so price-age warnings
// do not depend on the day the tests run.
func gw(t *testing.T, dir string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"--now", "2026-11-29"}, args...)...)
	cmd.Dir = dir
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

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// jsonPlan is the part of `plan -o json` the tests check.
type jsonPlan struct {
	Schema string `json:"schema"`
	Ranked []struct {
		Total json.Number `json:"total"`
		Role  string      `json:"role"`
		Lines []struct {
			Item   string      `json:"item"`
			Amount json.Number `json:"amount"`
		} `json:"lines"`
		Offer struct {
			Provider string `json:"provider"`
			Instance string `json:"instance"`
		} `json:"offer"`
	} `json:"ranked"`
	Excluded []struct {
		Reason string `json:"reason"`
	} `json:"excluded"`
	IdleSaving *struct {
		IdleAmount json.Number `json:"idle_amount"`
		Saves      json.Number `json:"saves"`
	} `json:"idle_saving"`
}

// cents reads a JSON decimal with two places as an integer, exactly.
func cents(t *testing.T, n json.Number) int64 {
	t.Helper()
	whole, frac, _ := strings.Cut(n.String(), ".")
	if len(frac) != 2 {
		t.Fatalf("amount %s does not have two decimal places", n)
	}
	var v int64
	for _, r := range whole + frac {
		if r == '-' {
			continue
		}
		v = v*10 + int64(r-'0')
	}
	if strings.HasPrefix(whole, "-") {
		v = -v
	}
	return v
}

func decodePlan(t *testing.T, stdout string) jsonPlan {
	t.Helper()
	var p jsonPlan
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("decode plan JSON: %v\n%s", err, stdout)
	}
	return p
}

func checkTotals(t *testing.T, p jsonPlan) {
	t.Helper()
	for _, c := range p.Ranked {
		var sum int64
		for _, l := range c.Lines {
			sum += cents(t, l.Amount)
		}
		if got := cents(t, c.Total); got != sum {
			t.Errorf("%s %s: total %d cents, lines add up to %d", c.Offer.Provider, c.Offer.Instance, got, sum)
		}
	}
}

func TestInitThenPlanJSON(t *testing.T) {
	dir := t.TempDir()
	r := gw(t, dir, "init", "--non-interactive")
	if r.code != 0 {
		t.Fatalf("init exit %d: %s", r.code, r.stderr)
	}
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	r = gw(t, dir, "plan", "p.yaml", "-o", "json")
	if r.code != 0 {
		t.Fatalf("plan exit %d: %s", r.code, r.stderr)
	}
	p := decodePlan(t, r.stdout)
	if p.Schema != planJSONSchema || len(p.Ranked) == 0 || p.Ranked[0].Role != "best" {
		t.Fatalf("schema %q, %d ranked, first role %q", p.Schema, len(p.Ranked), p.Ranked[0].Role)
	}
	checkTotals(t, p)
}

func TestExamplesPlan(t *testing.T) {
	root := repoRoot(t)
	files, _ := filepath.Glob(filepath.Join(root, "examples", "*.yaml"))
	if len(files) < 4 {
		t.Fatalf("found %d examples, want at least 4", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			for _, format := range []string{"table", "json", "csv", "md"} {
				r := gw(t, root, "plan", f, "-o", format)
				if r.code != 0 {
					t.Fatalf("-o %s: exit %d\n%s%s", format, r.code, r.stdout, r.stderr)
				}
				if format == "json" {
					checkTotals(t, decodePlan(t, r.stdout))
				}
				if format == "table" {
					for _, line := range strings.Split(r.stdout, "\n") {
						if n := len([]rune(line)); n > pageWidth {
							t.Errorf("line of %d runes: %q", n, line)
						}
					}
				}
			}
		})
	}
}

func TestNotebookLeftOn(t *testing.T) {
	root := repoRoot(t)
	r := gw(t, root, "plan", "examples/notebook-a100.yaml", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	p := decodePlan(t, r.stdout)
	if len(p.Ranked) != 1 {
		t.Fatalf("ranked %d offers, want the one-row catalog's 1", len(p.Ranked))
	}
	if got := p.Ranked[0].Total.String(); got != "2520.00" {
		t.Errorf("total = %s, want 2520.00 (720 h × €3.50)", got)
	}
	if p.IdleSaving == nil || p.IdleSaving.IdleAmount.String() != "2380.00" || p.IdleSaving.Saves.String() != "2345.00" {
		t.Errorf("idle saving = %+v, want €2,380.00 idle and €2,345.00 saved by a 30-minute auto-shutdown", p.IdleSaving)
	}
	golden(t, "plan-notebook.txt", gw(t, root, "plan", "examples/notebook-a100.yaml", "--explain").stdout)
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestBadInput(t *testing.T) {
	root := repoRoot(t)
	tests := []struct {
		name   string
		args   []string
		stderr string
	}{
		{"broken plan", []string{"plan", "cmd/gpuwarden/testdata/broken.yaml"}, "cmd/gpuwarden/testdata/broken.yaml:4:"},
		{"missing plan", []string{"plan", "nope.yaml"}, "nope.yaml"},
		{"unknown flag", []string{"plan", "--bogus"}, "unknown flag: --bogus"},
		{"bad format", []string{"plan", "examples/qlora-7b.yaml", "-o", "xml"}, `unknown format "xml"`},
		{"bad catalog", []string{"offers", "--catalog", "examples/qlora-7b.yaml"}, "examples/qlora-7b.yaml"},
		{"bad max price", []string{"offers", "--max-price", "cheap"}, "--max-price"},
		{"bad egress location", []string{"egress", "README.md", "--from", "aws", "--to", "internet"}, "PROVIDER:REGION"},
		{"bad init kind", []string{"init", "--non-interactive", "--kind", "training"}, `unknown workload kind "training"`},
		{"too many args", []string{"plan", "a.yaml", "b.yaml"}, "accepts at most 1 arg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := gw(t, root, tt.args...)
			if r.code != 2 {
				t.Errorf("exit %d, want 2; stderr: %s", r.code, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout not empty: %q", r.stdout)
			}
			if !strings.Contains(r.stderr, tt.stderr) {
				t.Errorf("stderr %q does not contain %q", r.stderr, tt.stderr)
			}
		})
	}
}

func TestPlanSkyPilotCatalog(t *testing.T) {
	root := repoRoot(t)
	r := gw(t, root, "plan", "examples/qlora-7b.yaml", "--catalog", "cmd/gpuwarden/testdata/skypilot/aws/vms.csv", "--no-embedded", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	p := decodePlan(t, r.stdout)
	checkTotals(t, p)
	if len(p.Ranked) == 0 || p.Ranked[0].Offer.Provider != "aws" || p.Ranked[0].Offer.Instance != "g6.xlarge" {
		t.Errorf("best = %+v, want aws g6.xlarge (L4 spot)", p.Ranked[0].Offer)
	}
}

func TestNothingFitsExitsOne(t *testing.T) {
	dir := t.TempDir()
	r := gw(t, dir, "init", "--non-interactive", "--budget", "1", "p.yaml")
	if r.code != 0 {
		t.Fatalf("init: %d %s", r.code, r.stderr)
	}
	r = gw(t, dir, "plan", "p.yaml")
	if r.code != 1 || !strings.Contains(r.stdout, "over-budget") {
		t.Errorf("exit %d, want 1 with over-budget exclusions; stdout:\n%s", r.code, r.stdout)
	}
}

func TestOffers(t *testing.T) {
	root := repoRoot(t)
	r := gw(t, root, "offers", "--gpu", "h100", "--max-price", "5", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var got struct {
		Offers []struct {
			GPU      string `json:"gpu"`
			Provider string `json:"provider"`
		} `json:"offers"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Offers) == 0 {
		t.Fatal("no H100 offers under $5/h")
	}
	for _, o := range got.Offers {
		if !strings.HasPrefix(o.GPU, "H100") {
			t.Errorf("offer with %s passed an H100 filter", o.GPU)
		}
	}
	// The CSV output is our own catalog format and reads back in.
	csvOut := gw(t, root, "offers", "--country", "de,fr", "-o", "csv")
	path := filepath.Join(t.TempDir(), "eu.csv")
	if err := os.WriteFile(path, []byte(csvOut.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	back := gw(t, root, "offers", "--catalog", path, "--no-embedded", "-o", "csv")
	if back.code != 0 || back.stdout != csvOut.stdout {
		t.Errorf("offers CSV does not round-trip (exit %d): %s\n%s\nvs\n%s", back.code, back.stderr, back.stdout, csvOut.stdout)
	}
}

func TestEgress(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	if err := os.MkdirAll(ckpt, 0o755); err != nil {
		t.Fatal(err)
	}
	// 3 GiB in two sparse files: the size is what counts, not the blocks.
	for i, size := range []int64{2 << 30, 1 << 30} {
		f, err := os.Create(filepath.Join(ckpt, []string{"a.pt", "b.pt"}[i]))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	r := gw(t, dir, "egress", "ckpt", "--from", "aws:us-east-1", "--to", "internet", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var got struct {
		Bytes int64       `json:"bytes"`
		Unit  string      `json:"unit"`
		Scope string      `json:"scope"`
		Total json.Number `json:"total"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	if got.Bytes != 3<<30 || got.Unit != "GiB" || got.Scope != "internet" || got.Total.String() != "0.27" {
		t.Errorf("got %+v, want 3 GiB to the internet at $0.09 = 0.27", got)
	}
	// A plan limited to Germany: moving to the internet is a finding (exit 1).
	plan := "workload: {kind: notebook}\nwork_hours: 10\nbudget: {monthly_limit: 100}\nresidency: {countries: [DE]}\n"
	if err := os.WriteFile(filepath.Join(dir, "gpuwarden.yaml"), []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	r = gw(t, dir, "egress", "ckpt", "--from", "aws:eu-central-1", "--to", "aws:us-east-1")
	if r.code != 1 || !strings.Contains(r.stdout, "US is outside the plan's allowed countries (DE)") || !strings.Contains(r.stdout, "inter-region") {
		t.Errorf("exit %d, want 1 and a residency finding:\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestEveryCommandHasAnExampleAndItsOwnExitCodes walks the whole command
// tree: every command's help has an example, and every command that runs
// lists its own exit codes, not the root's generic block (which offered
// "no driver" on commands that never touch a GPU).
func TestEveryCommandHasAnExampleAndItsOwnExitCodes(t *testing.T) {
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, now: time.Now}
	root := a.rootCommand()
	if !strings.Contains(root.Long, "Exit codes:") {
		t.Errorf("root help does not document exit codes")
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			path := sub.CommandPath()
			if sub.Example == "" && sub.Parent().Example == "" {
				t.Errorf("%s --help has no example", path)
			}
			// A command with subcommands lists its codes too: `bench
			// --help` is where a script's author looks first.
			if !sub.Runnable() && !strings.Contains(sub.Long, "Exit codes:") {
				t.Errorf("%s --help lists no exit codes", path)
			}
			if sub.Runnable() {
				help := sub.Long
				if !strings.Contains(help, "Exit codes:") && !strings.Contains(sub.Parent().Long, "Exit codes:") {
					t.Errorf("%s --help lists no exit codes", path)
				}
				if strings.Contains(help, exitCodesHelp) {
					t.Errorf("%s --help shows the generic exit codes, not its own", path)
				}
			}
			walk(sub)
		}
	}
	walk(root)
}

// TestReadmeNoticeTableIsThePolicy keeps the README's notice table the
// policy the supervisor acts on, row for row.
func TestReadmeNoticeTableIsThePolicy(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range gpuwarden.NoticeEffects {
		if row := fmt.Sprintf("| %s | %s | %s |", e.Kind, e.Summary, e.Action); !strings.Contains(string(readme), row+"\n") {
			t.Errorf("README lacks the policy row\n%s", row)
		}
	}
}

// TestReadmeStopTableIsTheTable keeps the README's per-provider stop table
// gpuwarden's stop semantics, row for row (issue #27).
func TestReadmeStopTableIsTheTable(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range gpuwarden.StopSemanticsAll() {
		shutdown, ends, still := s.Words()
		if row := fmt.Sprintf("| %s | %s | %s | %s |", s.Provider, shutdown, ends, still); !strings.Contains(string(readme), row+"\n") {
			t.Errorf("README lacks the stop table's row\n%s", row)
		}
	}
}

func TestCanaryWithoutDriver(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("this host has an NVIDIA driver")
	}
	dir := t.TempDir()
	r := gw(t, dir, "canary", "--no-frameworks")
	if r.code != 3 || r.stdout != "" {
		t.Fatalf("exit %d, stdout %q; want 3 and nothing on stdout", r.code, r.stdout)
	}
	if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "no NVIDIA driver") {
		t.Errorf("stderr should be one clear sentence, got %q", r.stderr)
	}
	r = gw(t, dir, "canary", "--no-frameworks", "--cpu-ok", "--no-lock")
	if r.code != 0 || !strings.Contains(r.stdout, "OK (partial)") {
		t.Errorf("--cpu-ok --no-lock: exit %d, want 0 and a partial pass\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Without a lock and without --no-lock, there is nothing to pass.
	if r = gw(t, dir, "canary", "--no-frameworks", "--cpu-ok"); r.code != 1 {
		t.Errorf("--cpu-ok without a lock: exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestLockThenCanary(t *testing.T) {
	dir := t.TempDir()
	r := gw(t, dir, "lock", "--simulate", "2xH100", "--no-frameworks")
	if r.code != 0 {
		t.Fatalf("lock: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	lock, err := os.ReadFile(filepath.Join(dir, "gpuwarden.lock"))
	if err != nil || !strings.Contains(string(lock), "gpu.model") {
		t.Fatalf("lock file: %v\n%s", err, lock)
	}
	tests := []struct {
		spec   string
		code   int
		output string
	}{
		{"2xH100", 0, "Verdict   OK (exit 0)"},
		{"2xH200", 1, "gpu.model"},
		{"1xH100,fault=xid", 2, "Xid 79 (GPU has fallen off the bus)"},
		{"2xH100,fault=xid:13@0", 0, "usually the application's"},
		{"2xH100,fault=verify@1", 2, "words wrong"},
		{"2xH100,fault=ecc", 2, "uncorrected ECC"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			r := gw(t, dir, "canary", "--simulate", tt.spec, "--no-frameworks")
			if r.code != tt.code || !strings.Contains(r.stdout, tt.output) {
				t.Errorf("exit %d, want %d with %q:\n%s%s", r.code, tt.code, tt.output, r.stdout, r.stderr)
			}
		})
	}
	r = gw(t, dir, "canary", "--simulate", "2xH200", "--no-frameworks", "-o", "json")
	var got struct {
		Verdict string `json:"verdict"`
		Drift   []struct {
			Field, Locked, Now string
		} `json:"drift"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range got.Drift {
		found = found || (d.Field == "gpu.model" && d.Locked == "H100-SXM" && d.Now == "H200")
	}
	if got.Verdict != "drift" || !found {
		t.Errorf("json verdict %q drift %+v, want gpu.model H100-SXM → H200", got.Verdict, got.Drift)
	}
}

// TestCanaryHang plants a driver call that never returns: the canary must
// come back within --timeout + 1 s and say what hung.
func TestCanaryHang(t *testing.T) {
	dir := t.TempDir()
	for _, spec := range []string{"1xH100,fault=hang", "1xH100,fault=nvml-hang"} {
		t.Run(spec, func(t *testing.T) {
			start := time.Now()
			r := gw(t, dir, "canary", "--simulate", spec, "--no-frameworks", "--timeout", "2s")
			took := time.Since(start)
			if r.code != 2 || took > 3*time.Second {
				t.Errorf("exit %d after %v, want 2 within 3 s:\n%s%s", r.code, took, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stdout, "hung") && !strings.Contains(r.stdout, "timed out") {
				t.Errorf("the report does not say the call hung:\n%s", r.stdout)
			}
		})
	}
}

func TestCanaryUsage(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"canary", "--alloc", "0"}, {"canary", "--bogus"}, {"canary", "extra"}, {"canary", "--simulate", "3xB999"}} {
		if r := gw(t, dir, args...); r.code != 4 {
			t.Errorf("%v: exit %d, want 4 (usage)\n%s", args, r.code, r.stderr)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "gpuwarden.lock"), []byte("version: 1\nfields:\n  gpu.model: {value: H100, match: exactly}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := gw(t, dir, "canary", "--simulate", "1xH100", "--no-frameworks")
	if r.code != 4 || !strings.Contains(r.stderr, "gpuwarden.lock:3:") {
		t.Errorf("bad lock: exit %d, want 4 naming gpuwarden.lock:3:\n%s", r.code, r.stderr)
	}
}

// Simulated GPUs keep their ledger apart unless told where: a demo's
// samples must never feed the real box's preflight, scorecard or budget.
func TestSimulatedDataDirIsApart(t *testing.T) {
	tests := []struct {
		name, simulate string
		flag           bool
		want           string
	}{
		{"real GPUs, default", "", false, defaultDataDir()},
		{"simulated, default", "1xH100", false, filepath.Join(defaultDataDir(), "simulated")},
		{"simulated, --data-dir given", "1xH100", true, "/tmp/demo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &cobra.Command{Use: "up"}
			dir := defaultDataDir()
			c.Flags().StringVar(&dir, "data-dir", dir, "")
			if tt.flag {
				if err := c.Flags().Set("data-dir", "/tmp/demo"); err != nil {
					t.Fatal(err)
				}
			}
			if got := simulatedDataDir(c, dir, tt.simulate); got != tt.want {
				t.Errorf("data dir = %s, want %s", got, tt.want)
			}
		})
	}
}
