package gpuwarden

import (
	"strings"
	"testing"
	"time"
)

func TestParseCheckpointName(t *testing.T) {
	for _, tt := range []struct {
		name   string
		seq    int64
		folder string
		ok     bool
	}{
		{"000007-step-000140", 7, "step-000140", true},
		{"000000-x", 0, "x", true},
		{"1234567-epoch_3.5", 1234567, "epoch_3.5", true},
		{"00000000000000000000000000123-job", 123, "job", true},
		{"999999999999999999-job", MaxCheckpointSeq, "job", true},
		{"000001-" + strings.Repeat("a", 128), 1, strings.Repeat("a", 128), true},
		{"1000000000000000000-job", 0, "", false},
		{"000001-" + strings.Repeat("a", 129), 0, "", false},
		{"000009-x$(touch${IFS}PWNED)", 0, "", false},
		{"000009-has space", 0, "", false},
		{"000009-quote'd", 0, "", false},
		{"000009-.hidden", 0, "", false},
		{"000009--dash", 0, "", false},
		{"000009-a/b", 0, "", false},
		{"000009-", 0, "", false},
		{"12345-short", 0, "", false},
		{"best", 0, "", false},
		{".trash-000001-a", 0, "", false},
		{"", 0, "", false},
	} {
		seq, folder, ok := ParseCheckpointName(tt.name)
		if seq != tt.seq || folder != tt.folder || ok != tt.ok {
			t.Errorf("ParseCheckpointName(%q) = %d, %q, %v; want %d, %q, %v", tt.name, seq, folder, ok, tt.seq, tt.folder, tt.ok)
		}
	}
}

func TestCommittedCheckpointName(t *testing.T) {
	for _, tt := range []struct {
		seq    int64
		folder string
		want   string // "" for a refusal
	}{
		{7, "step-000140", "000007-step-000140"},
		{1234567, "latest", "1234567-latest"},
		{1, "x$(touch${IFS}PWNED)", ""},
		{1, "my ckpt", ""},
		{1, ".hidden", ""},
		{-1, "step-1", ""},
		{MaxCheckpointSeq + 1, "step-1", ""},
	} {
		got, err := CommittedCheckpointName(tt.seq, tt.folder)
		if tt.want == "" {
			if ErrorCodeOf(err) != EInvalid || ErrorHint(err) == "" {
				t.Errorf("CommittedCheckpointName(%d, %q) = %q, %v; want invalid with a hint", tt.seq, tt.folder, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("CommittedCheckpointName(%d, %q) = %q, %v; want %q", tt.seq, tt.folder, got, err, tt.want)
		}
		// What a commit names, the restore reads back.
		if seq, folder, ok := ParseCheckpointName(got); !ok || seq != tt.seq || folder != tt.folder {
			t.Errorf("ParseCheckpointName(%q) = %d, %q, %v", got, seq, folder, ok)
		}
	}
}

func TestDescribeSyncSaysWhatWasRestored(t *testing.T) {
	skip := []RestoreSkip{{Checkpoint: "000003-step-000060", Reason: "its manifest lists no files"}}
	for _, tt := range []struct {
		name string
		st   SyncReport
		want string
	}{
		{"restored", SyncReport{Restored: "000002-step-000040"}, "; restored 000002-step-000040 from the store at the start"},
		{"restored after skipping", SyncReport{Restored: "000002-step-000040", RestoreSkipped: skip},
			"; restored 000002-step-000040 from the store at the start, 1 stored skipped (000003-step-000060: its manifest lists no files)"},
		{"nothing restored", SyncReport{RestoreSkipped: skip},
			"; restored nothing from the store: 1 stored checkpoints skipped (000003-step-000060: its manifest lists no files)"},
		{"no restore", SyncReport{}, "; no checkpoint is durable"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := DescribeSync(&tt.st, time.Time{}); !strings.HasSuffix(got, tt.want) {
				t.Errorf("DescribeSync = %q, want it to end %q", got, tt.want)
			}
		})
	}
}
