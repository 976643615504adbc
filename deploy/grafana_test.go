package deploy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden/internal/peertest"
	"sigs.k8s.io/yaml"
)

const (
	grafanaDashboards   = "grafana/dashboards"
	grafanaProvisioning = "grafana/provisioning"
)

// dashboard is the part of Grafana's dashboard JSON model the files use.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Title      string `json:"title"`
		Type       string `json:"type"`
		Datasource struct {
			Type string `json:"type"`
			UID  string `json:"uid"`
		} `json:"datasource"`
		GridPos struct{ H, W, X, Y int } `json:"gridPos"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func loadDashboards(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(grafanaDashboards, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s: %v", grafanaDashboards, err)
	}
	out := map[string]dashboard{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Base(f)] = d
	}
	return out
}

// grafanaVars are the variables a panel query may use: the dashboards'
// own and Grafana's built-in ranges.
var grafanaVar = regexp.MustCompile(`\$(\{)?([A-Za-z_]+)`)

// TestGrafanaDashboards checks what Grafana would reject or show wrong
// without a Grafana: unique UIDs and panel IDs, every panel on the
// variable datasource with a query, every variable a query uses defined,
// panels inside the 24-column grid, and the provisioning files.
func TestGrafanaDashboards(t *testing.T) {
	dashboards := loadDashboards(t)
	for _, want := range []string{"box.json", "fleet.json"} {
		if _, ok := dashboards[want]; !ok {
			t.Errorf("%s/%s missing", grafanaDashboards, want)
		}
	}
	uids := map[string]string{}
	for file, d := range dashboards {
		t.Run(file, func(t *testing.T) {
			if d.UID == "" || d.Title == "" {
				t.Errorf("uid %q title %q: both required", d.UID, d.Title)
			}
			if other, dup := uids[d.UID]; dup {
				t.Errorf("uid %q also in %s", d.UID, other)
			}
			uids[d.UID] = file
			vars := map[string]bool{"__range": true, "__rate_interval": true, "__interval": true}
			for _, v := range d.Templating.List {
				vars[v.Name] = true
			}
			if !vars["datasource"] {
				t.Error("no datasource variable: the dashboard would be tied to one datasource UID")
			}
			ids := map[int]bool{}
			for _, p := range d.Panels {
				if p.ID == 0 || ids[p.ID] {
					t.Errorf("panel %q: id %d is zero or repeated", p.Title, p.ID)
				}
				ids[p.ID] = true
				if p.Title == "" || p.Type == "" {
					t.Errorf("panel %d: title %q type %q, both required", p.ID, p.Title, p.Type)
				}
				if p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
					t.Errorf("panel %q: datasource %+v, want prometheus ${datasource}", p.Title, p.Datasource)
				}
				if g := p.GridPos; g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
					t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
				}
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no query", p.Title)
				}
				for _, tg := range p.Targets {
					if strings.TrimSpace(tg.Expr) == "" {
						t.Errorf("panel %q target %s: empty expr", p.Title, tg.RefID)
					}
					if err := balanced(tg.Expr); err != nil {
						t.Errorf("panel %q: %v: %s", p.Title, err, tg.Expr)
					}
					for _, m := range grafanaVar.FindAllStringSubmatch(tg.Expr, -1) {
						if !vars[m[2]] {
							t.Errorf("panel %q uses undefined variable $%s", p.Title, m[2])
						}
					}
				}
			}
		})
	}

	var ds struct {
		APIVersion  int `json:"apiVersion"`
		Datasources []struct {
			Name, UID, Type, Access, URL string
			IsDefault                    bool           `json:"isDefault"`
			JSONData                     map[string]any `json:"jsonData"`
		} `json:"datasources"`
	}
	decodeStrict(t, filepath.Join(grafanaProvisioning, "datasources.yaml"), &ds)
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" {
		t.Errorf("datasources.yaml: %+v, want one prometheus datasource, apiVersion 1", ds)
	}
	var prov struct {
		APIVersion int `json:"apiVersion"`
		Providers  []struct {
			Name, Folder, Type    string
			DisableDeletion       bool `json:"disableDeletion"`
			AllowUIUpdates        bool `json:"allowUiUpdates"`
			UpdateIntervalSeconds int  `json:"updateIntervalSeconds"`
			Options               struct {
				Path                      string `json:"path"`
				FoldersFromFilesStructure bool   `json:"foldersFromFilesStructure"`
			} `json:"options"`
		} `json:"providers"`
	}
	decodeStrict(t, filepath.Join(grafanaProvisioning, "dashboards.yaml"), &prov)
	if prov.APIVersion != 1 || len(prov.Providers) != 1 || prov.Providers[0].Type != "file" || prov.Providers[0].Options.Path == "" {
		t.Errorf("dashboards.yaml: %+v, want one file provider with a path", prov)
	}
}

func decodeStrict(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestGrafanaPanelsReturnData runs every panel query of both dashboards
// against a real Prometheus that scrapes two simulated agents and a fleet
// server (the real binary, SQLite), and fails on a query that returns
// nothing, naming the dashboard, panel and expression. It also loads
// rules.yaml and dcgm-compat.rules.yaml into that Prometheus and checks that
// the DCGM series are recorded.
func TestGrafanaPanelsReturnData(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Prometheus, a server and two agents")
	}
	// Fail fast, before the build, where the peer is missing.
	if _, err := peertest.Binary("prometheus"); err != nil && os.Getenv(peertest.RequireEnv) != "1" {
		t.Skipf("prometheus not available (%v): install Debian's prometheus package", err)
	}
	dir := t.TempDir()
	bin := buildGPUWarden(t, dir)

	serverAddr := "127.0.0.1:" + strconv.Itoa(peertest.FreePort(t))
	serverData := filepath.Join(dir, "server-data")
	server := startLogged(t, dir, bin, "server", "--db", "sqlite:"+filepath.Join(dir, "server.db"),
		"--addr", serverAddr, "--data-dir", serverData)
	server.wait(t, "fleet server up", 30*time.Second)
	adminFile := filepath.Join(serverData, "admin.token")
	remote := []string{"--server", "http://" + serverAddr, "--token-file", adminFile}
	agentToken := writeSecret(t, dir, "agent.token", runOK(t, dir, bin, append([]string{"token", "create", "--project", "vision", "--role", "agent"}, remote...)...))
	viewer := writeSecret(t, dir, "viewer.token", runOK(t, dir, bin, append([]string{"token", "create", "--project", "*", "--role", "viewer"}, remote...)...))
	runOK(t, dir, bin, append([]string{"project", "set", "vision", "--budget", "5000", "--currency", "EUR"}, remote...)...)

	plan := writeSecret(t, dir, "gpuwarden.yaml", "workload: {kind: notebook}\nwork_hours: 10\nbudget: {monthly_limit: 5000, currency: EUR}\nbox: {hourly_rate: 3.5}\n")
	agents := []struct{ id, spec, labels string }{
		// A working pair with one Xid, paid for by ana.
		{"box-a", "2xH100,load=60,fault=xid@1", "owner=ana,project=vision,provider=aws,region=eu-west-1,instance_type=p5.48xlarge,price=3.50,currency=EUR"},
		// An idle box nobody owns: an orphan.
		{"box-b", "1xH100", "provider=gcp,region=europe-west4,price=3.50,currency=EUR"},
	}
	var targets []string
	for _, a := range agents {
		addr := "127.0.0.1:" + strconv.Itoa(peertest.FreePort(t))
		targets = append(targets, addr)
		p := startLogged(t, dir, bin, "up", plan, "--simulate", a.spec, "--data-dir", filepath.Join(dir, a.id),
			"--listen", addr, "--cloud", "none", "--dry-run", "--server", "http://"+serverAddr, "--token-file", agentToken,
			"--node-id", a.id, "--label", a.labels, "--heartbeat", "1s", "--interval", "1s")
		p.wait(t, "agent up", 30*time.Second)
	}

	rules := func(f string) string {
		abs, err := filepath.Abs(filepath.Join("prometheus", f))
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - %s
  - %s
scrape_configs:
  - job_name: gpuwarden-agent
    static_configs:
      - targets: [%s]
  - job_name: gpuwarden-server
    authorization:
      type: Bearer
      credentials_file: %s
    static_configs:
      - targets: [%s]
`, rules("rules.yaml"), rules("dcgm-compat.rules.yaml"), strings.Join(targets, ", "), viewer, serverAddr)
	prom := peertest.StartPrometheus(t, config)

	// Three scrapes of every target, and the fleet server seeing both boxes.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready := len(query(t, prom.URL, `count_over_time(up[1m]) >= 3 and up == 1`)) == 3 &&
			len(query(t, prom.URL, `gpuwarden_fleet_node_info`)) == 2 &&
			len(query(t, prom.URL, `gpuwarden_gpu_xid_errors_total`)) > 0
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus did not get three scrapes of every target in 30 s: up = %v\nserver log:\n%s", query(t, prom.URL, "up"), server.text())
		}
		time.Sleep(500 * time.Millisecond)
	}

	vars := strings.NewReplacer("$instance", targets[0], "${instance}", targets[0],
		"$__range", "1m", "$__rate_interval", "10s", "$__interval", "1s")
	for file, d := range loadDashboards(t) {
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				expr := vars.Replace(tg.Expr)
				if got := query(t, prom.URL, expr); len(got) == 0 {
					t.Errorf("%s: panel %q (%s): no data for %s", file, p.Title, tg.RefID, expr)
				}
			}
		}
	}
	// The agent's --label values reach gpuwarden_node_info: who pays.
	if got := query(t, prom.URL, `gpuwarden_node_info{node!="", owner="ana", project="vision", provider="aws", region="eu-west-1", instance_type="p5.48xlarge", instance="`+targets[0]+`"}`); len(got) != 1 {
		t.Errorf("gpuwarden_node_info of box-a does not carry its labels: %s", query(t, prom.URL, "gpuwarden_node_info"))
	}
	checkRulesHealthy(t, prom.URL)
	for _, name := range []string{"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"} {
		deadline := time.Now().Add(10 * time.Second)
		for len(query(t, prom.URL, name+`{Hostname!=""}`)) == 0 {
			if time.Now().After(deadline) {
				t.Errorf("recording rule %s recorded nothing", name)
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// query runs an instant query and returns its series (or the scalar).
func query(t *testing.T, base, expr string) []json.RawMessage {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("query %s: %v: %s", expr, err, body)
	}
	if r.Status != "success" {
		t.Fatalf("query %s: %s", expr, r.Error)
	}
	if r.Data.ResultType == "scalar" {
		return []json.RawMessage{r.Data.Result}
	}
	var series []json.RawMessage
	if err := json.Unmarshal(r.Data.Result, &series); err != nil {
		t.Fatalf("query %s: %v", expr, err)
	}
	return series
}

// buildGPUWarden builds the binary once per test into dir.
func buildGPUWarden(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "gpuwarden")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/gpuwarden").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func runOK(t *testing.T, dir, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("gpuwarden %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out))
}

