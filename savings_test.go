package gpuwarden

import (
	"testing"
	"time"
)

func TestSumSavings(t *testing.T) {
	ev := func(basis SavingBasis, amount Cents, cur Currency, notSaved string) Saving {
		return Saving{Basis: basis, Amount: amount, Currency: cur, NotSaved: notSaved}
	}
	tests := []struct {
		name   string
		events []Saving
		want   SavingsTotal
	}{
		{"none", nil, SavingsTotal{}},
		{"one of each basis", []Saving{
			ev(SavingConfirmed, 1234, "EUR", ""),
			ev(SavingEstimated, 99, "EUR", ""),
			ev(SavingAttributed, 1001, "EUR", ""),
		}, SavingsTotal{Confirmed: 1234, Estimated: 99, Attributed: 1001, Total: 2334, Currency: "EUR", Events: 3}},
		{"a loss subtracts", []Saving{
			ev(SavingConfirmed, 500, "USD", ""),
			ev(SavingConfirmed, -720, "USD", ""),
		}, SavingsTotal{Confirmed: -220, Total: -220, Currency: "USD", Events: 2}},
		{"not saved counts, its amount never does", []Saving{
			ev(SavingConfirmed, 0, "USD", "provider kept billing: powered-off-still-billing"),
			ev(SavingConfirmed, 700, "USD", "stray amount on a not-saved event"),
			ev(SavingConfirmed, 300, "USD", ""),
		}, SavingsTotal{Confirmed: 300, Total: 300, Currency: "USD", Events: 3, NotSaved: 2}},
		{"unknown basis is estimated, not confirmed", []Saving{
			ev("guess", 50, "USD", ""),
		}, SavingsTotal{Estimated: 50, Total: 50, Currency: "USD", Events: 1}},
		{"mixed currencies say so", []Saving{
			ev(SavingConfirmed, 100, "USD", ""),
			ev(SavingConfirmed, 100, "EUR", ""),
			ev(SavingConfirmed, 100, "USD", ""),
		}, SavingsTotal{Confirmed: 300, Total: 300, Mixed: true, Events: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SumSavings(tt.events); got != tt.want {
				t.Errorf("SumSavings = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSumSavingsByCurrency(t *testing.T) {
	events := []Saving{
		{Basis: SavingConfirmed, Amount: 100, Currency: "USD"},
		{Basis: SavingAttributed, Amount: 250, Currency: "EUR"},
		{Basis: SavingEstimated, Amount: 5, Currency: "USD"},
	}
	got := SumSavingsByCurrency(events)
	want := []SavingsTotal{
		{Confirmed: 100, Estimated: 5, Total: 105, Currency: "USD", Events: 2},
		{Attributed: 250, Total: 250, Currency: "EUR", Events: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d totals, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("total %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestSavingID(t *testing.T) {
	a, b := SavingID(SavingIdleStop, "n1", "episode 1"), SavingID(SavingIdleStop, "n1", "episode 1")
	if a != b {
		t.Errorf("SavingID is not deterministic: %s, %s", a, b)
	}
	for _, other := range []string{SavingID(SavingBudgetStop, "n1", "episode 1"), SavingID(SavingIdleStop, "n2", "episode 1"), SavingID(SavingIdleStop, "n1", "episode 2")} {
		if other == a {
			t.Errorf("SavingID collides: %s", a)
		}
	}
}

func TestSavingValidate(t *testing.T) {
	t0 := time.Date(2026, 11, 3, 18, 0, 0, 0, time.UTC)
	good := Saving{ID: "x", Kind: SavingIdleStop, Node: "n", Currency: "USD", Basis: SavingConfirmed,
		Evidence: "idle episode 1", From: t0, To: t0.Add(time.Hour)}
	tests := []struct {
		name    string
		mutate  func(*Saving)
		wantErr bool
	}{
		{"good", func(*Saving) {}, false},
		{"no evidence", func(s *Saving) { s.Evidence = " " }, true},
		{"unknown kind", func(s *Saving) { s.Kind = "magic" }, true},
		{"unknown basis", func(s *Saving) { s.Basis = "" }, true},
		{"no id", func(s *Saving) { s.ID = "" }, true},
		{"backwards period", func(s *Saving) { s.To = t0.Add(-time.Hour) }, true},
		{"not saved with an amount", func(s *Saving) { s.NotSaved = "kept billing"; s.Amount = 5 }, true},
		{"not saved at zero", func(s *Saving) { s.NotSaved = "kept billing" }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good
			tt.mutate(&s)
			if err := s.Validate(); (err != nil) != tt.wantErr {
				t.Errorf("Validate() = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

func TestSavingsQueryMatch(t *testing.T) {
	d := func(day, hour int) time.Time { return time.Date(2026, 11, day, hour, 0, 0, 0, time.UTC) }
	s := Saving{Kind: SavingSpot, Node: "n1", Project: "vision", Owner: "ana", From: d(10, 0), To: d(10, 6)}
	tests := []struct {
		name string
		q    SavingsQuery
		want bool
	}{
		{"everything", SavingsQuery{}, true},
		{"all projects", SavingsQuery{Project: AllProjects}, true},
		{"other project", SavingsQuery{Project: "nlp"}, false},
		{"owner", SavingsQuery{Owner: "ana"}, true},
		{"other node", SavingsQuery{Node: "n2"}, false},
		{"other kind", SavingsQuery{Kind: SavingIdleStop}, false},
		{"overlapping window", SavingsQuery{From: d(10, 5), To: d(11, 0)}, true},
		{"window ends at From", SavingsQuery{From: d(9, 0), To: d(10, 0)}, false},
		{"window starts at To", SavingsQuery{From: d(10, 6), To: d(11, 0)}, false},
		{"the month", SavingsQuery{From: d(1, 0), To: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.q.Match(s); got != tt.want {
				t.Errorf("Match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseSavingKind(t *testing.T) {
	for _, info := range SavingKinds() {
		for _, in := range []string{string(info.Kind), info.Title, " " + string(info.Kind) + " "} {
			if got, err := ParseSavingKind(in); err != nil || got != info.Kind {
				t.Errorf("ParseSavingKind(%q) = %q, %v; want %q", in, got, err, info.Kind)
			}
		}
		if info.Formula == "" || info.Summary == "" || info.Basis == "" {
			t.Errorf("kind %s lacks words: %+v", info.Kind, info)
		}
	}
	if _, err := ParseSavingKind("luck"); err == nil {
		t.Error("ParseSavingKind(luck) = nil error")
	}
}
