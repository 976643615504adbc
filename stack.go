package gpuwarden

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Facts is a host's stack as flat, dotted keys ("driver.version",
// "gpu.model", "python.python3.torch.version") with string values. Flat keys
// make the lock file diff line by line and let any probe add a fact without
// a schema change.
type Facts map[string]string

// Match says how strictly a locked fact must hold on another box.
type Match string

// The match rules a lock may give a field.
const (
	// MatchExact needs the same value.
	MatchExact Match = "exact"
	// MatchMajor needs the same major version (the part before the first dot).
	MatchMajor Match = "same-major"
	// MatchAtLeast needs a version no older than the locked one.
	MatchAtLeast Match = "at-least"
	// MatchIgnore records the value without checking it.
	MatchIgnore Match = "ignore"
)

// Matches lists the rules in the order help texts show them.
var Matches = []Match{MatchExact, MatchMajor, MatchAtLeast, MatchIgnore}

// Valid reports whether m is one of Matches.
func (m Match) Valid() bool {
	for _, v := range Matches {
		if v == m {
			return true
		}
	}
	return false
}

// Holds reports whether the value now satisfies the locked value under m.
func (m Match) Holds(locked, now string) bool {
	switch m {
	case MatchIgnore:
		return true
	case MatchMajor:
		return major(locked) == major(now)
	case MatchAtLeast:
		return CompareVersions(now, locked) >= 0
	}
	return locked == now
}

func major(v string) string {
	m, _, _ := strings.Cut(v, ".")
	return m
}

// CompareVersions orders dotted versions numerically part by part ("12.10" >
// "12.9"); a part that is not a number compares as text. It returns -1, 0, 1.
func CompareVersions(a, b string) int {
	pa, pb := strings.FieldsFunc(a, isVersionSep), strings.FieldsFunc(b, isVersionSep)
	for i := 0; i < max(len(pa), len(pb)); i++ {
		var x, y string
		if i < len(pa) {
			x = pa[i]
		}
		if i < len(pb) {
			y = pb[i]
		}
		nx, ex := strconv.ParseUint(x, 10, 64)
		ny, ey := strconv.ParseUint(y, 10, 64)
		switch {
		case ex == nil && ey == nil:
			if nx != ny {
				if nx < ny {
					return -1
				}
				return 1
			}
		case x != y:
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

func isVersionSep(r rune) bool { return r == '.' || r == '-' || r == '+' }

// LockField is one locked fact and how strictly it must hold.
type LockField struct {
	Value string `yaml:"value" json:"value"`
	Match Match  `yaml:"match" json:"match"`
}

// Lock is gpuwarden.lock: the stack a job was proven on.
type Lock struct {
	Version int                  `yaml:"version" json:"version"`
	Created time.Time            `yaml:"created" json:"created"`
	Host    string               `yaml:"host,omitempty" json:"host,omitempty"`
	Fields  map[string]LockField `yaml:"fields" json:"fields"`
}

// Drift is one locked fact that does not hold on this box.
type Drift struct {
	Field  string `json:"field"`
	Locked string `json:"locked"`
	// Now is "" when the fact is missing here.
	Now   string `json:"now"`
	Match Match  `json:"match"`
}

// Diff compares a box's facts with a lock, in the lock's key order.
func (l *Lock) Diff(now Facts) []Drift {
	keys := make([]string, 0, len(l.Fields))
	for k := range l.Fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []Drift
	for _, k := range keys {
		f := l.Fields[k]
		v, ok := now[k]
		if f.Match == MatchIgnore || (ok && f.Match.Holds(f.Value, v)) {
			continue
		}
		out = append(out, Drift{Field: k, Locked: f.Value, Now: v, Match: f.Match})
	}
	return out
}
