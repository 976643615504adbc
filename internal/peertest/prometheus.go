package peertest

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Promtool finds Prometheus' promtool (Debian's prometheus package).
func Promtool(t testing.TB) string {
	t.Helper()
	bin, err := Binary("promtool")
	if err != nil {
		missing(t, "promtool", err.Error())
	}
	return bin
}

// Prometheus is a running Prometheus server, its data in the test's temp dir.
type Prometheus struct {
	*Process
	// URL is the base of its HTTP API, http://127.0.0.1:PORT.
	URL string
}

// StartPrometheus runs Prometheus with config (prometheus.yml's text) on a
// free loopback port and waits until it is ready to answer queries.
func StartPrometheus(t testing.TB, config string) *Prometheus {
	t.Helper()
	bin, err := Binary("prometheus")
	if err != nil {
		missing(t, "prometheus", err.Error())
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(Promtool(t), "check", "config", cfg).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s\n%s", err, out, config)
	}
	port := FreePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p := &Prometheus{URL: "http://" + addr}
	p.Process = start(t, dir, bin, nil, "--config.file="+cfg, "--web.listen-address="+addr,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--log.level=warn")
	waitHTTP(t, p.Process, 30*time.Second, func() bool {
		resp, err := http.Get(p.URL + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}
