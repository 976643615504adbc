package ledgertest

import (
	"cmp"
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// SavingsStore is a savings ledger that can be closed: the agent's ledger
// or the fleet server's.
type SavingsStore interface {
	gpuwarden.SavingsLedger
	Close() error
}

// SavingsOpener opens a new, empty store for one test and a reopen func
// that opens the same store again; the suite closes what it is given.
type SavingsOpener func(t *testing.T) (s SavingsStore, reopen func() SavingsStore)

// RunSavings runs the savings ledger's conformance suite against the
// stores open makes: SQLite's and PostgreSQL's, agent and fleet.
func RunSavings(t *testing.T, open SavingsOpener) {
	tests := []struct {
		name string
		fn   func(*testing.T, SavingsStore, func() SavingsStore)
	}{
		{"RoundTripAcrossReopen", testSavingsRoundTrip},
		{"UpsertByID", testSavingsUpsert},
		{"QueryFollowsMatch", testSavingsQuery},
		{"InvalidEventStoresNothing", testSavingsInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, reopen := open(t)
			cur := s
			t.Cleanup(func() { _ = cur.Close() })
			tt.fn(t, s, func() SavingsStore {
				if err := cur.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				cur = reopen()
				return cur
			})
		})
	}
}

// savingsDay is a day of November 2026 at an hour, UTC.
func savingsDay(day, hour, minute int) time.Time {
	return time.Date(2026, 11, day, hour, minute, 0, 0, time.UTC)
}

// SavingsFixture is a month of events of every kind and basis, with a
// negative amount, a not-saved event, an empty period and a second
// currency: what the stores must keep exactly.
func SavingsFixture() []gpuwarden.Saving {
	at := savingsDay(30, 23, 0)
	ev := func(id string, kind gpuwarden.SavingKind, node, project, owner string, from, to time.Time, hours float64,
		rate gpuwarden.Micros, amount gpuwarden.Cents, cur gpuwarden.Currency, basis gpuwarden.SavingBasis, notSaved string) gpuwarden.Saving {
		return gpuwarden.Saving{ID: id, Kind: kind, Node: node, Project: project, Owner: owner, From: from, To: to, Hours: hours,
			Rate: rate, RateSource: "box rate " + rate.String(), Amount: amount, Currency: cur, Basis: basis,
			Evidence: "fixture " + id, NotSaved: notSaved, At: at}
	}
	return []gpuwarden.Saving{
		ev("idle-a", gpuwarden.SavingIdleStop, "gpu-a", "ml", "ana", savingsDay(3, 18, 0), savingsDay(4, 8, 30), 14.5, 3_280_000, 4756, "USD", gpuwarden.SavingConfirmed, ""),
		ev("idle-b", gpuwarden.SavingIdleStop, "gpu-b", "ml", "bo", savingsDay(10, 19, 0), savingsDay(12, 9, 0), 0, 3_400_000, 0, "USD", gpuwarden.SavingConfirmed, "provider kept billing: powered-off-still-billing"),
		ev("budget-c", gpuwarden.SavingBudgetStop, "gpu-c", "nlp", "cy", savingsDay(24, 14, 15), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), 153.75, 32_500_000, 499688, "USD", gpuwarden.SavingConfirmed, ""),
		ev("spot-s", gpuwarden.SavingSpot, "gpu-s", "nlp", "cy", savingsDay(18, 0, 0), savingsDay(18, 20, 0), 20, 22_940_000, -1229, "USD", gpuwarden.SavingConfirmed, ""),
		ev("orphan-d", gpuwarden.SavingOrphanEnded, "gpu-d", "", "", savingsDay(27, 10, 0), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), 86, 2_100_000, 18060, "USD", gpuwarden.SavingAttributed, ""),
		ev("right-e", gpuwarden.SavingRightSize, "gpu-e", "vision", "ana", savingsDay(5, 0, 0), savingsDay(5, 0, 0), 0, 1_000_000, 0, "EUR", gpuwarden.SavingEstimated, "a rate is unknown"),
		ev("idle-a2", gpuwarden.SavingIdleStop, "gpu-a", "ml", "ana", savingsDay(13, 20, 0), savingsDay(16, 8, 0), 60.000001, 3_280_000, 19680, "USD", gpuwarden.SavingEstimated, ""),
	}
}

func sortSavings(s []gpuwarden.Saving) {
	slices.SortFunc(s, func(a, b gpuwarden.Saving) int { return cmp.Or(a.From.Compare(b.From), cmp.Compare(a.ID, b.ID)) })
}

func readSavings(t *testing.T, s gpuwarden.SavingsLedger, q gpuwarden.SavingsQuery) []gpuwarden.Saving {
	t.Helper()
	got, err := s.Savings(context.Background(), q)
	if err != nil {
		t.Fatalf("Savings(%+v): %v", q, err)
	}
	return got
}

