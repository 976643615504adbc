// Package kubelet reads the kubelet's pod-resources API (gRPC over a unix
// socket, service v1.PodResourcesLister) to say which Kubernetes
// containers hold which GPUs, as dcgm-exporter does. It is the project's
// one door to gRPC and to the kubelet's published proto.
package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuwarden/gpuwarden"
)

// DefaultSocket is where the kubelet serves the pod-resources API; a
// DaemonSet reaches it through a hostPath mount of its directory.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// ErrNoSocket is wrapped by Attribution when there is no socket at the
// path: not on Kubernetes, or the directory is not mounted. It is no
// fault; every other error is.
var ErrNoSocket = errors.New("no kubelet pod-resources socket")

// Bounds of one List call: the kubelet's own client allows 16 MiB
// answers (podresources.DefaultMaxMsgSize), and a kubelet that does not
// answer within the timeout is reported, not waited on.
const (
	maxMessageBytes = 16 << 20
	defaultTimeout  = 10 * time.Second
)

// Attribution lists the pod resources on socket and returns, for each GPU
// device ID the kubelet allocated, the containers holding it. Device IDs
// are what the NVIDIA device plugin advertises: NVML's UUIDs ("GPU-…",
// "MIG-…") by default, NVML indexes ("0") with deviceIDStrategy=index;
// time-slicing's replica suffix ("GPU-…::1") is dropped, so a shared GPU
// lists every container that shares it. Without a deadline on ctx the call
// is bounded by ten seconds.
func Attribution(ctx context.Context, socket string) (map[string][]gpuwarden.PodRef, error) {
	fi, err := os.Stat(socket)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("kubelet pod resources: %s: %w", socket, ErrNoSocket)
	}
	if err != nil {
		return nil, fmt.Errorf("kubelet pod resources: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return nil, fmt.Errorf("kubelet pod resources: %s is not a socket", socket)
	}
	abs, err := filepath.Abs(socket)
	if err != nil {
		return nil, fmt.Errorf("kubelet pod resources: %w", err)
	}
	conn, err := grpc.NewClient("unix://"+abs, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes)))
	if err != nil {
		return nil, fmt.Errorf("kubelet pod resources: %w", err)
	}
	defer conn.Close()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultTimeout)
		defer cancel()
	}
	resp, err := podresources.NewPodResourcesListerClient(conn).List(ctx, &podresources.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("kubelet pod resources: list on %s: %w", socket, err)
	}
	return attribute(resp), nil
}

// gpuResource says whether a resource name is one the NVIDIA device
// plugin advertises GPUs under: whole GPUs, time-sliced GPUs renamed to
// .shared, and MIG devices under the mixed strategy (nvidia.com/mig-1g.10gb).
func gpuResource(name string) bool {
	return name == "nvidia.com/gpu" || name == "nvidia.com/gpu.shared" || strings.HasPrefix(name, "nvidia.com/mig-")
}

// attribute folds a List answer into device ID → containers, each list
// sorted and without repeats.
func attribute(resp *podresources.ListPodResourcesResponse) map[string][]gpuwarden.PodRef {
	out := map[string][]gpuwarden.PodRef{}
	for _, pod := range resp.GetPodResources() {
		for _, c := range pod.GetContainers() {
			ref := gpuwarden.PodRef{Namespace: pod.GetNamespace(), Pod: pod.GetName(), Container: c.GetName()}
			for _, dev := range c.GetDevices() {
				if !gpuResource(dev.GetResourceName()) {
					continue
				}
				for _, id := range dev.GetDeviceIds() {
					id, _, _ = strings.Cut(id, "::")
					if id = strings.TrimSpace(id); id == "" || slices.Contains(out[id], ref) {
						continue
					}
					out[id] = append(out[id], ref)
				}
			}
		}
	}
	for _, refs := range out {
		slices.SortFunc(refs, func(a, b gpuwarden.PodRef) int {
			return strings.Compare(a.Namespace+"\x00"+a.Pod+"\x00"+a.Container, b.Namespace+"\x00"+b.Pod+"\x00"+b.Container)
		})
	}
	return out
}
