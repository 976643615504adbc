package preempt_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/preempt"
	"github.com/gpuwarden/gpuwarden/preempt/preempttest"
)

func TestDetect(t *testing.T) {
	aws := preempttest.NewAWS()
	t.Cleanup(aws.Close)
	gcp := preempttest.NewGCP()
	t.Cleanup(gcp.Close)
	azure := preempttest.NewAzure()
	t.Cleanup(azure.Close)
	// notCloud answers everything with 200 and an empty JSON object, like an
	// unrelated web server would.
	notCloud := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("{}"))
	}))
	t.Cleanup(notCloud.Close)
	// hang never answers, like a black-holed link-local address.
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	t.Cleanup(hang.Close)
	// gcpBusy answers with an error status but the flavor header: still GCP.
	gcpBusy := preempttest.NewGCP()
	t.Cleanup(gcpBusy.Close)
	gcpBusy.Respond("/computeMetadata/v1/instance/preempted", http.StatusServiceUnavailable, "")
	off := preempttest.Unreachable()

	tests := []struct {
		name string
		ep   preempt.Endpoints
		want string // provider, or "" for ErrNoCloud
		max  time.Duration
	}{
		{"aws alone", preempt.Endpoints{AWS: aws.URL, GCP: off, Azure: off}, "aws", 500 * time.Millisecond},
		{"gcp alone", preempt.Endpoints{AWS: off, GCP: gcp.URL, Azure: off}, "gcp", 500 * time.Millisecond},
		{"azure alone", preempt.Endpoints{AWS: off, GCP: off, Azure: azure.URL}, "azure", 500 * time.Millisecond},
		{"all three: aws first", preempt.Endpoints{AWS: aws.URL, GCP: gcp.URL, Azure: azure.URL}, "aws", 500 * time.Millisecond},
		{"gcp answering 503", preempt.Endpoints{AWS: off, GCP: gcpBusy.URL, Azure: off}, "gcp", 500 * time.Millisecond},
		{"gcp and azure: gcp first", preempt.Endpoints{AWS: off, GCP: gcp.URL, Azure: azure.URL}, "gcp", 500 * time.Millisecond},
		// AWS and Azure share an address; each probe must ask for its own path.
		{"azure fake at the aws address", preempt.Endpoints{AWS: azure.URL, GCP: off, Azure: azure.URL}, "azure", 500 * time.Millisecond},
		{"aws fake at the azure address", preempt.Endpoints{AWS: aws.URL, GCP: off, Azure: aws.URL}, "aws", 500 * time.Millisecond},
		{"nothing listens", preempt.Endpoints{AWS: off, GCP: off, Azure: off}, "", 200 * time.Millisecond},
		{"something else answers", preempt.Endpoints{AWS: notCloud.URL, GCP: notCloud.URL, Azure: notCloud.URL}, "", 200 * time.Millisecond},
		// A preferred probe that hangs costs at most DetectTimeout.
		{"aws hangs, azure answers", preempt.Endpoints{AWS: hang.URL, GCP: off, Azure: azure.URL}, "azure", preempt.DetectTimeout + 500*time.Millisecond},
		{"everything hangs", preempt.Endpoints{AWS: hang.URL, GCP: hang.URL, Azure: hang.URL}, "", preempt.DetectTimeout + 500*time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			src, err := preempt.Detect(context.Background(), nil, tt.ep)
			elapsed := time.Since(start)
			t.Logf("%s in %v", tt.name, elapsed)
			if elapsed > tt.max {
				t.Errorf("Detect took %v, want under %v", elapsed, tt.max)
			}
			if tt.want == "" {
				if !errors.Is(err, preempt.ErrNoCloud) || src != nil {
					t.Fatalf("got %v, %v; want nil, ErrNoCloud", src, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Detect: %v", err)
			}
			if got := src.Provider(); got != tt.want {
				t.Errorf("provider = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestDetectedSourcePolls(t *testing.T) {
	f := preempttest.NewAWS()
	defer f.Close()
	off := preempttest.Unreachable()
	src, err := preempt.Detect(testCtx(t), nil, preempt.Endpoints{AWS: f.URL, GCP: off, Azure: off})
	if err != nil {
		t.Fatal(err)
	}
	f.Interrupt("terminate", time.Now().Add(2*time.Minute))
	got, err := src.Poll(testCtx(t))
	if err != nil || len(got) != 1 {
		t.Fatalf("Poll = %+v, %v; want the spot notice", got, err)
	}
	if n := f.TokenRequests(); n != 1 {
		t.Errorf("token PUTs = %d, want 1: the probe's token is reused", n)
	}
}

func TestDetectCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	off := preempttest.Unreachable()
	_, err := preempt.Detect(ctx, nil, preempt.Endpoints{AWS: off, GCP: off, Azure: off})
	if err == nil {
		t.Fatal("Detect on a canceled context succeeded")
	}
}

func TestForProvider(t *testing.T) {
	ep := preempt.DefaultEndpoints()
	for _, name := range []string{"aws", "gcp", "azure", "AWS"} {
		src, err := preempt.ForProvider(name, nil, ep)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got, want := src.Provider(), map[string]string{"AWS": "aws"}[name]; got != name && got != want {
			t.Errorf("ForProvider(%q).Provider() = %q", name, got)
		}
	}
	if src, err := preempt.ForProvider("none", nil, ep); src != nil || !errors.Is(err, preempt.ErrNoCloud) {
		t.Errorf("none: got %v, %v; want nil, ErrNoCloud", src, err)
	}
	_, err := preempt.ForProvider("oracle", nil, ep)
	if code := gpuwarden.ErrorCodeOf(err); code != gpuwarden.EInvalid {
		t.Errorf("unknown cloud: code %q (%v), want invalid", code, err)
	}
}

func TestDefaultEndpoints(t *testing.T) {
	got := preempt.DefaultEndpoints()
	want := preempt.Endpoints{AWS: "http://169.254.169.254", GCP: "http://metadata.google.internal", Azure: "http://169.254.169.254"}
	if got != want {
		t.Errorf("DefaultEndpoints() = %+v, want %+v", got, want)
	}
}
