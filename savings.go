package gpuwarden

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// SavingKind names what saved the money; one table, savingKinds, gives each
// its words for --help, docs/savings.md and the dashboards (like
// NoticeEffects).
type SavingKind string

// The kinds of saving the ledger records.
const (
	// SavingIdleStop is an idle box stopped by the agent.
	SavingIdleStop SavingKind = "idle-stop"
	// SavingBudgetStop is a box stopped at 100 % of its project's budget.
	SavingBudgetStop SavingKind = "budget-stop"
	// SavingSpot is a run on spot instead of on-demand, net of its rework.
	SavingSpot SavingKind = "spot"
	// SavingOrphanEnded is a box flagged as an orphan and then ended.
	SavingOrphanEnded SavingKind = "orphan-ended"
	// SavingRightSize is the box `plan` recommended run instead of an
	// oversized one.
	SavingRightSize SavingKind = "right-size"
)

// SavingBasis says how sure an amount is.
type SavingBasis string

// How sure an amount is.
const (
	// SavingConfirmed: the provider confirmed the stop, or a measured run.
	SavingConfirmed SavingBasis = "confirmed"
	// SavingEstimated: a counterfactual resting on a declared or assumed
	// figure (a stop accepted but not read back, a catalog rate).
	SavingEstimated SavingBasis = "estimated"
	// SavingAttributed: a person ended it after gpuwarden flagged it.
	SavingAttributed SavingBasis = "attributed"
)

// SavingKindInfo is one kind of saving in words: what it is, how it is
// computed and how sure it usually is.
type SavingKindInfo struct {
	Kind SavingKind `json:"kind"`
	// Title is the kind for a table row or a tile ("idle stop").
	Title string `json:"title"`
	// Summary says when the kind is recorded.
	Summary string `json:"summary"`
	// Formula is the arithmetic, in words.
	Formula string `json:"formula"`
	// Basis is the basis its events usually carry, and when they carry another.
	Basis string `json:"basis"`
}

// savingKinds is the one table of the kinds, in the order reports list them.
var savingKinds = []SavingKindInfo{
	{Kind: SavingIdleStop, Title: "idle stop",
		Summary: "the agent stopped an idle box and the provider confirmed that compute billing stopped",
		Formula: "hours from the confirmed stop to the next start or the period's end (capped at the plan's on-hours) × the compute rate the stop removed",
		Basis:   "confirmed when the provider reported a non-billing state; estimated when an OS shutdown stopped it on the provider's documented word, with no state read back; 0 (not saved) when the provider only accepted the stop, or the bill kept running"},
	{Kind: SavingBudgetStop, Title: "budget stop",
		Summary: "the agent stopped a box at 100 % of its project's budget",
		Formula: "as an idle stop; hours already counted by an idle stop of the same box are not counted again",
		Basis:   "as an idle stop"},
	{Kind: SavingSpot, Title: "spot",
		Summary: "a run on a spot box instead of on-demand, net of the rework its preemptions cost",
		Formula: "(on-demand rate − spot rate) × hours run − lost seconds ÷ 3600 × spot rate; negative is a loss",
		Basis:   "confirmed: measured by `gpuwarden run`"},
	{Kind: SavingOrphanEnded, Title: "orphan ended",
		Summary: "a box flagged in the orphan review and then ended within 7 days",
		Formula: "the box's rate × hours from its end to the period's end, capped at its TTL or 7 days",
		Basis:   "attributed: a person ended it"},
	{Kind: SavingRightSize, Title: "right-size",
		Summary: "the box `plan` recommended ran instead of one diagnosed oversized",
		Formula: "(oversized box's rate − recommended box's rate) × hours run",
		Basis:   "estimated: the oversized box's rate is the catalog's"},
}

// SavingKinds returns the table of kinds, in report order.
func SavingKinds() []SavingKindInfo { return append([]SavingKindInfo(nil), savingKinds...) }

// Info returns the kind's row; an unknown kind gets its name as the title.
func (k SavingKind) Info() SavingKindInfo {
	for _, i := range savingKinds {
		if i.Kind == k {
			return i
		}
	}
	return SavingKindInfo{Kind: k, Title: string(k)}
}

