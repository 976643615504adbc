package catalog

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

func TestLoad(t *testing.T) {
	snap, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	aws := filepath.Join("testdata", "skypilot", "aws", "vms.csv")
	own := filepath.Join("testdata", "own", "prices.csv")
	tests := []struct {
		name         string
		files        []string
		withEmbedded bool
		wantOffers   int
		wantWarnings []string // prefixes
	}{
		{"snapshot only", nil, true, snap.Offers.Len(), nil},
		{"files only", []string{aws, own}, false, 10 + 4, []string{aws + ": ", aws + ": ", aws + ": ", aws + ": ", own + ": ", own + ": ", own + ": "}},
		{"both", []string{own}, true, snap.Offers.Len() + 4, []string{own + ": ", own + ": ", own + ": "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.files, tt.withEmbedded)
			if err != nil {
				t.Fatal(err)
			}
			if c.Offers.Len() != tt.wantOffers {
				t.Errorf("got %d offers, want %d", c.Offers.Len(), tt.wantOffers)
			}
			if len(c.Warnings) != len(tt.wantWarnings) {
				t.Fatalf("got warnings %q, want %d", c.Warnings, len(tt.wantWarnings))
			}
			for i, w := range c.Warnings {
				if !strings.HasPrefix(w, tt.wantWarnings[i]) {
					t.Errorf("warning %q does not start with %q", w, tt.wantWarnings[i])
				}
			}
			// Egress, storage and GPUs come from the snapshot either way.
			if len(c.Egress) != len(snap.Egress) || len(c.Storage) != len(snap.Storage) || len(c.GPUs) != len(snap.GPUs) {
				t.Errorf("side tables: %d egress, %d storage, %d GPUs", len(c.Egress), len(c.Storage), len(c.GPUs))
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "aws.csv")
	if err := os.WriteFile(bad, []byte("instance_name,location,price,cpu,memory,gpu_count,gpu_name,gpu_memory,spot\np5,us-east-1,x,1,1,8,H100,80,False\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "nope.csv")
	tests := []struct {
		name     string
		files    []string
		wantCode gpuwarden.ErrorCode
		wantMsg  string
	}{
		{"missing file", []string{missing}, gpuwarden.ENotFound, "read catalog: open " + missing + ": no such file or directory"},
		{"bad file", []string{bad}, gpuwarden.EInvalid, bad + `:2:3: column price: "x" is not a number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.files, true)
			if c != nil {
				t.Error("got a catalog with the error")
			}
			if got := gpuwarden.ErrorCodeOf(err); got != tt.wantCode {
				t.Errorf("code %q, want %q", got, tt.wantCode)
			}
			if err == nil || err.Error() != tt.wantMsg {
				t.Errorf("error %v, want %s", err, tt.wantMsg)
			}
		})
	}
	_, err := Load([]string{missing}, false)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %v does not wrap fs.ErrNotExist", err)
	}
}
