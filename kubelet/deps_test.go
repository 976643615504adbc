package kubelet

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinaryLinksNoGRPC keeps grpc-go and the kubelet's generated proto
// out of the binary (issue #19: they cost the agent 2–3 MB of RSS); the
// tests may still import them, to run a real kubelet server.
func TestBinaryLinksNoGRPC(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH")
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/gpuwarden/gpuwarden/cmd/gpuwarden").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for pkg := range strings.FieldsSeq(string(out)) {
		if strings.HasPrefix(pkg, "google.golang.org/grpc") || strings.HasPrefix(pkg, "k8s.io/") {
			t.Errorf("cmd/gpuwarden links %s", pkg)
		}
	}
}
