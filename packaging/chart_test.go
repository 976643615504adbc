package packaging

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startRegistry builds gwpack and starts its in-memory OCI registry
// (go-containerregistry's pkg/registry) on a free loopback port; the
// registry ends when the test closes its standard input.
func startRegistry(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gwpack")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./gwpack") // package.sh's flags: its cache
	build.Dir = filepath.Join(repoRoot(t), "packaging", "tools")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build gwpack: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "registry", "-addr", "127.0.0.1:0")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		t.Fatalf("gwpack registry said %q (%v), want `listening on ADDR`", line, err)
	}
	return addr
}

// TestChartRoundTrip pushes the packaged chart to a throwaway OCI registry
// on loopback with helm, pulls it back (the same bytes), and renders it from
// the registry with helm template: the DaemonSet and the Deployment run the
// release's image.
func TestChartRoundTrip(t *testing.T) {
	r := packaged(t)
	helm := helmPath()
	if helm == "" {
		if peersFatal {
			t.Fatal("no helm (scripts/install-peers.sh builds it); GPUWARDEN_PEER_TESTS=1 requires it")
		}
		t.Skip("no helm (scripts/install-peers.sh builds it)")
	}
	chart := filepath.Join(r.dir, "gpuwarden-"+testVersion+".tgz")
	addr := startRegistry(t)
	home := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, helm, args...)
		// Nothing of the user's helm set-up is read or written.
		cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
			"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_DATA_HOME="+filepath.Join(home, "data"),
			"HELM_REGISTRY_CONFIG="+filepath.Join(home, "registry.json"))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		return stdout.String() + stderr.String()
	}
	ref := "oci://" + addr + "/charts"
	out := run("push", chart, ref, "--plain-http")
	if !strings.Contains(out, "Digest: sha256:") {
		t.Errorf("helm push printed no digest:\n%s", out)
	}

	pulled := t.TempDir()
	run("pull", ref+"/gpuwarden", "--version", testVersion, "--plain-http", "-d", pulled)
	got, err := os.ReadFile(filepath.Join(pulled, "gpuwarden-"+testVersion+".tgz"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(chart)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the chart pulled back differs from dist's (%d bytes, want %d)", len(got), len(want))
	}

	manifests := run("template", "gw", ref+"/gpuwarden", "--version", testVersion, "--plain-http", "--namespace", "gpuwarden")
	for _, want := range []string{"kind: DaemonSet", "kind: Deployment", "image: ghcr.io/gpuwarden/gpuwarden:" + testVersion} {
		if !strings.Contains(manifests, want) {
			t.Errorf("helm template from the registry has no %q", want)
		}
	}
}
