package http

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// smallDisk mounts a tmpfs of size bytes for the test, so that it can be
// filled for real; it skips where mounting is not allowed.
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s): the full-disk test needs root", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fill writes zeros into dir until the disk is full, returning the filler.
func fill(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 64<<10)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return p
		}
	}
}

// TestFullDiskIsUnavailableNotInternal: with the ledger's disk full every
// write answers 503 unavailable with Retry-After, /readyz fails while
// /healthz stays up, and once space is back the same batch is stored whole.
func TestFullDiskIsUnavailableNotInternal(t *testing.T) {
	disk := smallDisk(t, "4m")
	f := newFleetFixtureAt(t, disk, func(s *FleetServer) { s.RatePerSec = 0 })
	agent := f.token("ml", gpuwarden.RoleAgent)
	f.register(agent, node("box-1", "ana"))

	now := f.clock()
	batch := gpuwarden.FleetBatch{}
	for i := range 600 {
		batch.Minutes = append(batch.Minutes, gpuwarden.NodeMinute{Minute: now.Add(-time.Duration(600-i) * time.Minute).Truncate(time.Minute),
			Samples: 60, CPUPercent: 10, GPUUtil: []float64{50}, GPUMemPercent: []float64{20}})
	}
	filler := fill(t, disk)

	code, body, h := f.call("POST", "/api/v1/nodes/box-1/batch", agent, batch)
	var e errorBody
	_ = json.Unmarshal(body, &e)
	if code != 503 || e.Code != string(gpuwarden.EUnavailable) || h.Get("Retry-After") == "" {
		t.Errorf("batch on a full disk: %d %s (Retry-After %q), want 503 unavailable with Retry-After", code, body, h.Get("Retry-After"))
	}
	if code, body, _ := f.call("GET", "/readyz", "", nil); code != 503 {
		t.Errorf("/readyz on a full disk: %d %s, want 503", code, body)
	}
	if code, body, _ := f.call("GET", "/healthz", "", nil); code != 200 {
		t.Errorf("/healthz on a full disk: %d %s, want 200: liveness is not the database", code, body)
	}
	// Reads still answer.
	if code, body, _ := f.call("GET", "/api/v1/nodes", agent, nil); code != 200 {
		t.Errorf("reads on a full disk: %d %s", code, body)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := f.call("GET", "/readyz", "", nil); code != 200 {
		t.Errorf("/readyz with space back: %d %s, want 200", code, body)
	}
	code, body, _ = f.call("POST", "/api/v1/nodes/box-1/batch", agent, batch)
	var res gpuwarden.BatchResult
	if err := json.Unmarshal(body, &res); err != nil || code != 200 || res.Minutes != 600 || res.Duplicates != 0 {
		t.Errorf("the same batch with space back: %d %s, want all 600 minutes stored, none lost or doubled", code, body)
	}
	hours, err := f.store.Hours(context.Background(), "ml", now.Add(-24*time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	minutes := 0
	for _, h := range hours {
		minutes += h.Minutes
	}
	if minutes != 600 {
		t.Errorf("the ledger holds %d minutes, want 600", minutes)
	}
}
