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
	"google.golang.org/protobuf/encoding/protowire"
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

// numa0 is the topology the kubelet attaches to devices and memory.
var numa0 = &podresources.TopologyInfo{Nodes: []*podresources.NUMANode{{ID: 0}}}

// node is a node as the kubelet reports it: whole GPUs, a MIG device, a
// time-sliced GPU shared by two pods, index IDs, resources that are not
// GPUs at all, and the fields attribution skips (exclusive CPUs, memory,
// NUMA topology, DRA claims).
var node = &podresources.ListPodResourcesResponse{PodResources: []*podresources.PodResources{
	{Name: "train-0", Namespace: "ml", CpuIds: []int64{4, 5}, Containers: []*podresources.ContainerResources{
		{
			Name: "trainer",
			Devices: []*podresources.ContainerDevices{{
				ResourceName: "nvidia.com/gpu",
				DeviceIds:    []string{"GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-0000-0000-0000-000000000000"},
				Topology:     numa0,
			}},
			CpuIds: []int64{4, 5},
			Memory: []*podresources.ContainerMemory{{MemoryType: "hugepages-1Gi", Size: 1 << 30, Topology: numa0}},
			DynamicResources: []*podresources.DynamicResource{{ClaimName: "fast-nic", ClaimNamespace: "ml", ClaimResources: []*podresources.ClaimResource{{
				CdiDevices: []*podresources.CDIDevice{{Name: "example.com/nic=nic0"}}, DriverName: "nic.example.com", PoolName: "node-a", DeviceName: "nic0",
			}}}},
		},
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
			return kubelettest.Serve(t, &kubelettest.Lister{Err: status.Error(codes.PermissionDenied, "pod resources: denied to 100% of «agents»")})
		}, time.Second, false, "rpc error: code = PermissionDenied desc = pod resources: denied to 100% of «agents»"},
		{"the answer is over 16 MiB", func(t *testing.T) string {
			huge := &podresources.ListPodResourcesResponse{PodResources: []*podresources.PodResources{{Name: strings.Repeat("p", maxMessageBytes)}}}
			return kubelettest.Serve(t, &kubelettest.Lister{Resp: huge})
		}, 5 * time.Second, false, "received message larger than max (16777226 vs. 16777216)"},
		{"the kubelet hangs", func(t *testing.T) string {
			return kubelettest.Serve(t, &kubelettest.Lister{Resp: node, Delay: time.Minute})
		}, 300 * time.Millisecond, false, "rpc error: code = DeadlineExceeded desc = context deadline exceeded"},
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

// fromGenerated is what decodeList must make of a message the generated
// code decodes.
func fromGenerated(resp *podresources.ListPodResourcesResponse) []podResources {
	var pods []podResources
	for _, p := range resp.GetPodResources() {
		pod := podResources{name: p.GetName(), namespace: p.GetNamespace()}
		for _, c := range p.GetContainers() {
			cr := containerResources{name: c.GetName()}
			for _, d := range c.GetDevices() {
				cr.devices = append(cr.devices, containerDevices{resourceName: d.GetResourceName(), deviceIDs: d.GetDeviceIds()})
			}
			pod.containers = append(pod.containers, cr)
		}
		pods = append(pods, pod)
	}
	return pods
}

func TestDecodeList(t *testing.T) {
	wire, err := proto.Marshal(node)
	if err != nil {
		t.Fatal(err)
	}
	// A pod whose name (field 1) comes as a varint, not a string: the
	// generated code keeps it as an unknown field, and so must we.
	varintName := protowire.AppendTag(nil, 1, protowire.VarintType)
	varintName = protowire.AppendVarint(varintName, 7)
	var pod []byte
	pod = protowire.AppendTag(pod, 2, protowire.BytesType)
	pod = protowire.AppendString(pod, "ns")
	pod = append(pod, varintName...)
	mistyped := protowire.AppendTag(nil, 1, protowire.BytesType)
	mistyped = protowire.AppendBytes(mistyped, pod)

	notUTF8 := protowire.AppendTag(nil, 1, protowire.BytesType)
	notUTF8 = protowire.AppendBytes(notUTF8, protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "\xff"))

	for _, tc := range []struct {
		name    string
		wire    []byte
		want    []podResources
		wantErr string
	}{
		{"the node", wire, fromGenerated(node), ""},
		{"empty", nil, nil, ""},
		{"a known field of another wire type", mistyped, []podResources{{namespace: "ns"}}, ""},
		{"truncated", wire[:len(wire)-3], nil, "unexpected EOF"},
		{"a tag cut short", []byte{0x80}, nil, "unexpected EOF"},
		{"field number 0", []byte{0x02, 0x00}, nil, "invalid field number"},
		{"an end group without a start", []byte{0x0c}, nil, "mismatching end group marker"},
		{"a length past the end", []byte{0x0a, 0x05, 0x0a}, nil, "unexpected EOF"},
		{"a pod name not UTF-8", notUTF8, nil, "pod_resources: name: string field contains invalid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeList(tc.wire)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// FuzzDecodeList feeds arbitrary List answers, as the wire would carry
// them, through decodeList and attribute: they must not panic, whatever
// the generated code decodes decodeList must decode to the same, and every
// key and ref attribute returns must come from a GPU resource of the answer.
func FuzzDecodeList(f *testing.F) {
	for _, m := range []*podresources.ListPodResourcesResponse{node, benchNode(), {}} {
		seed, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		pods, err := decodeList(b)
		var generated podresources.ListPodResourcesResponse
		if proto.Unmarshal(b, &generated) == nil {
			if err != nil {
				t.Fatalf("decodeList: %v; the generated code decodes it", err)
			}
			if want := fromGenerated(&generated); !reflect.DeepEqual(pods, want) {
				t.Fatalf("decodeList = %+v, the generated code %+v", pods, want)
			}
		}
		for id, refs := range attribute(pods) {
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
	sock := kubelettest.Serve(b, &kubelettest.Lister{Resp: benchNode()})
	b.ReportAllocs()
	for b.Loop() {
		got, err := Attribution(context.Background(), sock)
		if err != nil || len(got) != 8 {
			b.Fatalf("%d GPUs, %v", len(got), err)
		}
	}
}

// benchNode is 8 GPUs held by 8 pods beside 40 pods without GPUs.
func benchNode() *podresources.ListPodResourcesResponse {
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
	return resp
}
