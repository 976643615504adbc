package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"

	"github.com/gpuwarden/gpuwarden/catalog"
	"github.com/gpuwarden/gpuwarden/gpusim"
)

// notInSnapshot are the instance types the README's fleet demo names that
// the embedded price snapshot does not hold, with their cards from the
// provider's own page (AWS, "Amazon EC2 P5 instances": p5.4xlarge has one
// H100 80 GB SXM).
var notInSnapshot = map[string]string{"aws p5.4xlarge": "1×H100-SXM"}

// TestReadmeFleetDemoIsTrue: each simulated box of the README's fleet demo
// has the card its instance_type label rents (a g6e.xlarge is one L40S, not
// an H100), and a name of its own, so that the fleet shows three boxes and
// not three nodes all called after the host the demo runs on.
func TestReadmeFleetDemoIsTrue(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(readme), "\\\n", " ")
	var ups []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "$ gpuwarden up --simulate ") && strings.Contains(l, "--server") {
			ups = append(ups, l)
		}
	}
	if len(ups) != 3 {
		t.Fatalf("the fleet demo has %d simulated agents, want 3", len(ups))
	}
	embedded, err := catalog.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	cards := map[string]string{}
	for _, o := range embedded.Offers.All() {
		cards[o.Provider+" "+o.Instance] = trimFloat(o.GPUCount) + "×" + o.GPU
	}
	for k, v := range notInSnapshot {
		cards[k] = v
	}
	arg := func(line, flag string) string {
		m := regexp.MustCompile(`(?:^|\s)` + regexp.QuoteMeta(flag) + `[ =](\S+)`).FindStringSubmatch(line)
		if m == nil {
			return ""
		}
		return m[1]
	}
	names := map[string]bool{}
	for _, l := range ups {
		labels := map[string]string{}
		for _, kv := range strings.Split(arg(l, "--label"), ",") {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = v
		}
		spec, err := gpusim.ParseSpec(arg(l, "--simulate"))
		if err != nil {
			t.Fatal(err)
		}
		box := labels["provider"] + " " + labels["instance_type"]
		want, ok := cards[box]
		switch {
		case !ok:
			t.Errorf("%s: the demo's instance type is in no catalog here", box)
		case want != trimFloat(float64(spec.Count))+"×"+spec.Model:
			t.Errorf("%s rents %s; the demo simulates %d×%s", box, want, spec.Count, spec.Model)
		}
		name := arg(l, "--hostname")
		if name == "" || names[name] {
			t.Errorf("%s: --hostname %q; each box needs a name of its own", box, name)
		}
		names[name] = true
	}
}

// TestUpHostnameNamesTheBox: --hostname is the name the fleet server shows
// (and the agent logs), in place of the host the agent runs on.
func TestUpHostnameNamesTheBox(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, dir, "sqlite:"+filepath.Join(dir, "server.db"))
	admin := writeFile(t, filepath.Join(dir, "admin.token"), srv.admin)
	r := gwLive(t, dir, "token", "create", "--project", "ml", "--role", "agent", "--server", srv.url, "--token-file", admin)
	agentToken := writeFile(t, filepath.Join(dir, "agent.token"), strings.TrimSpace(r.stdout))
	up := startProc(t, dir, "up", "--simulate", "1xL40S", "--hostname", "box-b", "--data-dir", filepath.Join(dir, "box-b"),
		"--listen", "", "--cloud", "none", "--dry-run", "--server", srv.url, "--token-file", agentToken, "--heartbeat", "1s")
	if line := up.wait(t, `msg="agent up"`, 20*time.Second); !strings.Contains(line, "node=box-b") {
		t.Errorf("the agent logs %q, want node=box-b", line)
	}
	up.wait(t, "registered with the fleet server", 20*time.Second)
	var ns []gpuwarden.Node
	if err := json.Unmarshal([]byte(getWithToken(t, srv.url+"/api/v1/nodes", srv.admin)), &ns); err != nil {
		t.Fatal(err)
	}
	if len(ns) != 1 || ns[0].Hostname != "box-b" || len(ns[0].GPUs) != 1 || ns[0].GPUs[0].Model != "L40S" {
		t.Errorf("nodes = %+v, want one, box-b with an L40S", ns)
	}
	if r := gw(t, dir, "up", "--hostname", "bad\nname", "--simulate", "1xH100", "--data-dir", filepath.Join(dir, "bad"), "--listen", ""); r.code != 2 {
		t.Errorf("--hostname with a line break: exit %d, want 2\n%s", r.code, r.stderr)
	}
}
