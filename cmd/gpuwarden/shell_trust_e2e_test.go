package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden/config"
)

// hostileRegion is issue #32's reproduction: a price catalog's Region cell
// that runs `touch PWNED` if it ever reaches sh -c unquoted, or inside a
// single-quoted string (Lambda's launch template).
const hostileRegion = "us-east-1'$(touch${IFS}PWNED)'"

// TestHostileCatalogCellIsRefusedWhereRead is item 1 of issue #32 end to
// end: a mirror serves lambda/vms.csv with a $0.01 row whose region is
// shell syntax. `catalog update` refuses the file, naming its line and the
// cell, and keeps none of it; the same row in a price file given to plan
// is refused the same way; a plan file whose target carries it by hand is
// refused by launch before anything runs; nothing ever creates PWNED.
func TestHostileCatalogCellIsRefusedWhereRead(t *testing.T) {
	root := repoRoot(t)
	work := t.TempDir()
	published, err := os.ReadFile(filepath.Join(root, "catalog", "testdata", "published", "lambda", "vms.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Count(string(published), "\n")
	hostile := string(published) + "gpu_1x_h100_pcie,H100,1.0,26.0,200.0,0.01," + hostileRegion +
		`,"{'Gpus': [{'Name': 'H100', 'Manufacturer': 'NVIDIA', 'Count': 1.0, 'MemoryInfo': {'SizeInMiB': 81920}}], 'TotalGpuMemoryInMiB': 81920}",` + "\n"
	ps := newPublishedServer(t)
	ps.Override("lambda", []byte(hostile))
	data := filepath.Join(work, "data")

	r := gw(t, work, "catalog", "update", "--data-dir", data, "--from", ps.BaseURL(), "--cloud", "lambda")
	wantLine := ps.BaseURL() + "/lambda/vms.csv:" + itoa(lines+1) + ": region name"
	if stderr := strings.Join(strings.Fields(r.stderr), " "); r.code == 0 || !strings.Contains(stderr, wantLine) || !strings.Contains(stderr, `has "'"`) {
		t.Errorf("catalog update of the hostile mirror: exit %d, stderr %q; want a failure naming %q", r.code, r.stderr, wantLine)
	}
	if _, err := os.Stat(filepath.Join(data, "catalogs", "lambda", "vms.csv")); err == nil {
		t.Errorf("the refused file was stored")
	}

	// The same row in the user's own price file, given to plan.
	prices := writeFile(t, filepath.Join(work, "prices.csv"),
		"provider,region,instance,gpu,gpu_count,vram_gb_per_gpu,currency,on_demand_hourly\n"+
			"lambda,us-east-1,gpu_1x_a10,A10,1,24,USD,0.75\n"+
			"lambda,"+hostileRegion+",gpu_1x_h100_pcie,H100,1,80,USD,0.01\n")
	r = gw(t, work, "plan", filepath.Join(root, "examples", "qlora-7b.yaml"), "--no-embedded", "--catalog", prices, "-o", "targets")
	if r.code != 2 || !strings.Contains(r.stderr, "prices.csv:3:2: column region: region name") {
		t.Errorf("plan on the hostile price file: exit %d, stderr %q; want 2 naming prices.csv:3:2", r.code, r.stderr)
	}

	// A target written by hand with the same region: launch refuses the
	// plan file, naming the field's line, before any command runs.
	plan := writeFile(t, filepath.Join(work, "hand.yaml"), "workload:\n  kind: inference\n  params_b: 7\nwork_hours: 100\n"+
		"targets:\n  - name: plan-a\n    provider: lambda\n    region: \""+hostileRegion+"\"\n    offer: gpu_1x_h100_pcie\n"+
		"    launch: echo {{.Region}} '{{.Region}}' > launched\n")
	r = gwLive(t, work, "launch", plan, "--data-dir", data)
	if r.code != 2 || !strings.Contains(r.stderr, "hand.yaml:8") || !strings.Contains(r.stderr, "targets[0].region") {
		t.Errorf("launch of a hand-written hostile target: exit %d, stderr %q; want 2 naming hand.yaml:8 targets[0].region", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(work, "launched")); err == nil {
		t.Errorf("launch ran the command of a plan file it should have refused")
	}
	if _, err := os.Stat(filepath.Join(work, "PWNED")); err == nil {
		t.Fatalf("a catalog cell ran as a shell command")
	}
}

// TestPlanTargetsLaunchAsWritten follows `plan --help`'s example, `plan -o
// targets >> plan.yaml` then `launch`, with a catalog whose cheapest
// offers are in a region with a space (a real Vast place) and on Lambda
// (whose template puts values inside a single-quoted JSON body): the block
// parses back as a plan file, holds no value that needs quoting (the
// skipped offer is named in a comment), and each launcher receives its
// values as the words written, through stub CLIs that record their argv.
func TestPlanTargetsLaunchAsWritten(t *testing.T) {
	root := repoRoot(t)
	work := t.TempDir()
	prices := writeFile(t, filepath.Join(work, "prices.csv"),
		"provider,region,instance,gpu,gpu_count,vram_gb_per_gpu,currency,on_demand_hourly\n"+
			"vast,British Columbia,1x-RTX_4090,RTX-4090,1,24,USD,0.20\n"+
			"lambda,us-east-1,gpu_1x_a10,A10,1,24,USD,0.30\n"+
			"aws,us-east-1,g6.xlarge,L4,1,24,USD,0.40\n"+
			"vast,Germany,1x-RTX_4090,RTX-4090,1,24,USD,0.50\n")
	r := gw(t, work, "plan", filepath.Join(root, "examples", "qlora-7b.yaml"), "--no-embedded", "--catalog", prices, "-o", "targets")
	if r.code != 0 {
		t.Fatalf("plan -o targets: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, `# skipped vast "British Columbia" 1x-RTX_4090: "British Columbia" is not a plain word`) {
		t.Errorf("the offer with a space in its region is not named as skipped:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, "region: British Columbia") {
		t.Errorf("plan -o targets wrote a value that needs quoting:\n%s", r.stdout)
	}
	base, err := os.ReadFile(filepath.Join(root, "examples", "qlora-7b.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	planFile := writeFile(t, filepath.Join(work, "gpuwarden.yaml"), string(base)+"\n"+r.stdout)
	cfg, err := config.Load(planFile)
	if err != nil {
		t.Fatalf("the targets block does not parse back: %v\n%s", err, r.stdout)
	}
	places := map[string]bool{}
	for _, tg := range cfg.Targets {
		places[tg.Provider+" "+tg.Region] = true
	}
	if len(cfg.Targets) != 3 || !places["lambda us-east-1"] || !places["aws us-east-1"] || !places["vast Germany"] {
		t.Fatalf("targets parsed back: %+v", cfg.Targets)
	}

	// Stub launchers: each writes its argv, one word a line, and fails
	// like a capacity error so that launch moves on to the next.
	bin := filepath.Join(work, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"curl", "aws", "sky"} {
		writeExec(t, filepath.Join(bin, name), "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > \""+work+"/"+name+".argv\"\n"+
			"echo 'InsufficientInstanceCapacity: no capacity' >&2\nexit 1\n")
	}
	cmd := gwCmd(work, "launch", planFile, "--data-dir", filepath.Join(work, "data"), "--backoff", "1ms")
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "LAMBDA_API_KEY=k", "SSH_KEY=mine", "AMI=ami-1")
	out, _ := cmd.CombinedOutput()
	for name, want := range map[string][]string{
		"curl": {`{"region_name":"us-east-1","instance_type_name":"gpu_1x_a10",`},
		"aws":  {"--region\nus-east-1\n", "--instance-type\ng6.xlarge\n"},
		"sky":  {"--cloud\nvast\n--region\nGermany\n--instance-type\n1x-RTX_4090\n"},
	} {
		got, err := os.ReadFile(filepath.Join(work, name+".argv"))
		if err != nil {
			t.Errorf("%s was never run: %v\n%s", name, err, out)
			continue
		}
		for _, w := range want {
			if !strings.Contains(string(got), w) {
				t.Errorf("%s got argv\n%s\nwant it to hold %q", name, got, w)
			}
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func writeExec(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

// gwCmd is the real binary as a command to adjust (its environment) before
// running it in dir.
func gwCmd(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	return cmd
}

// TestCatalogTextIsEscapedForEachOutput is issue #32 item 6: a catalog's
// free text (its source column) with an escape sequence, a spreadsheet
// formula and a | reaches no terminal, spreadsheet or markdown table as
// it is.
func TestCatalogTextIsEscapedForEachOutput(t *testing.T) {
	root := repoRoot(t)
	work := t.TempDir()
	prices := writeFile(t, filepath.Join(work, "prices.csv"),
		"provider,region,instance,gpu,gpu_count,vram_gb_per_gpu,currency,on_demand_hourly,source\n"+
			"aws,us-east-1,g6.xlarge,L4,1,24,USD,0.40,\"\x1b[2J\x1b[31mred|cell\"\n"+
			"aws,us-east-1,g5.xlarge,A10G,1,24,USD,0.50,\"=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\"\n")
	table := gw(t, work, "offers", "--no-embedded", "--catalog", prices)
	if table.code != 0 || strings.Contains(table.stdout, "\x1b") {
		t.Errorf("offers table: exit %d, an escape reaches the terminal:\n%q", table.code, table.stdout)
	}
	csvOut := gw(t, work, "offers", "--no-embedded", "--catalog", prices, "-o", "csv")
	if !strings.Contains(csvOut.stdout, `'=HYPERLINK(`) {
		t.Errorf("offers -o csv keeps a formula a spreadsheet would run:\n%s", csvOut.stdout)
	}
	plan := filepath.Join(root, "examples", "qlora-7b.yaml")
	planTable := gw(t, work, "plan", plan, "--no-embedded", "--catalog", prices)
	if strings.Contains(planTable.stdout, "\x1b") || !strings.Contains(planTable.stdout, `source: \x1b[2J\x1b[31mred|cell`) {
		t.Errorf("plan's table carries an escape sequence to the terminal, or hides the source:\n%q", planTable.stdout)
	}
	planCSV := gw(t, work, "plan", plan, "--no-embedded", "--catalog", prices, "-o", "csv")
	if !strings.Contains(planCSV.stdout, `'=HYPERLINK(`) || strings.Contains(planCSV.stdout, ",=HYPERLINK(") {
		t.Errorf("plan -o csv keeps a formula a spreadsheet would run:\n%s", planCSV.stdout)
	}
	md := gw(t, work, "plan", plan, "--no-embedded", "--catalog", prices, "-o", "md")
	if strings.Contains(md.stdout, "\x1b") {
		t.Errorf("plan -o md carries an escape sequence:\n%q", md.stdout)
	}
}