// Valid reports whether k is one of the kinds.
func (k SavingKind) Valid() bool {
	for _, i := range savingKinds {
		if i.Kind == k {
			return true
		}
	}
	return false
}

// ParseSavingKind reads a kind's name (the constant's value, or its title).
func ParseSavingKind(s string) (SavingKind, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for _, i := range savingKinds {
		if string(i.Kind) == t || i.Title == t {
			return i.Kind, nil
		}
	}
	names := make([]string, len(savingKinds))
	for n, i := range savingKinds {
		names[n] = string(i.Kind)
	}
	return "", fmt.Errorf("unknown saving kind %q (want one of %s)", s, strings.Join(names, ", "))
}

// Valid reports whether b is one of the bases.
func (b SavingBasis) Valid() bool {
	return b == SavingConfirmed || b == SavingEstimated || b == SavingAttributed
}

// Saving is one event of the savings ledger: no event without evidence.
type Saving struct {
	// ID is deterministic from kind, node and evidence (SavingID), so that
	// recording an event twice is a no-op.
	ID      string     `json:"id"`
	Kind    SavingKind `json:"kind"`
	Node    string     `json:"node"`
	Project string     `json:"project,omitempty"`
	Owner   string     `json:"owner,omitempty"`
	// From and To are the period the saving covers (half-open); overlaps
	// are never counted twice.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Hours is the quantity: the hours in [From, To) the rate applies to.
	Hours float64 `json:"hours"`
	// Rate is per hour, in Currency.
	Rate Micros `json:"rate"`
	// RateSource says where Rate came from: "box rate", "catalog offer
	// aws/p4d.24xlarge us-east-1", "provider stop semantics: …".
	RateSource string `json:"rate_source"`
	// Amount may be negative (a spot run that lost more than it saved).
	Amount   Cents       `json:"amount"`
	Currency Currency    `json:"currency"`
	Basis    SavingBasis `json:"basis"`
	// Evidence names what the event rests on: "idle episode 42; provider
	// answer: stopped (aws-stop …)".
	Evidence string `json:"evidence"`
	// NotSaved, when set, says why Amount is 0 ("provider kept billing:
	// powered-off-still-billing").
	NotSaved string `json:"not_saved,omitempty"`
	// At is when the event was recorded.
	At time.Time `json:"at"`
}

// SavingID is the deterministic ID of an event: a hash of its kind, its
// node and the key of its evidence (an idle episode's start, a run's ID),
// so that an agent that computes the same event again, or ships it twice,
// records it once.
func SavingID(kind SavingKind, node, evidenceKey string) string {
	h := sha256.Sum256([]byte(string(kind) + "\x00" + node + "\x00" + evidenceKey))
	return string(kind) + "-" + hex.EncodeToString(h[:10])
}

// Validate checks what the ledger refuses to store: an event without an ID,
// a known kind and basis, evidence, a currency or a period, or one that
// says it saved nothing yet carries an amount.
func (s Saving) Validate() error {
	switch {
	case s.ID == "":
		return Errorf(EInvalid, "saving: no id")
	case !s.Kind.Valid():
		return Errorf(EInvalid, "saving %s: unknown kind %q", s.ID, s.Kind)
	case !s.Basis.Valid():
		return Errorf(EInvalid, "saving %s: unknown basis %q", s.ID, s.Basis)
	case strings.TrimSpace(s.Evidence) == "":
		return Errorf(EInvalid, "saving %s: no evidence (no event without evidence)", s.ID)
	case s.Node == "":
		return Errorf(EInvalid, "saving %s: no node", s.ID)
	case s.Currency == "":
		return Errorf(EInvalid, "saving %s: no currency", s.ID)
	case s.From.IsZero() || s.To.Before(s.From):
		return Errorf(EInvalid, "saving %s: period %s to %s is not a period", s.ID, s.From.Format(time.RFC3339), s.To.Format(time.RFC3339))
	case s.NotSaved != "" && s.Amount != 0:
		return Errorf(EInvalid, "saving %s: not saved (%s) yet an amount of %s", s.ID, s.NotSaved, s.Amount.Decimal())
	}
	return nil
}

