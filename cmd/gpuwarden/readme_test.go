package main

// TestReadmeBlocks keeps the README true: it runs every fenced block that
// shows commands (`$ ` lines) with the real binary, as a new user would, and
// compares what each command prints with the lines the README shows under it.
//
// How a block runs:
//
//   - Blocks of one README section (### heading) share a fresh folder and one
//     bash session, in order, as a reader following the section would; a
//     block marked alone gets its own. Sections run at the same time.
//   - The folder is a clone's worth of files (examples/, launch/testdata/)
//     at a path as long as the README's /tmp/rd, which stands for it in the
//     output (so that wrapped lines wrap where the README shows them); HOME is
//     /tmp/rd/home there. PATH holds the built gpuwarden and trainer, python3
//     (Debian's, for torch) and ec2-metadata-mock when installed, then the
//     system's. The environment is otherwise clean: nothing of the test's
//     own (GPUWARDEN_SERVER, say) leaks in.
//   - Run by root, the session drops to nobody (65534), so that every default
//     data dir is the new user's own (~/.local/state/gpuwarden in the temp
//     HOME) and nothing touches /var/lib/gpuwarden.
//   - Each command runs in the session with stdin from /dev/null and stdout
//     and stderr on one pipe, as on a terminal (but not a terminal: burnin's
//     progress is plain lines, the server prints no token). `&`, `%1`,
//     `export`, `$?`, pipes and redirections are bash's own.
//   - readmeSpecs, keyed by a block's first command, adds what a block needs
//     around it: files it expects (setup), peers it needs (skip, or fail
//     under GPUWARDEN_PEER_TESTS=1, like peertest), a wait before a command
//     for what a reader would wait for (the agent's first verdict, the peer
//     listening), a long-running command stopped with a signal once a line
//     appears (the README's Ctrl-C and kill -TERM), a server left running in
//     "a terminal of its own" whose first lines are compared, and a command
//     that stands in for one (go build of the trainer: the prebuilt one).
//   - `gpuwarden plan`, `offers` and `preflight` run as of 2026-12-06 (the
//     hidden --now), as TestReadmeIsTrue did: the embedded prices are dated
//     2026-12-03 and warn after 30 days, and the README shows them unwarned.
//
// How output compares (readmeNormalize): what honestly varies from run to
// run is masked on both sides — the time= field of log lines, timestamps,
// dates and clock times, durations, throughputs, pids, random token, node
// and launch IDs, the job's cgroup, the kernel and OS of the host, its host
// name, ports the kernel picked, the Go version — plus, narrowly, a few
// figures of a named line (the host's CPU and load on status's Host line,
// the benchmark's counts). Where something was masked in a command's output,
// runs of readmeSpaces compare as one, since column widths follow the masked
// values. A README line `…` skips actual lines up to the next expected one.
// Everything else must match exactly: a GPU at 85 % where the command runs
// it at 0 % fails. Blocks marked exact (plan, offers, egress, preflight)
// are compared byte for byte with no masking at all.

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden/internal/peertest"
	"github.com/gpuwarden/gpuwarden/internal/syncbuf"
)

// readmeDir is the folder the README's outputs were made in; the test's own
// folder, of the same length, stands in for it.
const readmeDir = "/tmp/rd"

// readmeHost is the host name in the README's outputs.
const readmeHost = "vm"

// readmeNow is the day catalog commands run as (see the file comment).
const readmeNow = "2026-12-06"

// readmeNobody is the user the session drops to when the test runs as root.
const readmeNobody = 65534

// readmePorts are the ports the README's commands use: the agent's
// dashboard (up's default --listen, status's --addr, preflight's --agent),
// the fleet server (server's default --addr) and the metadata mock. The
// test runs each on a free port of its own: readmeLocal rewrites them in
// the commands it runs, the gpuwarden on the session's PATH gives the
// commands that default to them their free port (README_AGENT,
// README_SERVER), and display writes the README's back into what the
// commands print before it is compared.
var readmePorts = []string{"7070", "8080", "1338"}

// readmePortMap maps each README port to this run's free one.
var readmePortMap map[string]string

// readmePortWord finds a README port as a word of a command.
var readmePortWord = regexp.MustCompile(`\b(7070|8080|1338)\b`)

// readmeLocal rewrites the README's ports in a command to this run's.
func readmeLocal(s string) string {
	return readmePortWord.ReplaceAllStringFunc(s, func(p string) string {
		if local, ok := readmePortMap[p]; ok {
			return local
		}
		return p
	})
}

// readmeFreePort is a port nothing listens on now, that the kernel will
// not hand to an outgoing connection (below the ephemeral range).
func readmeFreePort(t *testing.T) string {
	t.Helper()
	for range 1000 {
		p := strconv.Itoa(20000 + rand.IntN(12000))
		if slices.Contains(readmePorts, p) || slices.Contains(slices.Collect(maps.Values(readmePortMap)), p) {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+p)
		if err != nil {
			continue
		}
		l.Close()
		return p
	}
	t.Fatal("no free port for the README's commands")
	return ""
}

