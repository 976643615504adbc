// Package kubelettest runs a real gRPC server of the kubelet's published
// pod-resources proto on a unix socket, for the tests of kubelet/ and of
// the agent that reads it.
package kubelettest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Lister is a PodResourcesLister server answering List with Resp or Err,
// after Delay.
type Lister struct {
	podresources.UnimplementedPodResourcesListerServer
	Resp  *podresources.ListPodResourcesResponse
	Err   error
	Delay time.Duration
}

// List answers as the kubelet would, or waits out Delay first.
func (l *Lister) List(ctx context.Context, _ *podresources.ListPodResourcesRequest) (*podresources.ListPodResourcesResponse, error) {
	select {
	case <-time.After(l.Delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return l.Resp, l.Err
}

// Serve runs l on a unix socket in a fresh short directory (a socket path
// must fit in 108 bytes) until the test ends, and returns the socket's path.
func Serve(t testing.TB, l *Lister) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "kubelet.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresources.RegisterPodResourcesListerServer(srv, l)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return sock
}
