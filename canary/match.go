package canary

import (
	"strings"

	"github.com/gpuwarden/gpuwarden"
)

// fixedRules are the facts whose rule is not exact; the table in doc.go
// says why for each.
var fixedRules = map[string]gpuwarden.Match{
	"driver.version":      gpuwarden.MatchMajor,
	"cuda.driver_version": gpuwarden.MatchAtLeast,
	"cudnn.version":       gpuwarden.MatchMajor,
	"nccl.version":        gpuwarden.MatchMajor,
	"os.kernel":           gpuwarden.MatchIgnore,
	"container.name":      gpuwarden.MatchIgnore,
}

// DefaultMatch is the rule NewLock gives a fact: exact unless the fact is
// known to vary harmlessly between good boxes (see the table in the package
// documentation). Unknown facts are exact, so a new probe's facts are
// checked until someone relaxes them.
func DefaultMatch(field string) gpuwarden.Match {
	if m, ok := fixedRules[field]; ok {
		return m
	}
	// python.P.version, where P may itself hold dots ("python3.12"); the
	// framework keys end in .F.version and stay exact.
	if rest, ok := strings.CutPrefix(field, "python."); ok && strings.HasSuffix(rest, ".version") {
		for _, fw := range frameworks {
			if strings.HasSuffix(rest, "."+fw+".version") {
				return gpuwarden.MatchExact
			}
		}
		return gpuwarden.MatchMajor
	}
	return gpuwarden.MatchExact
}
