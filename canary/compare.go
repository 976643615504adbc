package canary

import (
	"maps"
	"slices"

	"github.com/gpuwarden/gpuwarden"
)

// Skipped is a locked field that was not compared on this box, and why
// ("no GPU on this box (--cpu-ok)"). It is reported rather than dropped,
// because a check that leaves out what the lock pins has not shown that the
// box matches the lock.
type Skipped struct {
	Field string `json:"field"`
	Why   string `json:"why"`
}

// Comparison is a lock checked against one box's facts. Every locked field
// lands in exactly one of Compared, Ignored and Skipped, so that a verdict
// can say what it rests on: "13 fields match" is only true when 13 fields
// were compared.
type Comparison struct {
	// Compared are the fields checked against this box, sorted.
	Compared []string `json:"compared"`
	// Ignored are the fields whose rule is ignore: recorded for diagnosis,
	// never checked, by the lock author's choice.
	Ignored []string `json:"ignored"`
	// Skipped are the fields this box could not be judged on, sorted.
	Skipped []Skipped `json:"skipped"`
	// Drift are the compared fields that do not hold here.
	Drift []gpuwarden.Drift `json:"drift"`
}

// Complete reports whether every field the lock checks was compared; a
// passing but incomplete comparison is a partial pass, not a match.
func (c Comparison) Complete() bool { return len(c.Skipped) == 0 }

// Compare checks now against l. skip says why a field cannot be judged on
// this box, or "" to compare it; nil compares every field. A field whose
// rule is ignore is Ignored whatever skip says, since it is never checked.
// The slices are never nil, so that JSON shows [] rather than null.
func Compare(l *gpuwarden.Lock, now gpuwarden.Facts, skip func(field string) string) Comparison {
	c := Comparison{Compared: []string{}, Ignored: []string{}, Skipped: []Skipped{}, Drift: []gpuwarden.Drift{}}
	if l == nil {
		return c
	}
	compared := map[string]bool{}
	for _, k := range slices.Sorted(maps.Keys(l.Fields)) {
		switch {
		case l.Fields[k].Match == gpuwarden.MatchIgnore:
			c.Ignored = append(c.Ignored, k)
		case skip != nil && skip(k) != "":
			c.Skipped = append(c.Skipped, Skipped{Field: k, Why: skip(k)})
		default:
			c.Compared = append(c.Compared, k)
			compared[k] = true
		}
	}
	for _, d := range l.Diff(now) {
		if compared[d.Field] {
			c.Drift = append(c.Drift, d)
		}
	}
	return c
}
