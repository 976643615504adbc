package gpuwarden

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The one definition of a name gpuwarden gives a committed checkpoint:
// a sequence number of six or more digits, a dash, then the job's folder name
// (a letter or digit, then up to 127 letters, digits, dots, dashes and
// underscores). The checkpoint root, the store's retention and the restore
// all read names through it, because a name travels: it becomes a directory
// on the next box, a path in GPUWARDEN_RESUME_FROM and, through {resume}, a
// word in the job's shell script. A store is shared and its contents are
// not ours to trust, so a name outside this form (000009-x$(touch${IFS}x),
// best, a folder with a space) was not written by gpuwarden and is never
// pulled, resumed or deleted. The sequence's value stays below 10^18, inside
// an int64, however many leading zeros it has; a job would need 10^18
// commits to run out.
const (
	// MaxCheckpointSeq is the highest sequence number a committed name carries.
	MaxCheckpointSeq = 999_999_999_999_999_999
	// MaxCheckpointFolder is the longest job folder name a committed name carries.
	MaxCheckpointFolder = 128
)

var (
	checkpointFolderRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	committedNameRE    = regexp.MustCompile(`^([0-9]{6,})-([A-Za-z0-9][A-Za-z0-9._-]{0,127})$`)
)

// CheckCheckpointFolder accepts a job's checkpoint folder name that can be
// committed: only such names reach a store, a shell or another box. The
// error says what the name may hold, with a hint.
func CheckCheckpointFolder(folder string) error {
	if checkpointFolderRE.MatchString(folder) {
		return nil
	}
	return Errorf(EInvalid, "checkpoint folder name %q: only letters, digits, dots, dashes and underscores, starting with a letter or digit, at most %d characters", folder, MaxCheckpointFolder).
		WithHint("name checkpoint folders like step-000120: the name reaches the job's command line and other boxes, so gpuwarden commits no other")
}

// ParseCheckpointName splits a committed checkpoint's name into its
// sequence number and the job's folder name; ok is false for any name
// gpuwarden does not write.
func ParseCheckpointName(name string) (seq int64, folder string, ok bool) {
	m := committedNameRE.FindStringSubmatch(name)
	if m == nil {
		return 0, "", false
	}
	digits := strings.TrimLeft(m[1], "0")
	if digits == "" {
		return 0, m[2], true
	}
	if len(digits) > 18 {
		return 0, "", false
	}
	seq, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, "", false
	}
	return seq, m[2], true
}

// CommittedCheckpointName is the name a commit gives the job's folder with
// sequence number seq ("000007-step-000140"). A folder name that a commit
// would carry into a shell or a store unchecked is refused with a hint.
func CommittedCheckpointName(seq int64, folder string) (string, error) {
	if err := CheckCheckpointFolder(folder); err != nil {
		return "", err
	}
	if seq < 0 || seq > MaxCheckpointSeq {
		return "", Errorf(EInvalid, "checkpoint sequence %d is outside 0..%d", seq, int64(MaxCheckpointSeq)).
			WithHint("move the old committed checkpoints aside to start numbering again")
	}
	return fmt.Sprintf("%06d-%s", seq, folder), nil
}
