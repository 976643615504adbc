// Package peertest starts the real outside software the end-to-end tests
// drive — AWS's amazon-ec2-metadata-mock, a MinIO server and Debian's
// python3-torch — on loopback, each owned by one test. scripts/install-peers.sh
// installs them; a test whose peer is missing skips, unless
// GPUWARDEN_PEER_TESTS=1 (set by .ci/run) says CI must run it, when it fails.
package peertest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RequireEnv, set to 1, turns a missing peer from a skip into a failure.
const RequireEnv = "GPUWARDEN_PEER_TESTS"

// CacheEnv names the folder scripts/install-peers.sh installs into.
const CacheEnv = "GPUWARDEN_PEERS_CACHE"

// missing skips the test, or fails it where CI requires the peer.
func missing(t testing.TB, what, why string) {
	t.Helper()
	msg := fmt.Sprintf("%s not available (%s): run scripts/install-peers.sh", what, why)
	if os.Getenv(RequireEnv) == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Binary finds a peer's executable on PATH or in the install cache.
func Binary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	dir := os.Getenv(CacheEnv)
	if dir == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", err
			}
			base = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(base, "gpuwarden-peers")
	}
	p := filepath.Join(dir, "bin", name)
	if info, err := os.Stat(p); err != nil || info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is neither on PATH nor in %s", name, filepath.Dir(p))
	}
	return p, nil
}

// FreePort returns a loopback port nobody listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Process is a peer started by a test; the test's cleanup stops it.
type Process struct {
	cmd *exec.Cmd
	out *bytes.Buffer
	// Log is what the peer printed so far, for failure messages.
	Log func() string
}

func start(t testing.TB, dir, bin string, env []string, args ...string) *Process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out := &bytes.Buffer{}
	w := &lockedWriter{b: out}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	p := &Process{cmd: cmd, out: out, Log: w.String}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	return p
}

// Kill stops the peer at once, as a crashed server would stop.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}

// waitHTTP polls url until ready says yes or within passes.
func waitHTTP(t testing.TB, p *Process, within time.Duration, ready func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if ready() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("peer not ready within %s:\n%s", within, p.Log())
}

// AEMM is a running amazon-ec2-metadata-mock in IMDSv2-only mode.
type AEMM struct {
	*Process
	// URL is the base URL to give gpuwarden's --aws-metadata.
	URL string
}

// StartAEMM runs ec2-metadata-mock with args (a subcommand and its flags,
// e.g. "spot", "-t", time) on a free loopback port, IMDSv2 only, and waits
// until it hands out tokens. It runs in its own HOME, so that no
// aemm-config.json of the machine's changes what it serves.
func StartAEMM(t testing.TB, args ...string) *AEMM {
	t.Helper()
	bin, err := Binary("ec2-metadata-mock")
	if err != nil {
		missing(t, "amazon-ec2-metadata-mock", err.Error())
	}
	port := FreePort(t)
	home := t.TempDir()
	all := append([]string{"--hostname", "127.0.0.1", "--port", strconv.Itoa(port), "--imdsv2"}, args...)
	p := start(t, home, bin, []string{"HOME=" + home}, all...)
	a := &AEMM{Process: p, URL: "http://127.0.0.1:" + strconv.Itoa(port)}
	waitHTTP(t, p, 20*time.Second, func() bool { _, err := a.Token(); return err == nil })
	return a
}

// Token gets an IMDSv2 session token, as a client on the instance would.
func (a *AEMM) Token() (string, error) {
	req, _ := http.NewRequest(http.MethodPut, a.URL+"/latest/api/token", nil)
	req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "60")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(res.Body)
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("token: status %d", res.StatusCode)
	}
	return strings.TrimSpace(b.String()), nil
}

// MinIO is a running MinIO server with one access key.
type MinIO struct {
	*Process
	// Endpoint is host:port, for --s3-endpoint.
	Endpoint string
	// AccessKey and SecretKey are the root credentials.
	AccessKey, SecretKey string
	// Data is the server's storage folder, where tests can damage objects.
	Data string

	bin  string
	args []string
	env  []string
	t    testing.TB
}

// StartMinIO runs a MinIO server on a free loopback port over a fresh
// folder and waits until it is live.
func StartMinIO(t testing.TB) *MinIO {
	t.Helper()
	bin, err := Binary("minio")
	if err != nil {
		missing(t, "MinIO", err.Error())
	}
	m := &MinIO{AccessKey: "gpuwarden", SecretKey: "gpuwarden-secret", Data: t.TempDir(), bin: bin, t: t}
	port, console := FreePort(t), FreePort(t)
	m.Endpoint = "127.0.0.1:" + strconv.Itoa(port)
	m.args = []string{"server", m.Data, "--quiet", "--address", m.Endpoint, "--console-address", "127.0.0.1:" + strconv.Itoa(console)}
	m.env = []string{
		"MINIO_ROOT_USER=" + m.AccessKey, "MINIO_ROOT_PASSWORD=" + m.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=1",
		"HOME=" + t.TempDir(),
	}
	m.Start()
	return m
}

// Start starts the server again after Kill, over the same data.
func (m *MinIO) Start() {
	m.t.Helper()
	m.Process = start(m.t, m.Data, m.bin, m.env, m.args...)
	waitHTTP(m.t, m.Process, 60*time.Second, func() bool {
		res, err := http.Get("http://" + m.Endpoint + "/minio/health/live")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
}

// Env is the environment gpuwarden's S3 client reads its credentials from.
func (m *MinIO) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + m.AccessKey, "AWS_SECRET_ACCESS_KEY=" + m.SecretKey, "AWS_REGION=us-east-1"}
}

// Python returns Debian's /usr/bin/python3 once it imports torch.
func Python(t testing.TB) string {
	t.Helper()
	const py = "/usr/bin/python3"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, py, "-c", "import torch").CombinedOutput(); err != nil {
		missing(t, "Debian's python3-torch", fmt.Sprintf("%v: %s", err, bytes.TrimSpace(out)))
	}
	return py
}

// lockedWriter collects a peer's output from its two streams.
type lockedWriter struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

// Write appends to the buffer.
func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// String returns everything written so far.
func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
