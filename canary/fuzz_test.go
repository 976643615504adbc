package canary

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// fuzzMessage is the one shape every ReadLock error has: the file name, a
// position and a single line of text.
var fuzzMessage = regexp.MustCompile(`^fuzz\.lock:[1-9][0-9]*:[1-9][0-9]*: [^\n\r]+$`)

// FuzzReadLock feeds ReadLock arbitrary bytes: it must never panic or hang,
// every error must be an EInvalid *gpuwarden.Error in the NAME:LINE:COL form
// with a hint, and every lock it accepts must be valid and survive a write
// and a second read unchanged.
func FuzzReadLock(f *testing.F) {
	golden, err := os.ReadFile(filepath.Join("testdata", "lock.golden"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(golden)
	for _, doc := range []string{
		"", "version: 1\nfields: {}\n", "{version: 1, fields: {a: {value: x, match: exact}}}",
		"version: 1\nfields:\n  a: &r {value: \"1\", match: exact}\n  b: *r\n",
		"version: 1\nfields:\n  \"q\\u00e9\\U0001F600\": {value: \"\\x41\\t\", match: ignore}\n",
		"version: 1\ncreated: 2026-11-29T10:00:00.5+02:00\nhost: |\n  multi\n  line\nfields: {}\n",
		"version: 1\nfields:\n  ? a\n  : {value: \"1\", match: exact}\n",
		"version: 1\nfields: {<<: {a: 1}}\n",
		// The hostile locks that made canary run out of memory, at full
		// size; testdata/fuzz/FuzzReadLock keeps small ones.
		strings.Repeat("[", 100_000), strings.Repeat("[", 20_000),
		"version: 1\nfields:\n  a: " + strings.Repeat("{value: ", 20_000),
	} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The fuzzer has no per-input time limit, and a parser stuck in a
		// loop only shows as a stalled exec count; failing here records
		// the input in testdata/fuzz instead.
		done := make(chan string, 1)
		go func() { done <- checkReadLock(data) }()
		select {
		case msg := <-done:
			if msg != "" {
				t.Fatal(msg)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no answer within 5s on %q", data)
		}
	})
}

// checkReadLock reads data and says what is wrong with the outcome, or "".
func checkReadLock(data []byte) string {
	l, err := ReadLock("fuzz.lock", data)
	if err != nil {
		var e *gpuwarden.Error
		switch {
		case !errors.As(err, &e):
			return fmt.Sprintf("error is %T, not *gpuwarden.Error: %v", err, err)
		case e.Code != gpuwarden.EInvalid:
			return fmt.Sprintf("Code = %q, want invalid: %s", e.Code, e.Message)
		case !fuzzMessage.MatchString(e.Message):
			return fmt.Sprintf("Message not in NAME:LINE:COL: form: %q", e.Message)
		case e.Hint == "":
			return fmt.Sprintf("no hint for %q", e.Message)
		}
		return ""
	}
	if l == nil || l.Version != LockVersion || l.Fields == nil {
		return fmt.Sprintf("accepted an incomplete lock: %+v", l)
	}
	var b bytes.Buffer
	if err := WriteLock(&b, l); err != nil {
		return fmt.Sprintf("cannot write an accepted lock: %v", err)
	}
	again, err := ReadLock("fuzz.lock", b.Bytes())
	if err != nil {
		return fmt.Sprintf("cannot read back a written lock: %v\n%s", err, b.String())
	}
	if !again.Created.Equal(l.Created) {
		return fmt.Sprintf("created %v read back as %v", l.Created, again.Created)
	}
	again.Created = l.Created
	if !reflect.DeepEqual(again, l) {
		return fmt.Sprintf("lock changed on a round trip:\n%+v\n%+v\n%s", l, again, b.String())
	}
	return ""
}
