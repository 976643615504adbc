// Package kubelet reads the kubelet's pod-resources API (gRPC over a unix
// socket, service v1.PodResourcesLister) to say which Kubernetes
// containers hold which GPUs, as dcgm-exporter does. It is the project's
// one door to the kubelet's pod-resources API: one unary call, spoken as
// gRPC over HTTP/2 on the standard library's client and decoded with
// protowire, so the agent links neither grpc-go nor the kubelet's
// generated proto (issue #19: they cost 2.9 MB of binary and 2–3 MB of
// RSS). The tests call it against a real grpc-go server of that proto.
package kubelet

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

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

// listURL names the method as gRPC does, /package.Service/Method; the
// host is only the :authority grpc-go sends for a unix socket.
const listURL = "http://localhost/v1.PodResourcesLister/List"

// emptyListRequest is an empty ListPodResourcesRequest in gRPC's framing:
// not compressed, zero bytes long.
var emptyListRequest = []byte{0, 0, 0, 0, 0}

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
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultTimeout)
		defer cancel()
	}
	pods, err := list(ctx, abs)
	if err != nil {
		return nil, fmt.Errorf("kubelet pod resources: list on %s: %w", socket, err)
	}
	return attribute(pods), nil
}

// list makes one List call on a connection of its own, as the agent reads
// every 10 s and a kept connection would outlive a restarted kubelet.
func list(ctx context.Context, socket string) ([]podResources, error) {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true) // gRPC is HTTP/2 with prior knowledge, no upgrade
	transport := &http.Transport{
		Protocols: &protocols,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		DisableCompression: true, // gRPC frames its own compression, and none is asked for
	}
	defer transport.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, listURL, bytes.NewReader(emptyListRequest))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers") // gRPC servers may refuse clients that cannot read trailers
	resp, err := transport.RoundTrip(req)
	if err != nil {
		return nil, callError(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP status %s, not a gRPC answer", resp.Status)
	}
	msg, readErr := readMessage(resp.Body)
	if readErr != nil && !errors.Is(readErr, io.EOF) {
		return nil, callError(ctx, readErr)
	}
	// The status comes last, in the trailers, once the body is read to its
	// end; an answer with no message may carry it in its headers alone.
	code, desc := resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
	if code == "" {
		code, desc = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	if err := statusError(code, desc); err != nil {
		return nil, err
	}
	if readErr != nil {
		return nil, errors.New("gRPC status OK without a message")
	}
	return decodeList(msg)
}

// readMessage reads the one length-prefixed message of a unary answer
// and checks that nothing follows it; io.EOF means there was none.
func readMessage(body io.Reader) ([]byte, error) {
	var prefix [5]byte
	if _, err := io.ReadFull(body, prefix[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("gRPC message prefix: %w", err)
		}
		return nil, err
	}
	if prefix[0] != 0 {
		return nil, errors.New("compressed gRPC message, though no compression was offered")
	}
	n := binary.BigEndian.Uint32(prefix[1:])
	if n > maxMessageBytes {
		return nil, fmt.Errorf("received message larger than max (%d vs. %d)", n, maxMessageBytes)
	}
	msg := make([]byte, n)
	if _, err := io.ReadFull(body, msg); err != nil {
		return nil, fmt.Errorf("gRPC message of %d bytes: %w", n, noEOF(err))
	}
	switch _, err := io.ReadFull(body, prefix[:1]); {
	case err == nil:
		return nil, errors.New("more than one message in a unary gRPC answer")
	case !errors.Is(err, io.EOF):
		return nil, err
	}
	return msg, nil
}

// noEOF says that an end of the body inside a message is a truncation,
// not the end of the answer readMessage's io.EOF means.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// codeNames are gRPC's status codes by number, as grpc-go writes them.
var codeNames = [...]string{
	"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
	"AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
	"Aborted", "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss",
	"Unauthenticated",
}

func codeName(code uint64) string {
	if code < uint64(len(codeNames)) {
		return codeNames[code]
	}
	return "Code(" + strconv.FormatUint(code, 10) + ")"
}

// statusError turns the grpc-status and grpc-message of an answer into nil
// for OK and otherwise an error worded as grpc-go words it, so the agent's
// warnings read as they did when it linked grpc-go.
func statusError(code, desc string) error {
	if code == "" {
		return errors.New("gRPC answer without a grpc-status")
	}
	n, err := strconv.ParseUint(code, 10, 32)
	if err != nil {
		return fmt.Errorf("gRPC answer with grpc-status %q", code)
	}
	if n == 0 {
		return nil
	}
	// grpc-message is percent-encoded; a malformed one is shown as sent.
	if decoded, err := url.PathUnescape(desc); err == nil {
		desc = decoded
	}
	return fmt.Errorf("rpc error: code = %s desc = %s", codeName(n), desc)
}

// callError words a failed exchange as grpc-go did when it came from ctx
// (the tests and the agent's logs look for DeadlineExceeded), keeping
// ctx's error for errors.Is.
func callError(ctx context.Context, err error) error {
	switch ctxErr := ctx.Err(); {
	case errors.Is(ctxErr, context.DeadlineExceeded):
		return fmt.Errorf("rpc error: code = DeadlineExceeded desc = %w", ctxErr)
	case ctxErr != nil:
		return fmt.Errorf("rpc error: code = Canceled desc = %w", ctxErr)
	}
	return err
}

// gpuResource says whether a resource name is one the NVIDIA device
// plugin advertises GPUs under: whole GPUs, time-sliced GPUs renamed to
// .shared, and MIG devices under the mixed strategy (nvidia.com/mig-1g.10gb).
func gpuResource(name string) bool {
	return name == "nvidia.com/gpu" || name == "nvidia.com/gpu.shared" || strings.HasPrefix(name, "nvidia.com/mig-")
}

// attribute folds a List answer into device ID → containers, each list
// sorted and without repeats.
func attribute(pods []podResources) map[string][]gpuwarden.PodRef {
	out := map[string][]gpuwarden.PodRef{}
	for _, pod := range pods {
		for _, c := range pod.containers {
			ref := gpuwarden.PodRef{Namespace: pod.namespace, Pod: pod.name, Container: c.name}
			for _, dev := range c.devices {
				if !gpuResource(dev.resourceName) {
					continue
				}
				for _, id := range dev.deviceIDs {
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
