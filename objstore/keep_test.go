package objstore

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

func TestSequenceOf(t *testing.T) {
	for _, tt := range []struct {
		name string
		seq  string
		ok   bool
	}{
		{"000007-step-000140", "7", true},
		{"000000-x", "0", true},
		{"1234567-job", "1234567", true},
		{"00000000000000000000000000123-job", "123", true},
		{"12345-short", "", false},
		{"000007-", "", false},
		{"000007_step", "", false},
		{"step-000140", "", false},
		{"final", "", false},
		{"", "", false},
		// The job's folder name is gpuwarden's strict form, or the name is not gpuwarden's.
		{"000009-x$(touch${IFS}PWNED)", "", false},
		{"000009-has space", "", false},
		{"000009-.hidden", "", false},
		{"000009-" + strings.Repeat("a", 129), "", false},
		{"9999999999999999999-too-large", "", false},
	} {
		seq, ok := sequenceOf(tt.name)
		if seq != tt.seq || ok != tt.ok {
			t.Errorf("sequenceOf(%q) = %q, %v; want %q, %v", tt.name, seq, ok, tt.seq, tt.ok)
		}
	}
}

// scriptedStore is a CheckpointStore whose List and Delete fail on demand
// and which records what was deleted.
type scriptedStore struct {
	names     []string
	listErr   error
	deleteErr map[string]error
	deleted   []string
}

// Push accepts anything; Keep never pushes.
func (s *scriptedStore) Push(context.Context, gpuwarden.Checkpoint) error { return nil }

// List returns the scripted names, or the scripted failure.
func (s *scriptedStore) List(context.Context) ([]gpuwarden.Checkpoint, error) {
	if s.listErr != nil {
		return nil, s.listErr
	}
	var cps []gpuwarden.Checkpoint
	for _, n := range s.names {
		cps = append(cps, gpuwarden.Checkpoint{Name: n})
	}
	return cps, nil
}

// Pull holds nothing; Keep never pulls.
func (s *scriptedStore) Pull(context.Context, string, string) (gpuwarden.Checkpoint, error) {
	return gpuwarden.Checkpoint{}, errors.New("not here")
}

// Delete records name, or fails as scripted for it.
func (s *scriptedStore) Delete(_ context.Context, name string) error {
	if err := s.deleteErr[name]; err != nil {
		return err
	}
	s.deleted = append(s.deleted, name)
	return nil
}

// Where names the fake for error messages.
func (s *scriptedStore) Where() string { return "scripted" }

func TestKeepFailures(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("connection reset")
	five := []string{"000005-e", "000001-a", "000003-c", "000002-b", "000004-d"}
	for _, tt := range []struct {
		name        string
		store       *scriptedStore
		wantDeleted []string
		wantErr     bool
	}{
		{"list fails: nothing is deleted",
			&scriptedStore{names: five, listErr: boom}, nil, true},
		{"a delete fails: the pass stops there",
			&scriptedStore{names: five, deleteErr: map[string]error{"000002-b": boom}}, []string{"000001-a"}, true},
		{"ties in the sequence break by name",
			&scriptedStore{names: []string{"000001-b", "000001-a", "000002-a"}}, []string{"000001-a"}, false},
		{"names gpuwarden does not write are never deleted",
			&scriptedStore{names: []string{"000001-a", "000009-x$(touch${IFS}PWNED)", "000002-b", "best", "000003-c"}}, []string{"000001-a"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			deleted, err := Keep(ctx, tt.store, 2, "")
			if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, boom)) {
				t.Fatalf("Keep error = %v, want error %v", err, tt.wantErr)
			}
			if len(deleted) != len(tt.wantDeleted) || (len(deleted) > 0 && !reflect.DeepEqual(deleted, tt.wantDeleted)) {
				t.Errorf("Keep returned %v deleted, want %v", deleted, tt.wantDeleted)
			}
			if len(tt.store.deleted) != len(tt.wantDeleted) || (len(tt.wantDeleted) > 0 && !reflect.DeepEqual(tt.store.deleted, tt.wantDeleted)) {
				t.Errorf("store saw deletes of %v, want %v", tt.store.deleted, tt.wantDeleted)
			}
		})
	}
}