// readmeStep is what one command of a block needs from the runner.
type readmeStep struct {
	// before waits for what a reader would wait for before typing this.
	before func(t *testing.T, u *readmeUnit)
	// stopOn runs the command in the background and sends stopSignal
	// once its output contains stopOn; the output is compared once it ends,
	// and $? is its exit status.
	stopOn     string
	stopSignal string
	// ownTerminal runs the command in the background, as in a terminal of
	// its own: its output is compared once it contains ownTerminal, and it
	// runs on until the section ends.
	ownTerminal string
	// shell, when set, runs instead of the README's command; {bin} is the
	// folder of the test's gpuwarden and trainer.
	shell string
}

// readmeSpec is what a block needs around its commands.
type readmeSpec struct {
	setup func(t *testing.T, dir string)
	// needs: "aemm" (ec2-metadata-mock), "torch" (Debian's python3 with
	// torch), "no-driver" (a host without the NVIDIA driver).
	needs []string
	// alone runs the block in its own folder and session.
	alone bool
	// exact compares byte for byte, with no masking.
	exact bool
	// steps, keyed by the command as the README shows it (without "$ ").
	steps map[string]readmeStep
	// rules are masks for this block only.
	rules []readmeRule
	// vars are numbers that vary together: each regexp's first group is a
	// step number, masked wherever the block's output names that step.
	vars []*regexp.Regexp
	// floating lines come from work that runs alongside the rest (a sync
	// next to the job's stop): they compare as a set, wherever they fall.
	floating []*regexp.Regexp
}

