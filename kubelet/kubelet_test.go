package kubelet

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/kubelet/kubelettest"
)

func container(name string, devs ...*podresources.ContainerDevices) *podresources.ContainerResources {
	return &podresources.ContainerResources{Name: name, Devices: devs}
}

func devices(resource string, ids ...string) *podresources.ContainerDevices {
	return &podresources.ContainerDevices{ResourceName: resource, DeviceIds: ids}
}

// node is a node as the kubelet reports it: whole GPUs, a MIG device, a
// time-sliced GPU shared by two pods, index IDs, and resources that are
// not GPUs at all.
var node = &podresources.ListPodResourcesResponse{PodResources: []*podresources.PodResources{
	{Name: "train-0", Namespace: "ml", Containers: []*podresources.ContainerResources{
		container("trainer", devices("nvidia.com/gpu", "GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-0000-0000-0000-000000000000")),
		container("sidecar", devices("example.com/nic", "GPU-aaaaaaaa-0000-0000-0000-000000000000")),
	}},
	{Name: "notebook", Namespace: "ana", Containers: []*podresources.ContainerResources{
		container("jupyter", devices("nvidia.com/mig-1g.10gb", "MIG-cccccccc-0000-0000-0000-000000000000")),
	}},
	{Name: "infer-a", Namespace: "serve", Containers: []*podresources.ContainerResources{
		container("server", devices("nvidia.com/gpu.shared", "GPU-dddddddd-0000-0000-0000-000000000000::0")),
	}},
	{Name: "infer-b", Namespace: "serve", Containers: []*podresources.ContainerResources{
		container("server", devices("nvidia.com/gpu", "GPU-dddddddd-0000-0000-0000-000000000000::1", "GPU-dddddddd-0000-0000-0000-000000000000::2")),
	}},
	{Name: "legacy", Namespace: "default", Containers: []*podresources.ContainerResources{
		container("app", devices("nvidia.com/gpu", "3")),
		container("idle"),
	}},
	{Name: "cpu-only", Namespace: "default", Containers: []*podresources.ContainerResources{
		container("app", devices("hugepages-2Mi", "x")),
	}},
}}

func TestAttribution(t *testing.T) {
	sock := kubelettest.Serve(t, &kubelettest.Lister{Resp: node})
	got, err := Attribution(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]gpuwarden.PodRef{
		"GPU-aaaaaaaa-0000-0000-0000-000000000000": {{Namespace: "ml", Pod: "train-0", Container: "trainer"}},
		"GPU-bbbbbbbb-0000-0000-0000-000000000000": {{Namespace: "ml", Pod: "train-0", Container: "trainer"}},
		"MIG-cccccccc-0000-0000-0000-000000000000": {{Namespace: "ana", Pod: "notebook", Container: "jupyter"}},
		"GPU-dddddddd-0000-0000-0000-000000000000": {
			{Namespace: "serve", Pod: "infer-a", Container: "server"},
			{Namespace: "serve", Pod: "infer-b", Container: "server"},
		},
		"3": {{Namespace: "default", Pod: "legacy", Container: "app"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
}

func TestAttributionEmptyNode(t *testing.T) {
	got, err := Attribution(context.Background(), kubelettest.Serve(t, &kubelettest.Lister{Resp: &podresources.ListPodResourcesResponse{}}))
	if err != nil || len(got) != 0 {
		t.Errorf("got %v, %v; want nothing, no error", got, err)
	}
}

func TestAttributionFailures(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "not-a-socket")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A socket file nobody listens on: what a stopped kubelet leaves.
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()

	for _, tc := range []struct {
		name     string
		socket   func(t *testing.T) string
		timeout  time.Duration
		noSocket bool
		want     string
	}{
		{"absent", func(*testing.T) string { return filepath.Join(dir, "absent.sock") }, time.Second, true, "no kubelet pod-resources socket"},
		{"a regular file", func(*testing.T) string { return file }, time.Second, false, "is not a socket"},
		{"nobody listening", func(*testing.T) string { return stale }, 2 * time.Second, false, "list on"},
		{"the kubelet refuses", func(t *testing.T) string {
			return kubelettest.Serve(t, &kubelettest.Lister{Err: status.Error(codes.PermissionDenied, "pod resources: denied")})
		}, time.Second, false, "PermissionDenied"},
		{"the kubelet hangs", func(t *testing.T) string {
			return kubelettest.Serve(t, &kubelettest.Lister{Resp: node, Delay: time.Minute})
		}, 300 * time.Millisecond, false, "DeadlineExceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			start := time.Now()
			_, err := Attribution(ctx, tc.socket(t))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if got := errors.Is(err, ErrNoSocket); got != tc.noSocket {
				t.Errorf("errors.Is(err, ErrNoSocket) = %v, want %v", got, tc.noSocket)
			}
			if d := time.Since(start); d > tc.timeout+2*time.Second {
				t.Errorf("took %s with a %s deadline", d, tc.timeout)
			}
		})
	}
}

func TestGPUResource(t *testing.T) {
	for name, want := range map[string]bool{
		"nvidia.com/gpu": true, "nvidia.com/gpu.shared": true, "nvidia.com/mig-1g.10gb": true, "nvidia.com/mig-3g.40gb": true,
		"nvidia.com/gpus": false, "amd.com/gpu": false, "cpu": false, "": false,
	} {
		if got := gpuResource(name); got != want {
			t.Errorf("gpuResource(%q) = %v, want %v", name, got, want)
		}
	}
}

// FuzzAttribute feeds arbitrary List answers, as the wire would carry
// them, through attribute: it must not panic, and every key and ref it
// returns must come from a GPU resource of the answer.
func FuzzAttribute(f *testing.F) {
	seed, err := proto.Marshal(node)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var resp podresources.ListPodResourcesResponse
		if proto.Unmarshal(b, &resp) != nil {
			return
		}
		for id, refs := range attribute(&resp) {
			if id == "" || strings.Contains(id, "::") || len(refs) == 0 {
				t.Fatalf("key %q with %d refs", id, len(refs))
			}
		}
	})
}

// BenchmarkAttribution is one read as the agent does it every 10 s: a new
// connection to the socket, List, and the fold, on a node of 8 GPUs held
// by 8 pods beside 40 pods without GPUs.
func BenchmarkAttribution(b *testing.B) {
	resp := &podresources.ListPodResourcesResponse{}
	for i := range 48 {
		pod := &podresources.PodResources{Name: "pod-" + strconv.Itoa(i), Namespace: "ns"}
		devs := []*podresources.ContainerDevices{{ResourceName: "cpu", DeviceIds: []string{"0", "1"}}}
		if i < 8 {
			devs = append(devs, devices("nvidia.com/gpu", "GPU-"+strconv.Itoa(10000000+i)+"-0000-0000-0000-000000000000"))
		}
		pod.Containers = []*podresources.ContainerResources{container("main", devs...), container("sidecar")}
		resp.PodResources = append(resp.PodResources, pod)
	}
	sock := kubelettest.Serve(b, &kubelettest.Lister{Resp: resp})
	b.ReportAllocs()
	for b.Loop() {
		got, err := Attribution(context.Background(), sock)
		if err != nil || len(got) != 8 {
			b.Fatalf("%d GPUs, %v", len(got), err)
		}
	}
}
