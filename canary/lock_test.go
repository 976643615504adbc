package canary

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// created is the time of the golden lock.
var created = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func TestWriteLockGolden(t *testing.T) {
	var b bytes.Buffer
	if err := WriteLock(&b, NewLock(rootFacts, "h100-a", created)); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "lock.golden")
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("WriteLock differs from %s (go test ./canary -run Golden -update):\n%s", golden, got)
	}
	l, err := ReadLock(golden, want)
	if err != nil {
		t.Fatal(err)
	}
	if l.Fields["driver.version"] != (gpuwarden.LockField{Value: "580.159.04", Match: gpuwarden.MatchMajor}) {
		t.Errorf("driver.version = %+v", l.Fields["driver.version"])
	}
}

func TestNewLock(t *testing.T) {
	at := time.Date(2026, 11, 29, 11, 0, 0, 999, time.FixedZone("CET", 3600))
	l := NewLock(gpuwarden.Facts{"os.kernel": "6.8", "gpu.model": "H200"}, "box", at)
	want := &gpuwarden.Lock{Version: 1, Created: created, Host: "box", Fields: map[string]gpuwarden.LockField{
		"os.kernel": {Value: "6.8", Match: gpuwarden.MatchIgnore},
		"gpu.model": {Value: "H200", Match: gpuwarden.MatchExact},
	}}
	if !reflect.DeepEqual(l, want) {
		t.Errorf("NewLock = %+v, want %+v", l, want)
	}
}

func TestLockRoundTrip(t *testing.T) {
	locks := map[string]*gpuwarden.Lock{
		"collected": NewLock(rootFacts, "h100-a", created),
		"empty":     {Version: 1, Fields: map[string]gpuwarden.LockField{}},
		"awkward": {Version: 1, Created: created.Add(123456789), Host: "123", Fields: map[string]gpuwarden.LockField{
			"env.NCCL_X":        {Value: "", Match: gpuwarden.MatchExact},
			"number":            {Value: "13.0", Match: gpuwarden.MatchAtLeast},
			"yes":               {Value: "no", Match: gpuwarden.MatchIgnore},
			"0x10":              {Value: "~", Match: gpuwarden.MatchExact},
			"key with: colon":   {Value: "value # not a comment", Match: gpuwarden.MatchExact},
			"quote\"back\\":     {Value: "line\nbreak\ttab\r\x00\x7f\u0085\u00a0\u2028\ufeff", Match: gpuwarden.MatchMajor},
			"ünïcode.名前":        {Value: "😀 {a: b}, [c]", Match: gpuwarden.MatchExact},
			"-dash":             {Value: "- item", Match: gpuwarden.MatchExact},
			"2026-11-29":        {Value: "2026-11-29T10:00:00Z", Match: gpuwarden.MatchExact},
			"&anchor":           {Value: "*alias", Match: gpuwarden.MatchExact},
			"gpu.model":         {Value: "H100-SXM,A100-80GB", Match: gpuwarden.MatchExact},
			"python.p.sees_gpu": {Value: "true", Match: gpuwarden.MatchExact},
		}},
	}
	for name, l := range locks {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteLock(&b, l); err != nil {
				t.Fatal(err)
			}
			got, err := ReadLock("gpuwarden.lock", b.Bytes())
			if err != nil {
				t.Fatalf("%v\n%s", err, b.String())
			}
			if !got.Created.Equal(l.Created) || got.Created.Location() != time.UTC {
				t.Errorf("created = %v, want %v in UTC", got.Created, l.Created)
			}
			got.Created = l.Created
			if !reflect.DeepEqual(got, l) {
				t.Errorf("read back %+v\nwant %+v\nfile:\n%s", got, l, b.String())
			}
		})
	}
}