// readmeSpecs, keyed by each block's first command.
var readmeSpecs = map[string]readmeSpec{
	"gpuwarden up --simulate 2xH100 --idle-window 3s --dry-run --data-dir ./data": {
		steps: map[string]readmeStep{
			// Ctrl-C once the dry-run stop is logged.
			"gpuwarden up --simulate 2xH100 --idle-window 3s --dry-run --data-dir ./data": {stopOn: "dry run: would stop the box", stopSignal: "INT"},
		},
		// The dashboard and the agent stop side by side; the stop is
		// proven beside the start.
		floating: []*regexp.Regexp{regexp.MustCompile(`msg=stopped component=http`), regexp.MustCompile(`msg="agent stopped"`),
			regexp.MustCompile(`msg="idle stop proven"`)},
	},
	"gpuwarden up --simulate 2xH100,load=85 --dry-run --data-dir ./busy 2>busy.log &   # a busy box this time": {
		steps: map[string]readmeStep{
			// "Ten seconds later": the agent has its first diagnosis.
			"gpuwarden status   # ten seconds later: one screen from the agent; -o json for all of it": {before: waitMetrics(`gpuwarden_diagnosis{verdict="unknown"} 0`)},
		},
	},
	"gpuwarden plan examples/notebook-a100.yaml":                {exact: true},
	"gpuwarden plan examples/pretrain-7b.yaml --limit 5":        {exact: true},
	"gpuwarden offers --gpu H100 --country DE,FR --max-price 4": {exact: true},
	"gpuwarden egress ckpt/ --from aws:eu-central-1 --to internet": {
		exact: true,
		setup: func(t *testing.T, dir string) {
			// One 250 GiB checkpoint, sparse: its size is what counts.
			readmeSparse(t, filepath.Join(dir, "ckpt", "model.safetensors"), 250<<30)
		},
	},
	"go build -o trainer ./examples/trainer": {
		steps: map[string]readmeStep{
			// The trainer TestMain built from the same source.
			"go build -o trainer ./examples/trainer": {shell: "cp {bin}/trainer trainer"},
			// kill -TERM from another terminal once the first checkpoint is off the box.
			"gpuwarden run --cloud none --checkpoint-dir ./ckpt --sync ./store -- ./trainer --steps 200 --every 50   # stopped mid-run: kill -TERM from another terminal": {
				stopOn: "checkpoint synced and verified", stopSignal: "TERM"},
		},
		vars: []*regexp.Regexp{regexp.MustCompile(`checkpoint asked for at step (\d+)`), regexp.MustCompile(`stopped at step (\d+)`)},
		// The upload runs beside the stop, and the job prints as it starts,
		// beside the supervisor's log of that start.
		floating: []*regexp.Regexp{regexp.MustCompile(`msg="checkpoint synced and verified"`), regexp.MustCompile(`^resumed from `)},
	},
	`ec2-metadata-mock -n 127.0.0.1 -p 1338 -I spot -d 5 --rebalance-delay-sec 3600 -t "$(date -u -d '+20 seconds' +%Y-%m-%dT%H:%M:%SZ)" >aemm.log 2>&1 &`: {
		needs: []string{"aemm"},
		steps: map[string]readmeStep{
			"gpuwarden run --cloud aws --aws-metadata http://127.0.0.1:1338 --checkpoint-dir ./ckpt3 -- ./trainer --steps 100000 --every 1000": {before: waitListening("127.0.0.1:1338")},
		},
		vars: []*regexp.Regexp{regexp.MustCompile(`checkpoint asked for at step (\d+)`), regexp.MustCompile(`stopped at step (\d+)`)},
	},
	"gpuwarden run --drill --verify-state --cloud none --checkpoint-dir ./ckpt5 -- python3 examples/pytorch_resume.py --every 50": {
		needs: []string{"torch"},
		// The broken trainer is stopped once it has written step 50 again.
		vars: []*regexp.Regexp{regexp.MustCompile(`stopped at step (\d+)`)},
	},
	"gpuwarden burnin --quick --simulate 1xH200 --data-dir ./demo": {
		rules: []readmeRule{
			// The host's cores, as many as the machine has.
			{regexp.MustCompile(`\b\d+ cores busy`), "<n> cores busy"},
		},
	},
	"gpuwarden server   # in a terminal of its own": {
		steps: map[string]readmeStep{
			"gpuwarden server   # in a terminal of its own": {ownTerminal: `msg="fleet server up"`},
		},
	},
	"gpuwarden report spend --token-file viewer.token": {
		steps: map[string]readmeStep{
			"gpuwarden report spend --token-file viewer.token": {before: waitFiles(`registered with the fleet server`, "box-a.log", "box-b.log", "box-c.log")},
		},
		rules: []readmeRule{
			// What was spent so far, and the forecast with it, follow the
			// seconds the boxes ran and the hours left in the month.
			{regexp.MustCompile(`, [\d.]+ h left`), ", <n> h left"},
			{regexp.MustCompile(`(EUR +)€[\d,]+\.\d\d( +\d+ +\d+ +€[\d,.]+/h +)€[\d,]+\.\d\d`), "${1}€<spent>${2}€<forecast>"},
			{regexp.MustCompile(`\d+ %$`), "<n> %"},
			{regexp.MustCompile(`€[\d,]+\.\d\d so far`), "€<spent> so far"},
			{regexp.MustCompile(`(€[\d.]+/h +)€[\d,]+\.\d\d( +€[\d,.]+)$`), "${1}€<spent>${2}"},
			{regexp.MustCompile(`registered [^,]* ago`), "registered <when> ago"},
		},
	},
	"gpuwarden bench fleet --agents 1000 --rate 5 --duration 10s --ceiling --min-rate 5000": {
		alone: true,
		rules: []readmeRule{
			// A benchmark on a shared CI machine: the shape, not the figures.
			{regexp.MustCompile(`\b\d+ µs per heartbeat`), "<n> µs per heartbeat"},
			{regexp.MustCompile(`= [\d.]+ % of it`), "= <n> % of it"},
			{regexp.MustCompile(`\b\d+ sent, \d+ errors`), "<n> sent, <n> errors"},
			{regexp.MustCompile(`^(\s*verdict\s+).*`), "${1}<verdict>"},
		},
	},
	"gpuwarden preflight examples/preflight-h200.yaml --offline": {exact: true, needs: []string{"no-driver"}},
	"cp examples/preflight-h200.yaml plan.yaml":                  {exact: true, needs: []string{"no-driver"}},
	"gpuwarden canary --simulate 2xH100,fault=xid@1 --no-frameworks": {
		needs: []string{"no-driver"},
	},
}

// readmeRule is one mask: every match of re becomes repl.
type readmeRule struct {
	re   *regexp.Regexp
	repl string
}

