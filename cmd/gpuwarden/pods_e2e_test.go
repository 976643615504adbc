package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/kubelet/kubelettest"
)

// serveKubelet runs a real gRPC pod-resources server whose device plugin
// names GPUs by index (the simulation's UUIDs are not known before it
// starts): GPU 1 is held by ml/train-0's trainer.
func serveKubelet(t *testing.T) string {
	t.Helper()
	return kubelettest.Serve(t, &kubelettest.Lister{Resp: &podresources.ListPodResourcesResponse{PodResources: []*podresources.PodResources{{
		Name: "train-0", Namespace: "ml", Containers: []*podresources.ContainerResources{{
			Name:    "trainer",
			Devices: []*podresources.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"1"}}},
		}},
	}}}})
}

// TestUpLabelsGPUsWithPods: the real agent reads the kubelet's
// pod-resources socket and reports, in /api/v1/status, the container
// that holds GPU 1 and none on GPU 0.
func TestUpLabelsGPUsWithPods(t *testing.T) {
	dir := t.TempDir()
	p := startUp(t, dir, "--simulate", "2xH100", "--dry-run", "--kubelet-socket", serveKubelet(t))
	url := p.url(t)
	want := []gpuwarden.PodRef{{Namespace: "ml", Pod: "train-0", Container: "trainer"}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st gpuwarden.AgentStatus
		if err := json.Unmarshal([]byte(get(t, url+"api/v1/status")), &st); err != nil {
			t.Fatal(err)
		}
		if len(st.GPUs) == 2 && reflect.DeepEqual(st.GPUs[1].Pods, want) {
			if st.GPUs[0].Pods != nil {
				t.Errorf("GPU 0 pods %v, want none", st.GPUs[0].Pods)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GPU pods never reported: %+v\n%s", st.GPUs, p.text())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if strings.Contains(p.text(), "read pod attribution") {
		t.Errorf("a warning about the kubelet that answered:\n%s", p.text())
	}
}

// TestUpWithoutKubelet: no socket is no fault, said once at debug level;
// a path that is no socket is a warning.
func TestUpWithoutKubelet(t *testing.T) {
	dir := t.TempDir()
	p := startUp(t, dir, "--simulate", "1xH100", "--dry-run", "--log-level", "debug",
		"--kubelet-socket", filepath.Join(dir, "absent.sock"))
	p.wait(t, `level=DEBUG msg="no pod attribution"`, 10*time.Second)
	if strings.Contains(p.text(), `level=WARN msg="read pod attribution"`) {
		t.Errorf("an absent kubelet warned:\n%s", p.text())
	}

	notSocket := filepath.Join(dir, "file.sock")
	if err := os.WriteFile(notSocket, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dir2 := t.TempDir()
	q := startUp(t, dir2, "--simulate", "1xH100", "--dry-run", "--kubelet-socket", notSocket)
	q.wait(t, `level=WARN msg="read pod attribution" .*err=".*is not a socket"`, 10*time.Second)
}