func TestWriteLockRefuses(t *testing.T) {
	tests := []struct {
		name string
		lock *gpuwarden.Lock
		want string
	}{
		{"nil", nil, "write lock: no lock"},
		{"version 0", &gpuwarden.Lock{}, "write lock: version 0: only version 1 can be written"},
		{"unknown rule", &gpuwarden.Lock{Version: 1, Fields: map[string]gpuwarden.LockField{"a": {Value: "1", Match: "exactly"}}},
			`write lock: field a: unknown rule "exactly"`},
		{"no rule", &gpuwarden.Lock{Version: 1, Fields: map[string]gpuwarden.LockField{"a": {Value: "1"}}},
			`write lock: field a: unknown rule ""`},
		{"no name", &gpuwarden.Lock{Version: 1, Fields: map[string]gpuwarden.LockField{"": {Value: "1", Match: "exact"}}},
			"write lock: a field has no name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			err := WriteLock(&b, tt.lock)
			if err == nil || err.Error() != tt.want {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
			if b.Len() > 0 {
				t.Errorf("wrote %d bytes of a lock it refused", b.Len())
			}
		})
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteLockWriteError(t *testing.T) {
	if err := WriteLock(failingWriter{}, NewLock(nil, "", created)); err == nil || err.Error() != "write lock: disk full" {
		t.Errorf("err = %v", err)
	}
}

// TestReadLockAccepts reads hand-edited locks that mean the same lock.
func TestReadLockAccepts(t *testing.T) {
	want := &gpuwarden.Lock{Version: 1, Created: created, Host: "h1", Fields: map[string]gpuwarden.LockField{
		"driver.version": {Value: "580.159.04", Match: gpuwarden.MatchAtLeast},
		"gpu.model":      {Value: "H100-SXM", Match: gpuwarden.MatchExact},
	}}
	docs := map[string]string{
		"as written": "version: 1\ncreated: 2026-11-29T10:00:00Z\nhost: \"h1\"\nfields:\n" +
			"  driver.version: {value: \"580.159.04\", match: at-least}\n  gpu.model: {value: \"H100-SXM\", match: exact}\n",
		"block style, plain and single-quoted text, other zone": "# edited by hand\n---\nfields:\n  gpu.model:\n    match: exact\n" +
			"    value: H100-SXM\n  driver.version:\n    value: '580.159.04'   # pinned\n    match: \"at-least\"\n" +
			"host: h1\ncreated: \"2026-11-29T11:00:00+01:00\"\nversion: 1\n",
		"byte-order mark and CRLF": "\ufeffversion: 1\r\ncreated: 2026-11-29T10:00:00Z\r\nhost: h1\r\nfields:\r\n" +
			"  driver.version: {value: \"580.159.04\", match: at-least}\r\n  gpu.model: {value: H100-SXM, match: exact}\r\n",
		"flow everything": `{version: 1, created: 2026-11-29T10:00:00Z, host: h1, fields: {driver.version: {value: "580.159.04", match: at-least}, gpu.model: {value: "H100-SXM", match: exact}}}`,
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			got, err := ReadLock("gpuwarden.lock", []byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestReadLockHostile holds ReadLock to the nesting limits: 100,000 nested
// "[" made canary run out of memory and exit 2 as a fault, and depth 20,000
// took 680 MB. Each must be an EInvalid error at FILE:LINE:COL within a
// loose memory bound.
func TestReadLockHostile(t *testing.T) {
	const head = "version: 1\nfields:\n"
	var wide strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&wide, "  f%d: {value: \"1\", match: exact}\n", i)
	}
	tests := []struct {
		name, doc, want string
	}{
		{"depth 100000", strings.Repeat("[", 100_000), "gpuwarden.lock:1:65: lock file nests deeper than 64 levels"},
		{"depth 20000", strings.Repeat("[", 20_000), "gpuwarden.lock:1:65: lock file nests deeper than 64 levels"},
		{"depth 20000 in a fact", head + "  a: " + strings.Repeat("{value: ", 20_000),
			"gpuwarden.lock:3:502: lock file nests deeper than 64 levels"},
		{"dashes", strings.Repeat("- ", 100_000), "gpuwarden.lock:1:129: lock file nests deeper than 64 levels"},
		{"wide fields", head + wide.String(), "gpuwarden.lock:259:3: a mapping holds more than 256 keys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := ReadLock("gpuwarden.lock", []byte(tt.doc))
			runtime.ReadMemStats(&after)
			var e *gpuwarden.Error
			if !errors.As(err, &e) || e.Code != gpuwarden.EInvalid {
				t.Fatalf("err = %v, want an EInvalid *gpuwarden.Error", err)
			}
			if e.Message != tt.want {
				t.Errorf("Message = %q, want %q", e.Message, tt.want)
			}
			if e.Hint == "" {
				t.Error("no hint")
			}
			if used := after.TotalAlloc - before.TotalAlloc; used > 100<<20 {
				t.Errorf("allocated %d MB reading it, want under 100 MB", used>>20)
			}
		})
	}
}

func TestReadLockErrors(t *testing.T) {
	const head = "version: 1\ncreated: 2026-11-29T10:00:00Z\nfields:\n"
	tests := []struct {
		name, doc, msg, hint string
	}{
		{"unknown rule", head + `  gpu.model: {value: "H100-SXM", match: exactly}` + "\n",
			`gpuwarden.lock:4:41: fields.gpu.model.match: unknown rule "exactly"`, "use one of: exact, same-major, at-least, ignore"},
		{"number value", head + "  cuda.driver_version: {value: 13.0, match: at-least}\n",
			"gpuwarden.lock:4:32: fields.cuda.driver_version.value: must be text, not 13.0", `put it in quotes: "13.0"`},
		{"bool value", head + "  python.p.torch.sees_gpu: {value: true, match: exact}\n",
			"gpuwarden.lock:4:36: fields.python.p.torch.sees_gpu.value: must be text, not true", `put it in quotes: "true"`},
		{"empty value", head + "  env.X: {value: , match: exact}\n",
			"gpuwarden.lock:4:11: fields.env.X.value: must be text, not empty", `write "" for an empty value`},
		{"null value", head + "  env.X:\n    value: null\n    match: exact\n",
			"gpuwarden.lock:5:5: fields.env.X.value: must be text, not empty", `put a value such as "null" in quotes`},
		{"list value", head + "  env.X: {value: [a], match: exact}\n",
			"gpuwarden.lock:4:18: fields.env.X.value: must be text, not a list", "write the value in double quotes"},
		{"missing match", head + `  gpu.model: {value: "H100-SXM"}` + "\n",
			"gpuwarden.lock:4:3: fields.gpu.model: missing match", `write a fact as {value: "580.159.04", match: same-major}`},
		{"missing value", head + "  gpu.model: {match: exact}\n",
			"gpuwarden.lock:4:3: fields.gpu.model: missing value", "write a fact as"},
		{"empty rule", head + `  gpu.model: {value: "x", match: }` + "\n",
			"gpuwarden.lock:4:27: fields.gpu.model.match: missing rule", "use one of"},
		{"numeric rule", head + `  gpu.model: {value: "x", match: 1}` + "\n",
			"gpuwarden.lock:4:34: fields.gpu.model.match: must be a rule, not 1", "use one of"},
		{"field not a mapping", head + `  gpu.model: "H100-SXM"` + "\n",
			`gpuwarden.lock:4:14: fields.gpu.model: must be a mapping of value and match, not text "H100-SXM"`, "write a fact as"},
		{"field left empty", head + "  gpu.model:\n",
			"gpuwarden.lock:4:3: fields.gpu.model: must be a mapping of value and match, not empty", "write a fact as"},
		{"unknown key in a field", head + `  gpu.model: {value: "x", match: exact, note: "y"}` + "\n",
			"gpuwarden.lock:4:41: fields.gpu.model.note: unknown field", "a fact holds value and match"},
		{"unknown top-level key", "version: 1\nfacts: {}\nfields: {}\n",
			"gpuwarden.lock:2:1: facts: unknown field", "a lock holds version, created, host and fields"},
		{"duplicate fact", head + "  a: {value: \"1\", match: exact}\n  a: {value: \"2\", match: exact}\n",
			"gpuwarden.lock:5:3: fields.a: given twice (first at 4:3)", "each key may appear once"},
		{"duplicate top-level key", "version: 1\nversion: 1\nfields: {}\n",
			"gpuwarden.lock:2:1: version: given twice (first at 1:1)", "each key may appear once"},
		{"version 2", "version: 2\nfields: {}\n",
			"gpuwarden.lock:1:10: version: unsupported version 2", "upgrade gpuwarden"},
		{"version 0", "version: 0\nfields: {}\n",
			"gpuwarden.lock:1:10: version: unsupported version 0", "record a new lock with: gpuwarden lock"},
		{"version as text", "version: \"1\"\nfields: {}\n",
			`gpuwarden.lock:1:10: version: must be a whole number, not text "1"`, "write version: 1"},
		{"huge version", "version: 99999999999999999999\nfields: {}\n",
			"gpuwarden.lock:1:10: version: unsupported version 99999999999999999999", "upgrade gpuwarden"},
		{"missing version", "fields: {}\n",
			"gpuwarden.lock:1:1: version: missing", "version: 1"},
		{"missing fields", "version: 1\ncreated: 2026-11-29T10:00:00Z\n",
			"gpuwarden.lock:1:1: fields: missing", "fields:"},
		{"fields left empty", "version: 1\nfields:\n",
			"gpuwarden.lock:2:1: fields: must be a mapping of facts, not empty", "fields: {} checks nothing"},
		{"fields a list", "version: 1\nfields:\n  - a\n",
			"gpuwarden.lock:3:3: fields: must be a mapping of facts, not a list", "one fact per line"},
		{"bad time", "version: 1\ncreated: yesterday\nfields: {}\n",
			`gpuwarden.lock:2:10: created: must be an RFC 3339 time such as 2026-11-29T10:00:00Z, not text "yesterday"`, "UTC"},
		{"date only", "version: 1\ncreated: 2026-11-29\nfields: {}\n",
			`gpuwarden.lock:2:10: created: must be an RFC 3339 time such as 2026-11-29T10:00:00Z, not text "2026-11-29"`, "UTC"},
		{"numeric host", "version: 1\nhost: 42\nfields: {}\n",
			"gpuwarden.lock:2:7: host: must be text, not 42", `put it in quotes: "42"`},
		{"alias", "version: 1\nfields:\n  a: &r {value: \"1\", match: exact}\n  b: *r\n",
			"gpuwarden.lock:3:6: fields.a: anchors and aliases are not supported in a lock file", "write the value out"},
		{"tag", "version: !!int 1\nfields: {}\n",
			"gpuwarden.lock:1:10: version: YAML tags are not supported in a lock file", "remove the tag"},
		{"empty fact name", head + `  "": {value: "1", match: exact}` + "\n",
			`gpuwarden.lock:4:3: fields."": a fact needs a name`, "name the fact"},
		{"odd fact name in the path", head + "  \"a b\\nc\": {value: 1, match: exact}\n",
			`gpuwarden.lock:4:21: fields."a b\nc".value: must be text, not 1`, "put it in quotes"},
		{"anchored key", head + "  &k a: {value: \"1\", match: exact}\n",
			"gpuwarden.lock:4:3: fields: keys must be plain names", "write each key as a name"},
		{"list key", head + "  [a]: {value: \"1\", match: exact}\n",
			"gpuwarden.lock:4:6: syntax error: found an invalid key for this map", "fix the YAML near here"},
		{"not a mapping", "- version: 1\n",
			"gpuwarden.lock:1:1: lock file must be a mapping with version:, created:, host: and fields:, not a list", "gpuwarden lock"},
		{"empty", "", "gpuwarden.lock:1:1: lock file is empty", "record a new lock with: gpuwarden lock"},
		{"comments only", "# nothing here\n", "gpuwarden.lock:1:1: lock file is empty", "gpuwarden lock"},
		{"two documents", "version: 1\nfields: {}\n---\nversion: 1\nfields: {}\n",
			"gpuwarden.lock:3:1: lock file holds more than one YAML document", "remove the second"},
		{"syntax", head + "  gpu.model: {value: \"x\", match: exact\n",
			"gpuwarden.lock:4:14: syntax error: could not find flow mapping end token '}'", "fix the YAML near here"},
		{"tab indent", "version: 1\nfields:\n\tgpu.model: {value: \"x\", match: exact}\n",
			"gpuwarden.lock:3:1: syntax error: found character '\\t' that cannot start any token", "indent with spaces"},
		{"too large", "# " + strings.Repeat("x", MaxLockSize) + "\n",
			"gpuwarden.lock:1:1: lock file is larger than 256 KiB", "check that this is the right file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := ReadLock("gpuwarden.lock", []byte(tt.doc))
			if err == nil {
				t.Fatalf("no error; read %+v", l)
			}
			var e *gpuwarden.Error
			if !errors.As(err, &e) || e.Code != gpuwarden.EInvalid {
				t.Fatalf("err = %#v, want an EInvalid *gpuwarden.Error", err)
			}
			if e.Message != tt.msg {
				t.Errorf("message:\n got %s\nwant %s", e.Message, tt.msg)
			}
			if !strings.Contains(e.Hint, tt.hint) {
				t.Errorf("hint = %q, want it to contain %q", e.Hint, tt.hint)
			}
		})
	}
}