// SavingsTotal adds a set of events; the totals keep confirmed, estimated
// and attributed apart.
type SavingsTotal struct {
	Confirmed  Cents `json:"confirmed"`
	Estimated  Cents `json:"estimated"`
	Attributed Cents `json:"attributed"`
	// Total is Confirmed + Estimated + Attributed.
	Total Cents `json:"total"`
	// Currency is the events' currency; empty when they are in several
	// (then Mixed is true and the sums mean nothing: use
	// SumSavingsByCurrency).
	Currency Currency `json:"currency"`
	Mixed    bool     `json:"mixed,omitempty"`
	// Events counts every event added, NotSaved those that saved nothing
	// and say why.
	Events   int `json:"events"`
	NotSaved int `json:"not_saved"`
}

// Add adds one event to the total: a not-saved event counts, never its amount.
func (t *SavingsTotal) Add(s Saving) {
	if t.Events == 0 && !t.Mixed {
		t.Currency = s.Currency
	} else if s.Currency != t.Currency {
		t.Mixed, t.Currency = true, ""
	}
	t.Events++
	if s.NotSaved != "" {
		t.NotSaved++
		return
	}
	switch s.Basis {
	case SavingConfirmed:
		t.Confirmed += s.Amount
	case SavingAttributed:
		t.Attributed += s.Amount
	default:
		// An unknown basis is not allowed to pass for confirmed.
		t.Estimated += s.Amount
	}
	t.Total = t.Confirmed + t.Estimated + t.Attributed
}

// SumSavings adds a set of events (of one currency; see SavingsTotal.Mixed).
func SumSavings(events []Saving) SavingsTotal {
	var t SavingsTotal
	for _, s := range events {
		t.Add(s)
	}
	return t
}

// SumSavingsByCurrency adds events per currency, in the order the
// currencies first appear.
func SumSavingsByCurrency(events []Saving) []SavingsTotal {
	var out []SavingsTotal
	idx := map[Currency]int{}
	for _, s := range events {
		i, ok := idx[s.Currency]
		if !ok {
			i = len(out)
			idx[s.Currency] = i
			out = append(out, SavingsTotal{})
		}
		out[i].Add(s)
	}
	return out
}

// SavingsLedger is where the events live: the agent's SQLite and the fleet
// server's SQLite/PostgreSQL.
type SavingsLedger interface {
	// RecordSavings stores events, replacing one with the same ID (upsert),
	// in one transaction; an invalid event fails the whole call (EInvalid).
	RecordSavings(ctx context.Context, events []Saving) error
	// Savings returns the events that match q, ordered by From, then ID.
	Savings(ctx context.Context, q SavingsQuery) ([]Saving, error)
}

// SavingsQuery selects events; zero fields select everything. An event is
// selected when its period [From, To) overlaps [q.From, q.To).
type SavingsQuery struct {
	From, To time.Time
	Project  string
	Owner    string
	Node     string
	Kind     SavingKind
	// RecordedAfter keeps the events recorded (At) after it: what an
	// agent has not shipped yet.
	RecordedAfter time.Time
}

// Match reports whether s is selected by q, the one definition both
// backends' SQL follows and in-memory filters use.
func (q SavingsQuery) Match(s Saving) bool {
	switch {
	case q.Project != "" && q.Project != AllProjects && s.Project != q.Project:
		return false
	case q.Owner != "" && s.Owner != q.Owner:
		return false
	case q.Node != "" && s.Node != q.Node:
		return false
	case q.Kind != "" && s.Kind != q.Kind:
		return false
	case !q.RecordedAfter.IsZero() && !s.At.After(q.RecordedAfter):
		return false
	case !q.To.IsZero() && !s.From.Before(q.To):
		return false
	case !q.From.IsZero() && !s.To.After(q.From) && !(s.To.Equal(s.From) && !s.From.Before(q.From)):
		return false
	}
	return true
}