func equalSavings(t *testing.T, what string, got, want []gpuwarden.Saving) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func testSavingsRoundTrip(t *testing.T, s SavingsStore, reopen func() SavingsStore) {
	ctx := context.Background()
	want := SavingsFixture()
	if err := s.RecordSavings(ctx, want); err != nil {
		t.Fatal(err)
	}
	sortSavings(want)
	equalSavings(t, "read back", readSavings(t, s, gpuwarden.SavingsQuery{}), want)
	s = reopen()
	got := readSavings(t, s, gpuwarden.SavingsQuery{})
	equalSavings(t, "after reopen", got, want)
	// The money survives to the cent: the sums of what was written and of
	// what was read are the same.
	if g, w := gpuwarden.SumSavingsByCurrency(got), gpuwarden.SumSavingsByCurrency(want); !reflect.DeepEqual(g, w) {
		t.Errorf("totals read back %+v, written %+v", g, w)
	}
}

func testSavingsUpsert(t *testing.T, s SavingsStore, reopen func() SavingsStore) {
	ctx := context.Background()
	first := SavingsFixture()[0]
	if err := s.RecordSavings(ctx, []gpuwarden.Saving{first, first}); err != nil {
		t.Fatal(err)
	}
	// Re-priced once the box started again: same ID, shorter period.
	again := first
	again.To, again.Hours, again.Amount = savingsDay(4, 6, 0), 12, 3936
	again.Evidence += "; next start " + again.To.Format(time.RFC3339)
	again.At = first.At.Add(time.Hour)
	if err := s.RecordSavings(ctx, []gpuwarden.Saving{again}); err != nil {
		t.Fatal(err)
	}
	s = reopen()
	equalSavings(t, "after upsert", readSavings(t, s, gpuwarden.SavingsQuery{}), []gpuwarden.Saving{again})
}

func testSavingsQuery(t *testing.T, s SavingsStore, _ func() SavingsStore) {
	all := SavingsFixture()
	// Recorded a minute apart, for the shipper's query.
	for i := range all {
		all[i].At = all[i].At.Add(time.Duration(i) * time.Minute)
	}
	if err := s.RecordSavings(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	dec := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	queries := []struct {
		name string
		q    gpuwarden.SavingsQuery
	}{
		{"everything", gpuwarden.SavingsQuery{}},
		{"the month", gpuwarden.SavingsQuery{From: savingsDay(1, 0, 0), To: dec}},
		{"December", gpuwarden.SavingsQuery{From: dec, To: dec.AddDate(0, 1, 0)}},
		{"all projects", gpuwarden.SavingsQuery{Project: gpuwarden.AllProjects}},
		{"project ml", gpuwarden.SavingsQuery{Project: "ml"}},
		{"owner cy", gpuwarden.SavingsQuery{Owner: "cy"}},
		{"node gpu-a", gpuwarden.SavingsQuery{Node: "gpu-a"}},
		{"kind spot", gpuwarden.SavingsQuery{Kind: gpuwarden.SavingSpot}},
		{"window ending where idle-a starts", gpuwarden.SavingsQuery{From: savingsDay(1, 0, 0), To: savingsDay(3, 18, 0)}},
		{"window starting where idle-a ends", gpuwarden.SavingsQuery{From: savingsDay(4, 8, 30), To: savingsDay(5, 0, 0)}},
		{"empty period inside", gpuwarden.SavingsQuery{From: savingsDay(5, 0, 0), To: savingsDay(5, 1, 0)}},
		{"empty period at the end", gpuwarden.SavingsQuery{From: savingsDay(4, 0, 0), To: savingsDay(5, 0, 0)}},
		{"one minute inside budget-c", gpuwarden.SavingsQuery{From: savingsDay(30, 23, 59), To: dec}},
		{"from only", gpuwarden.SavingsQuery{From: savingsDay(20, 0, 0)}},
		{"to only", gpuwarden.SavingsQuery{To: savingsDay(11, 0, 0)}},
		{"project and kind", gpuwarden.SavingsQuery{Project: "nlp", Kind: gpuwarden.SavingBudgetStop}},
		{"recorded after the third", gpuwarden.SavingsQuery{RecordedAfter: all[2].At}},
		{"recorded after the last", gpuwarden.SavingsQuery{RecordedAfter: all[len(all)-1].At}},
		{"node, recorded after the first", gpuwarden.SavingsQuery{Node: "gpu-a", RecordedAfter: all[0].At}},
	}
	for _, tt := range queries {
		t.Run(tt.name, func(t *testing.T) {
			var want []gpuwarden.Saving
			for _, e := range all {
				if tt.q.Match(e) {
					want = append(want, e)
				}
			}
			sortSavings(want)
			equalSavings(t, "Savings", readSavings(t, s, tt.q), want)
		})
	}
}

func testSavingsInvalid(t *testing.T, s SavingsStore, _ func() SavingsStore) {
	events := SavingsFixture()
	events[3].Evidence = ""
	err := s.RecordSavings(context.Background(), events)
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
		t.Fatalf("RecordSavings with an event without evidence = %v, want EInvalid", err)
	}
	if got := readSavings(t, s, gpuwarden.SavingsQuery{}); len(got) != 0 {
		t.Errorf("a refused batch stored %d events", len(got))
	}
}
