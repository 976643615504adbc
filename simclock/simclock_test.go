package simclock

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestClockSteps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clock")
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	if err := Set(path, t0); err != nil {
		t.Fatal(err)
	}
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ticks := c.Ticks(ctx, time.Millisecond)
	tests := []struct {
		set, want time.Time
	}{
		{t0, t0},
		{t0.Add(5 * time.Minute), t0.Add(5 * time.Minute)},
		{t0.Add(9 * 24 * time.Hour), t0.Add(9 * 24 * time.Hour)},
	}
	for _, tt := range tests {
		if err := Set(path, tt.set); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-ticks:
			if !got.Equal(tt.want) {
				t.Errorf("tick %s, want %s", got, tt.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no tick for %s", tt.set)
		}
		if err := c.Ack("gpu/a", tt.want); err != nil {
			t.Fatal(err)
		}
		if !Acked(path, "gpu/a", tt.want) || Acked(path, "gpu/a", tt.want.Add(time.Second)) {
			t.Errorf("ack of %s not read back as it was written", tt.want)
		}
	}
	// Backwards or unreadable: the clock keeps its last time.
	last := tests[len(tests)-1].want
	if err := Set(path, t0); err != nil {
		t.Fatal(err)
	}
	if got := c.Now(); !got.Equal(last) {
		t.Errorf("after a step back Now is %s, want %s", got, last)
	}
	if err := os.WriteFile(path, []byte("soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := c.Now(); !got.Equal(last) {
		t.Errorf("on a bad file Now is %s, want %s", got, last)
	}
	select {
	case got := <-ticks:
		t.Errorf("a tick at %s without a step forward", got)
	case <-time.After(20 * time.Millisecond):
	}
}

func TestOpenNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "clock")
	if err := os.WriteFile(bad, []byte("2026-11-01 00:00\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ path, want string }{
		{filepath.Join(dir, "missing"), "no such file"},
		{bad, bad + ": line 1: \"2026-11-01 00:00\" is not an RFC 3339 time"},
	}
	for _, tt := range tests {
		if _, err := Open(tt.path); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open(%s) = %v, want an error with %q", tt.path, err, tt.want)
		}
	}
}