// readmeRules mask what honestly varies, in this order.
var readmeRules = []readmeRule{
	// Log lines: the time= field (the README may cut it, as it says).
	{regexp.MustCompile(`^time=\S+ `), ""},
	// Timestamps, dates and clock times.
	{regexp.MustCompile(`\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?`), "<time>"},
	{regexp.MustCompile(`\b\d{8}T\d{6}Z`), "<time>"},
	{regexp.MustCompile(`\b\d{8}-\d{6}-[0-9a-f]{8}-`), "<launch>-"},
	{regexp.MustCompile(`\b\d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)?`), "<time>"},
	{regexp.MustCompile(`\b\d{4}-\d\d-\d\d\b`), "<date>"},
	{regexp.MustCompile(`\b\d{4}-\d\d\b`), "<month>"},
	{regexp.MustCompile(`\b\d\d-\d\d \d\d:\d\d\b`), "<time>"},
	{regexp.MustCompile(`\b\d\d:\d\d(:\d\d)?\b`), "<clock>"},
	// Random IDs: tokens, nodes, jobs, launches.
	{regexp.MustCompile(`\bgw-[0-9a-f]{8}\b`), "gw-<id>"},
	{regexp.MustCompile(`\b[0-9a-f]{32}\b`), "<id>"},
	{regexp.MustCompile(`\b[0-9a-f]{16}\b`), "<id>"},
	// How the job is isolated depends on the box's cgroups and user.
	{regexp.MustCompile(`isolation="[^"]*"`), "isolation=<isolation>"},
	{regexp.MustCompile(`\bpid=\d+`), "pid=<pid>"},
	// Ports the kernel picked.
	{regexp.MustCompile(`(127\.0\.0\.1|localhost):(3[2-9]\d{3}|[4-6]\d{4})\b`), "$1:<port>"},
	// Durations and throughputs.
	{regexp.MustCompile(`\blost_s=[\d.]+`), "lost_s=<dur>"},
	{regexp.MustCompile(`\b\d[\d,]*(\.\d+)? ?([KMGT]i?B|B|TFLOP|Mop)/s\b`), "<rate>"},
	{regexp.MustCompile(`\b\d[\d,]*(\.\d+)?/s\b`), "<rate>"},
	{regexp.MustCompile(`\b(\d+(\.\d+)?(ns|µs|us|ms|s|m|h))+\b`), "<dur>"},
	{regexp.MustCompile(`\b\d+(\.\d+)? (ms|s)\b`), "<dur>"},
	// The host: its kernel, OS and container runtime (lock), the Go that
	// built the binary and the platform (version), its CPU, load and
	// sessions (status's Host line).
	{regexp.MustCompile(`^(os\.kernel|os\.id|os\.version_id|container\.runtime)( +)\S+`), "$1$2<host>"},
	{regexp.MustCompile(`^(gpuwarden \S+) go\S+ \S+/\S+$`), "$1 go<version> <os>/<arch>"},
	{regexp.MustCompile(`^(Host +)CPU \d+%, iowait \d+%, load [\d.]+,(.*), \d+ sessions?$`), "${1}CPU <n>%, iowait <n>%, load <n>,$2, <n> sessions"},
}

func TestReadmeBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the README's blocks take about a minute")
	}
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if v := os.Getenv("GPUWARDEN_README"); v != "" {
		// Check another README against this binary: GPUWARDEN_README=old.md.
		if readme, err = os.ReadFile(v); err != nil {
			t.Fatal(err)
		}
	}
	// The README's agent, server and metadata mock listen on ports that
	// may be taken on this machine (another test, another user's agent):
	// its commands run on free ports instead (see readmeLocal).
	readmePortMap = map[string]string{}
	for _, p := range readmePorts {
		readmePortMap[p] = readmeFreePort(t)
	}
	blocks := parseReadme(string(readme))
	units := readmeUnits(t, blocks)
	bin := readmeBinDir(t)
	var wg sync.WaitGroup
	for _, u := range units {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(u.name, func(t *testing.T) { u.run(t, root, bin) })
		}()
	}
	wg.Wait()
}

// readmeBlock is one fenced block that shows commands.
type readmeBlock struct {
	section string
	line    int // of the opening fence, 1-based
	steps   []readmeCommand
	spec    readmeSpec
}

// readmeCommand is one `$ ` line (with its continuation lines) and the lines
// the README shows under it.
type readmeCommand struct {
	text string
	want []string
}

func (b readmeBlock) name() string {
	first := b.steps[0].text
	if i := strings.IndexByte(first, '\n'); i >= 0 {
		first = first[:i]
	}
	if len(first) > 60 {
		first = first[:60]
	}
	return fmt.Sprintf("line_%d_%s", b.line, first)
}