func writeSecret(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// logged is a gpuwarden process whose output the test reads.
type logged struct {
	mu   sync.Mutex
	log  []string
	more chan struct{}
}

func startLogged(t *testing.T, dir, bin string, args ...string) *logged {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		t.Fatal(err)
	}
	l := &logged{more: make(chan struct{}, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer r.Close()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			l.mu.Lock()
			l.log = append(l.log, sc.Text())
			l.mu.Unlock()
			select {
			case l.more <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		<-done
	})
	return l
}

func (l *logged) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.log, "\n")
}

// wait blocks until a line contains s, or fails after within.
func (l *logged) wait(t *testing.T, s string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		l.mu.Lock()
		found := slices.ContainsFunc(l.log, func(line string) bool { return strings.Contains(line, s) })
		l.mu.Unlock()
		if found {
			return
		}
		select {
		case <-l.more:
		case <-deadline:
			t.Fatalf("no %q within %s:\n%s", s, within, l.text())
		}
	}
}

// checkRulesHealthy waits for every rule of the loaded files to have been
// evaluated on the live series and fails on one that errs (a many-to-many
// join, a bad label_replace), which promtool's fixed inputs may not show.
func checkRulesHealthy(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(base + "/api/v1/rules")
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Data struct {
				Groups []struct {
					Name  string `json:"name"`
					Rules []struct {
						Name           string `json:"name"`
						Health         string `json:"health"`
						LastError      string `json:"lastError"`
						LastEvaluation string `json:"lastEvaluation"`
					} `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		pending, n := 0, 0
		var bad []string
		for _, g := range r.Data.Groups {
			for _, rule := range g.Rules {
				n++
				switch {
				case rule.Health == "unknown" || strings.HasPrefix(rule.LastEvaluation, "0001-"):
					pending++
				case rule.Health != "ok":
					bad = append(bad, fmt.Sprintf("%s/%s: %s", g.Name, rule.Name, rule.LastError))
				}
			}
		}
		if len(bad) > 0 {
			t.Fatalf("rules failing on live series:\n%s", strings.Join(bad, "\n"))
		}
		if n == 0 {
			t.Fatal("Prometheus loaded no rules")
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rules not evaluated within 15 s", pending, n)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
