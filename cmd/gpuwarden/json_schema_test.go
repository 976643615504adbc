package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// TestEveryJSONOutputNamesItsSchema runs every command that has -o json,
// through the real binary, and checks that its output is an object whose
// first field is "schema": "gpuwarden.<kind>/v1". A command given -o json
// and missing from the table fails the test, so that a new one cannot ship
// without a schema.
func TestEveryJSONOutputNamesItsSchema(t *testing.T) {
	dir := t.TempDir()
	root := repoRoot(t)
	data := filepath.Join(dir, "data")
	db := "sqlite:" + filepath.Join(dir, "server.db")
	plan := filepath.Join(root, "examples", "notebook-a100.yaml")
	launchFile := launchPlan(t, dir, "ok.sh")
	if err := os.WriteFile(filepath.Join(dir, "ckpt"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}

	// Each case runs after the ones before it: nodes reads burnin's ledger,
	// report reads launch's.
	cases := []struct {
		command string // the command's path, as cobra names it
		kind    string
		args    []string
	}{
		{"gpuwarden version", "version", []string{"version"}},
		{"gpuwarden plan", planJSONKind, []string{"plan", plan}},
		// A source that refuses: the failure is reported in JSON too.
		{"gpuwarden catalog update", "catalog-update", []string{"catalog", "update", "--data-dir", data, "--cloud", "lambda", "--from", "http://127.0.0.1:1/catalogs/v7", "--timeout", "5s"}},
		{"gpuwarden catalog list", "catalog-list", []string{"catalog", "list", "--data-dir", data}},
		{"gpuwarden offers", "offers", []string{"offers", "--gpu", "h100", "--max-price", "5"}},
		{"gpuwarden egress", "egress", []string{"egress", "ckpt", "--from", "aws:us-east-1", "--to", "internet"}},
		{"gpuwarden canary", "canary", []string{"canary", "--simulate", "1xH100", "--no-frameworks"}},
		{"gpuwarden lock", "lock", []string{"lock", "--simulate", "1xH100", "--no-frameworks"}},
		{"gpuwarden burnin", "burnin", []string{"burnin", "--quick", "--simulate", "1xH100", "--data-dir", data, "--disk-bytes", "8388608"}},
		{"gpuwarden nodes", "nodes", []string{"nodes", "--data-dir", data}},
		{"gpuwarden preflight", "preflight", []string{"preflight", plan, "--offline", "--data-dir", data}},
		{"gpuwarden launch", "launch", []string{"launch", launchFile, "--data-dir", data, "--backoff", "10ms"}},
		{"gpuwarden launch --list", "launch-attempts", []string{"launch", "--list", "--data-dir", data}},
		{"gpuwarden report", "report.provisioning", []string{"report", "provisioning", "--data-dir", data}},
		{"gpuwarden project set", "projects", []string{"project", "set", "ml", "--budget", "5000", "--db", db}},
		{"gpuwarden project list", "projects", []string{"project", "list", "--db", db}},
		{"gpuwarden token create", "token", []string{"token", "create", "--project", "ml", "--role", "viewer", "--db", db}},
		{"gpuwarden token list", "tokens", []string{"token", "list", "--db", db}},
		{"gpuwarden node gone", "node-gone", []string{"node", "gone", "n1", "--db", db}}, // n1 is seeded below
		{"gpuwarden run", runJSONKind, []string{"run", "--data-dir", data, "--checkpoint-dir", filepath.Join(dir, "ck"), "--cloud", "none", "--", "true"}},
		{"gpuwarden run --drill", "drill", []string{"run", "--drill", "--data-dir", data, "--checkpoint-dir", filepath.Join(dir, "ck2"),
			"--cloud", "none", "--drill-timeout", "20s", "--", trainer, "--steps", "100000", "--every", "10", "--step-time", "5ms"}},
		{"gpuwarden checkpoint list", "checkpoints", []string{"checkpoint", "list", "--checkpoint-dir", filepath.Join(dir, "ck2")}},
		{"gpuwarden bench fleet", "bench", []string{"bench", "fleet", "--agents", "2", "--duration", "1s", "--warm-up", "100ms", "--min-rate", "0"}},
		{"gpuwarden status", "status", nil}, // against the agent started below
	}

	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.command] = true
	}
	walkJSONCommands((&app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, now: time.Now}).rootCommand(),
		func(c *cobra.Command) {
			if !covered[c.CommandPath()] {
				t.Errorf("%s has -o json but no case here: add one", c.CommandPath())
			}
		})

	for _, c := range cases {
		t.Run(c.command, func(t *testing.T) {
			args := c.args
			if c.kind == "node-gone" {
				seedFleetNode(t, filepath.Join(dir, "server.db"), "n1")
			}
			if c.kind == "status" {
				up := startUp(t, dir, "--simulate", "1xH100", "--data-dir", filepath.Join(dir, "updata"))
				addr := strings.TrimSuffix(strings.TrimPrefix(up.url(t), "http://"), "/")
				args = []string{"status", "--addr", addr}
			}
			// -o json before the arguments: run's end with the job's own.
			// catalog's subcommand comes before its flags.
			verb := 1
			if args[0] == "catalog" {
				verb = 2
			}
			r := gwLive(t, dir, append(append(slices.Clone(args[:verb]), "-o", "json"), args[verb:]...)...)
			var head struct {
				Schema string `json:"schema"`
			}
			dec := json.NewDecoder(strings.NewReader(r.stdout))
			if err := dec.Decode(&head); err != nil {
				t.Fatalf("exit %d, stdout is not a JSON object: %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
			}
			if want := jsonSchema(c.kind); head.Schema != want {
				t.Errorf("schema %q, want %q (exit %d)\n%s", head.Schema, want, r.code, r.stderr)
			}
			if !strings.HasPrefix(r.stdout, "{\n  \"schema\": ") {
				t.Errorf("schema is not the first field:\n%.200s", r.stdout)
			}
		})
	}
}

// walkJSONCommands calls fn for each command whose --output offers json;
// launch's --list is a second output of one command, listed by hand above.
func walkJSONCommands(c *cobra.Command, fn func(*cobra.Command)) {
	if f := c.Flags().Lookup("output"); f != nil && strings.Contains(f.Usage, "json") && !c.Hidden {
		fn(c)
	}
	for _, sub := range c.Commands() {
		walkJSONCommands(sub, fn)
	}
}

func TestWithSchema(t *testing.T) {
	tests := []struct{ in, want, err string }{
		{`{"a":1}`, `{"schema":"gpuwarden.x/v1","a":1}`, ""},
		{` {} `, `{"schema":"gpuwarden.x/v1"}`, ""},
		{`{"schema":"gpuwarden.x/v1","a":1}`, `{"schema":"gpuwarden.x/v1","a":1}`, ""},
		{`{"schema":"gpuwarden.y/v1"}`, "", "another schema"},
		{`[1,2]`, "", "not an object"},
	}
	for _, tt := range tests {
		got, err := withSchema([]byte(tt.in), jsonSchema("x"))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("withSchema(%s) = %s, %v; want an error with %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("withSchema(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}