// parseReadme returns the README's fenced blocks that show commands.
func parseReadme(readme string) []readmeBlock {
	lines := strings.Split(readme, "\n")
	var blocks []readmeBlock
	section := ""
	for i := 0; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "#") {
			section = strings.TrimSpace(strings.TrimLeft(lines[i], "#"))
			continue
		}
		if !strings.HasPrefix(lines[i], "```") {
			continue
		}
		b := readmeBlock{section: section, line: i + 1}
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			line := lines[i]
			if cmd, ok := strings.CutPrefix(line, "$ "); ok {
				for strings.HasSuffix(cmd, `\`) && i+1 < len(lines) {
					i++
					cmd += "\n" + lines[i]
				}
				b.steps = append(b.steps, readmeCommand{text: cmd})
				continue
			}
			if len(b.steps) > 0 {
				s := &b.steps[len(b.steps)-1]
				s.want = append(s.want, line)
			}
		}
		if len(b.steps) > 0 {
			blocks = append(blocks, b)
		}
	}
	return blocks
}

// readmeUnit is blocks that run in order in one folder and session.
type readmeUnit struct {
	name   string
	blocks []readmeBlock

	dir, home string // the folder (also cwd) and HOME
	scratch   string // the runner's own files
	sh        *exec.Cmd
	stdin     io.WriteCloser
	out       *syncbuf.Buffer
	jobs      int
}

func readmeUnits(t *testing.T, blocks []readmeBlock) []*readmeUnit {
	used := map[string]bool{}
	var units []*readmeUnit
	for _, b := range blocks {
		b.spec = readmeSpecs[b.steps[0].text]
		used[b.steps[0].text] = true
		for _, s := range b.steps {
			for key := range b.spec.steps {
				used["step:"+key] = used["step:"+key] || key == s.text
			}
		}
		last := len(units) - 1
		if last >= 0 && !b.spec.alone && !units[last].blocks[0].spec.alone && units[last].blocks[0].section == b.section {
			units[last].blocks = append(units[last].blocks, b)
			continue
		}
		units = append(units, &readmeUnit{name: fmt.Sprintf("line_%d_%s", b.line, readmeName(b.section)), blocks: []readmeBlock{b}})
	}
	// A spec that names no block, or a step no block has, is stale: the
	// README changed under it.
	for key, spec := range readmeSpecs {
		if !used[key] {
			t.Errorf("readmeSpecs names a block the README does not have: %q", key)
		}
		for step := range spec.steps {
			if !used["step:"+step] {
				t.Errorf("readmeSpecs[%q] names a command its block does not have: %q", key, step)
			}
		}
	}
	if n := len(blocks); n < 20 {
		t.Errorf("found %d blocks with commands in the README, want at least 20", n)
	}
	return units
}

func readmeName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
	if len(s) > 40 {
		s = s[:40]
	}
	return s
}

// readmeBinDir holds what the README's PATH has first: gpuwarden (through a
// wrapper that dates catalog commands), trainer, python3 and the peers.
var readmeBinOnce struct {
	sync.Once
	dir string
	err error
}

func readmeBin(name string) string {
	return filepath.Join(readmeBinOnce.dir, name)
}

func readmeBinDir(t *testing.T) string {
	readmeBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "readme-bin")
		if err != nil {
			readmeBinOnce.err = err
			return
		}
		readmeBinOnce.dir = dir
		wrapper := readmeWrapper(binary)
		for _, f := range []struct{ path, body string }{{"gpuwarden", wrapper}} {
			if err := os.WriteFile(filepath.Join(dir, f.path), []byte(f.body), 0o755); err != nil {
				readmeBinOnce.err = err
				return
			}
		}
		copies := map[string]string{"trainer": trainer}
		if p, err := peertest.Binary("ec2-metadata-mock"); err == nil {
			copies["ec2-metadata-mock"] = p
		}
		for name, from := range copies {
			if err := readmeCopy(from, filepath.Join(dir, name)); err != nil {
				readmeBinOnce.err = err
				return
			}
		}
		if _, err := os.Stat("/usr/bin/python3"); err == nil {
			readmeBinOnce.err = os.Symlink("/usr/bin/python3", filepath.Join(dir, "python3"))
		}
		// The built binary's folder is TestMain's: let nobody through.
		if os.Geteuid() == 0 {
			_ = os.Chmod(filepath.Dir(binary), 0o755)
			_ = os.Chmod(dir, 0o755)
		}
	})
	if readmeBinOnce.err != nil {
		t.Fatal(readmeBinOnce.err)
	}
	return readmeBinOnce.dir
}

// readmeWrapper is the gpuwarden on the session's PATH: it runs the
// catalog commands as of readmeNow (see the file comment), and gives a
// command whose address defaults to a README port (up's --listen, status's
// --addr and preflight's --agent: the agent's; server's --addr) the free one
// of $README_AGENT or $README_SERVER, unless the command names its own.
func readmeWrapper(bin string) string {
	return `#!/bin/sh
has() { f=$1; shift; for a in "$@"; do case "$a" in "$f"|"$f"=*) return 0 ;; esac; done; return 1; }
case "$1" in
up) [ -z "$README_AGENT" ] || has --listen "$@" || set -- "$@" --listen "$README_AGENT" ;;
status) [ -z "$README_AGENT" ] || has --addr "$@" || set -- "$@" --addr "$README_AGENT" ;;
preflight) [ -z "$README_AGENT" ] || has --agent "$@" || set -- "$@" --agent "$README_AGENT" ;;
server) [ -z "$README_SERVER" ] || has --addr "$@" || set -- "$@" --addr "$README_SERVER" ;;
esac
case "$1" in
plan|offers|preflight) exec ` + readmeQuote(bin) + ` --now ` + readmeNow + ` "$@" ;;
esac
exec ` + readmeQuote(bin) + ` "$@"
`
}

func readmeCopy(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

func readmeQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// sparse makes a file of size bytes that takes no space.
func readmeSparse(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

// mkReadmeDir makes a fresh folder whose path is as long as readmeDir, so
// that output wraps where the README's does.
func mkReadmeDir(t *testing.T) string {
	t.Helper()
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	n := len(readmeDir) - len("/tmp/")
	for range 5000 {
		name := make([]byte, n)
		for i := range name {
			name[i] = alphabet[rand.IntN(len(alphabet))]
		}
		dir := "/tmp/" + string(name)
		if err := os.Mkdir(dir, 0o755); err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		} else if !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	t.Fatalf("no free folder name of %d letters in /tmp", n)
	return ""
}

func (u *readmeUnit) run(t *testing.T, root, bin string) {
	u.dir = mkReadmeDir(t)
	u.home = filepath.Join(u.dir, "home")
	// The runner's own files, where nobody can write (t.TempDir's parent
	// is root's alone).
	scratch, err := os.MkdirTemp("", "readme-run")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(scratch) })
	u.scratch = scratch
	for _, d := range []string{u.home, filepath.Join(u.dir, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A clone's files that the README's commands read.
	for _, d := range []string{"examples", "launch/testdata"} {
		if err := os.CopyFS(filepath.Join(u.dir, d), os.DirFS(filepath.Join(root, d))); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range u.blocks {
		if b.spec.setup != nil {
			b.spec.setup(t, u.dir)
		}
	}
	if os.Geteuid() == 0 {
		for _, d := range []string{u.dir, u.scratch} {
			if err := readmeChown(d, readmeNobody); err != nil {
				t.Fatal(err)
			}
		}
	}
	u.start(t, bin)
	for _, b := range u.blocks {
		t.Run(b.name(), func(t *testing.T) { u.runBlock(t, b) })
	}
}

func readmeChown(dir string, id int) error {
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, id, id)
	})
}

// start opens the unit's bash session.
func (u *readmeUnit) start(t *testing.T, bin string) {
	t.Helper()
	sh := exec.Command("/bin/bash", "--noprofile", "--norc")
	sh.Dir = u.dir
	sh.Env = []string{
		"PATH=" + bin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + u.home,
		"XDG_STATE_HOME=" + filepath.Join(u.home, ".local", "state"),
		"XDG_CACHE_HOME=" + filepath.Join(u.home, ".cache"),
		"XDG_CONFIG_HOME=" + filepath.Join(u.home, ".config"),
		"TMPDIR=" + filepath.Join(u.dir, "tmp"),
		"USER=ana", "LOGNAME=ana", "TZ=UTC", "LC_ALL=C.UTF-8", "TERM=dumb",
		// For the PATH's gpuwarden (readmeBinDir): the free ports of the
		// commands that default to the README's.
		"README_AGENT=127.0.0.1:" + readmePortMap["7070"], "README_SERVER=127.0.0.1:" + readmePortMap["8080"],
	}
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 {
		sh.SysProcAttr.Credential = &syscall.Credential{Uid: readmeNobody, Gid: readmeNobody, Groups: []uint32{}}
	}
	u.out = &syncbuf.Buffer{}
	sh.Stdout, sh.Stderr = u.out, u.out
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatalf("start bash: %v", err)
	}
	u.sh, u.stdin = sh, stdin
	done := make(chan struct{})
	go func() { _ = sh.Wait(); close(done) }()
	t.Cleanup(func() {
		// The section is over: stop what it left running, as a reader
		// closing the terminal would.
		_, _ = io.WriteString(stdin, "kill $(jobs -p) 2>/dev/null; wait; exit\n")
		select {
		case <-done:
		case <-time.After(20 * time.Second):
		}
		_ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
		<-done
	})
	u.send(t, "exec 2>&1\n")
}

func (u *readmeUnit) send(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(u.stdin, s); err != nil {
		t.Fatalf("the session ended: %v\n%s", err, u.out.String())
	}
}

const readmeMarker = "\x1eREADME-RC "

// waitMarker waits for the next marker after offset and returns what came
// before it and the exit status it carries.
func (u *readmeUnit) waitMarker(t *testing.T, from int, within time.Duration, what string) (string, int, int) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		all := u.out.String()
		if i := strings.Index(all[from:], readmeMarker); i >= 0 {
			rest := all[from+i+len(readmeMarker):]
			if j := strings.IndexByte(rest, '\n'); j >= 0 {
				code, _ := strconv.Atoi(strings.TrimSpace(rest[:j]))
				return all[from : from+i], code, from + i + len(readmeMarker) + j + 1
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not finish within %s; it printed:\n%s", what, within, all[from:])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readmeMark ends what was sent with a marker that carries $? and keeps $? for
// the next command.
const readmeMark = "__rc=$?; printf '\\036README-RC %d\\n' $__rc; (exit $__rc)\n"

// exec runs one command in the session and returns what it printed.
func (u *readmeUnit) exec(t *testing.T, c readmeCommand, step readmeStep) string {
	t.Helper()
	if step.before != nil {
		step.before(t, u)
	}
	text := readmeLocal(c.text)
	if step.shell != "" {
		text = strings.ReplaceAll(step.shell, "{bin}", readmeQuote(readmeBinOnce.dir))
	}
	from := len(u.out.String())
	switch {
	case step.stopOn != "":
		u.jobs++
		file := filepath.Join(u.scratch, fmt.Sprintf("job%d.out", u.jobs))
		u.send(t, readmeStripComment(text)+" </dev/null >"+readmeQuote(file)+" 2>&1 &\n__job=$!\n"+readmeMark)
		_, _, next := u.waitMarker(t, from, 10*time.Second, "starting "+text)
		u.waitFile(t, from, file, step.stopOn, text, 3*time.Minute)
		u.send(t, "kill -"+step.stopSignal+" $__job; wait $__job\n"+readmeMark)
		_, _, _ = u.waitMarker(t, next, 3*time.Minute, text)
		b, _ := os.ReadFile(file)
		return string(b)
	case step.ownTerminal != "":
		u.jobs++
		file := filepath.Join(u.scratch, fmt.Sprintf("job%d.out", u.jobs))
		u.send(t, readmeStripComment(text)+" </dev/null >"+readmeQuote(file)+" 2>&1 &\n"+readmeMark)
		u.waitMarker(t, from, 10*time.Second, "starting "+text)
		// What it printed up to that line; later lines are for its own terminal.
		s := u.waitFile(t, from, file, step.ownTerminal, text, time.Minute)
		i := strings.Index(s, step.ownTerminal)
		if j := strings.IndexByte(s[i:], '\n'); j >= 0 {
			s = s[:i+j+1]
		}
		return s
	default:
		u.send(t, "{\n"+text+"\n} </dev/null; "+readmeMark)
		out, _, _ := u.waitMarker(t, from, 4*time.Minute, text)
		return out
	}
}

// waitFile waits until a background command's output file holds s, and
// returns the file's text.
func (u *readmeUnit) waitFile(t *testing.T, from int, file, s, text string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		b, _ := os.ReadFile(file)
		if bytes.Contains(b, []byte(s)) {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("`%s` did not print %q within %s; it printed:\n%s\n--- the session:\n%s", text, s, within, b, u.out.String()[from:])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readmeStripComment cuts a trailing shell comment outside quotes.
func readmeStripComment(s string) string {
	var quote rune
	prev := ' '
	for i, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (prev == ' ' || prev == '\t'):
			return strings.TrimRight(s[:i], " \t")
		}
		prev = r
	}
	return s
}

func readmeWaitUntil(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitMetrics waits until the agent's /metrics has line.
func waitMetrics(line string) func(*testing.T, *readmeUnit) {
	return func(t *testing.T, _ *readmeUnit) {
		readmeWaitUntil(t, 2*time.Minute, "the agent's /metrics to show "+line, func() bool {
			res, err := http.Get(readmeLocal("http://127.0.0.1:7070/metrics"))
			if err != nil {
				return false
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			return bytes.Contains(b, []byte("\n"+line+"\n"))
		})
	}
}

// waitListening waits until something accepts connections on addr.
func waitListening(addr string) func(*testing.T, *readmeUnit) {
	return func(t *testing.T, _ *readmeUnit) {
		addr := readmeLocal(addr)
		readmeWaitUntil(t, time.Minute, addr+" to listen", func() bool {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
	}
}

// waitFiles waits until each of the unit's files contains s.
func waitFiles(s string, files ...string) func(*testing.T, *readmeUnit) {
	return func(t *testing.T, u *readmeUnit) {
		for _, f := range files {
			readmeWaitUntil(t, time.Minute, f+" to say "+s, func() bool {
				b, _ := os.ReadFile(filepath.Join(u.dir, f))
				return bytes.Contains(b, []byte(s))
			})
		}
	}
}

// need skips a block whose peer is missing, or fails it where CI requires
// the peers (GPUWARDEN_PEER_TESTS=1).
func readmeNeed(t *testing.T, what string) {
	t.Helper()
	missing := func(msg string) {
		t.Helper()
		if os.Getenv(peertest.RequireEnv) == "1" && what != "no-driver" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	switch what {
	case "aemm":
		if _, err := os.Stat(readmeBin("ec2-metadata-mock")); err != nil {
			missing("amazon-ec2-metadata-mock not available: run scripts/install-peers.sh")
		}
	case "torch":
		if out, err := exec.Command("/usr/bin/python3", "-c", "import torch").CombinedOutput(); err != nil {
			missing(fmt.Sprintf("Debian's python3-torch not available (%v: %s): run scripts/install-peers.sh", err, bytes.TrimSpace(out)))
		}
	case "no-driver":
		if _, err := os.Stat("/dev/nvidiactl"); err == nil {
			missing("this host has an NVIDIA driver: the block shows a host without one")
		}
	}
}

func (u *readmeUnit) runBlock(t *testing.T, b readmeBlock) {
	for _, n := range b.spec.needs {
		readmeNeed(t, n)
	}
	got := make([]string, len(b.steps))
	for i, c := range b.steps {
		got[i] = u.display(u.exec(t, c, b.spec.steps[c.text]))
	}
	wantVars := readmeBindVars(b.spec.vars, b.steps, nil)
	gotVars := readmeBindVars(b.spec.vars, b.steps, got)
	for i, c := range b.steps {
		want := readmeTrim(c.want)
		have := readmeTrim(strings.Split(strings.TrimRight(got[i], "\n"), "\n"))
		if got[i] == "" {
			have = nil
		}
		nw, nh := want, have
		if !b.spec.exact {
			var cw, ch bool
			nw, cw = readmeNormalize(want, b.spec.rules, wantVars)
			nh, ch = readmeNormalize(have, b.spec.rules, gotVars)
			if cw || ch {
				nw, nh = readmeCollapse(nw), readmeCollapse(nh)
			}
		}
		var fw, fh []string
		nw, fw = readmeFloat(nw, b.spec.floating)
		nh, fh = readmeFloat(nh, b.spec.floating)
		line, ok := readmeMatch(nw, nh)
		if ok && !slices.Equal(fw, fh) {
			line, ok = fmt.Sprintf("the lines that may fall anywhere: %q, printed: %q", fw, fh), false
		}
		if !ok {
			t.Errorf("README line %d: `$ %s`\n--- the README shows:\n%s\n--- the command prints:\n%s\n--- first difference (masked), README line: %s",
				b.line, c.text, strings.Join(c.want, "\n"), strings.Join(have, "\n"), line)
		}
	}
}

// display writes the unit's folder, host and ports as the README shows them.
func (u *readmeUnit) display(s string) string {
	s = strings.ReplaceAll(s, u.dir, readmeDir)
	for readme, local := range readmePortMap {
		s = regexp.MustCompile(`:`+local+`\b`).ReplaceAllString(s, ":"+readme)
	}
	if host, err := os.Hostname(); err == nil && host != "" && host != readmeHost {
		s = regexp.MustCompile(`\b`+regexp.QuoteMeta(host)+`\b`).ReplaceAllString(s, readmeHost)
	}
	return s
}

func readmeTrim(lines []string) []string {
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// bindVars finds each var's value on one side: in the README's lines, or in
// what the commands printed (got).
func readmeBindVars(vars []*regexp.Regexp, steps []readmeCommand, got []string) []string {
	var text string
	if got == nil {
		for _, s := range steps {
			text += strings.Join(s.want, "\n") + "\n"
		}
	} else {
		text = strings.Join(got, "\n")
	}
	values := make([]string, len(vars))
	for i, re := range vars {
		if m := re.FindStringSubmatch(text); m != nil {
			values[i] = m[1]
		}
	}
	return values
}

// readmeNormalize masks what varies; it says whether it masked anything.
func readmeNormalize(lines []string, extra []readmeRule, vars []string) ([]string, bool) {
	out := make([]string, len(lines))
	changed := false
	var varRules []readmeRule
	for i, v := range vars {
		if v == "" {
			continue
		}
		n, _ := strconv.Atoi(v)
		varRules = append(varRules, readmeRule{regexp.MustCompile(`(step[-= ]0*)` + strconv.Itoa(n) + `\b`), fmt.Sprintf("${1}<step%d>", i+1)})
	}
	for i, line := range lines {
		s := line
		for _, r := range varRules {
			s = r.re.ReplaceAllString(s, r.repl)
		}
		for _, r := range readmeRules {
			s = r.re.ReplaceAllString(s, r.repl)
		}
		for _, r := range extra {
			s = r.re.ReplaceAllString(s, r.repl)
		}
		changed = changed || s != line
		out[i] = s
	}
	return out, changed
}

// readmeFloat takes the lines that match floating out of lines, and returns
// them sorted.
func readmeFloat(lines []string, floating []*regexp.Regexp) (rest, out []string) {
	for _, l := range lines {
		float := false
		for _, re := range floating {
			float = float || re.MatchString(l)
		}
		if float {
			out = append(out, l)
		} else {
			rest = append(rest, l)
		}
	}
	slices.Sort(out)
	return rest, out
}

var readmeSpaces = regexp.MustCompile(`[ \t]+`)

// collapse compares runs of readmeSpaces as one: columns follow masked widths.
func readmeCollapse(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimRight(readmeSpaces.ReplaceAllString(l, " "), " ")
	}
	return out
}

// elidedMatch matches got against want, where a want line `…` stands for
// any number of lines; on a mismatch it names the first want line it could
// not place.
func readmeMatch(want, got []string) (string, bool) {
	best := 0 // furthest want line matched, for the message
	var match func(w, g int) bool
	match = func(w, g int) bool {
		best = max(best, w)
		if w == len(want) {
			return g == len(got)
		}
		if strings.TrimSpace(want[w]) == "…" {
			for k := g; k <= len(got); k++ {
				if match(w+1, k) {
					return true
				}
			}
			return false
		}
		return g < len(got) && want[w] == got[g] && match(w+1, g+1)
	}
	if match(0, 0) {
		return "", true
	}
	if best < len(want) {
		return fmt.Sprintf("%q", want[best]), false
	}
	return "(the command prints more lines)", false
}
