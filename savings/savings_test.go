package savings

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

func nov(day, hour, minute int) time.Time {
	return time.Date(2026, 11, day, hour, minute, 0, 0, time.UTC)
}

var dec1 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// azureStop is a confirmed deallocate at t, as the Azure stopper answers it.
func azureStop(t time.Time) gpuwarden.StopOutcome {
	return gpuwarden.StopOutcome{Method: gpuwarden.StopAzureDeallocate, HTTPStatus: 202, State: "PowerState/deallocated",
		Billing: gpuwarden.NodeStopped, At: t}
}

func TestStopSaving(t *testing.T) {
	base := Stop{Kind: gpuwarden.SavingIdleStop, Node: "gpu-a", Key: "idle-stop-2026-11-03T17:30:00Z", Provider: "azure",
		Rate: 3_400_000, StillBills: 120_000, RateSource: "box rate", Currency: "USD"}
	weekdays9to18 := func(t time.Time) bool {
		return t.Weekday() != time.Saturday && t.Weekday() != time.Sunday && t.Hour() >= 9 && t.Hour() < 18
	}
	tests := []struct {
		name      string
		mutate    func(*Stop)
		next      time.Time
		on        OnHours
		hours     float64
		amount    gpuwarden.Cents
		basis     gpuwarden.SavingBasis
		notSaved  string // a part of the reason
		from, to  time.Time
		inEvidenc string
	}{
		{"confirmed, to the next start", func(s *Stop) { s.Outcome = azureStop(nov(3, 18, 0)) }, nov(4, 8, 30), nil,
			14.5, 4756, gpuwarden.SavingConfirmed, "", nov(3, 18, 0), nov(4, 8, 30), "HTTP 202"},
		{"confirmed, never started again: to the month's end", func(s *Stop) { s.Outcome = azureStop(nov(24, 14, 15)) }, time.Time{}, nil,
			153.75, 50430, gpuwarden.SavingConfirmed, "", nov(24, 14, 15), dec1, "not started again"},
		{"next start after the month: the month's end", func(s *Stop) { s.Outcome = azureStop(nov(30, 22, 0)) }, dec1.Add(5 * time.Hour), nil,
			2, 656, gpuwarden.SavingConfirmed, "", nov(30, 22, 0), dec1, "not started again"},
		{"on-hours cap: Friday 18:00 to Monday 10:00 counts one hour", func(s *Stop) { s.Outcome = azureStop(nov(6, 18, 0)) }, nov(9, 10, 0), weekdays9to18,
			1, 328, gpuwarden.SavingConfirmed, "", nov(6, 18, 0), nov(9, 10, 0), "outside the plan's on-hours"},
		{"powered off, still billing", func(s *Stop) {
			s.Outcome = gpuwarden.StopOutcome{Method: gpuwarden.StopOSShutdown, Billing: gpuwarden.NodePoweredOffStillBilling, At: nov(10, 19, 0)}
			s.Why = "an OS shutdown keeps azure billing"
		}, nov(12, 9, 0), nil, 0, 0, gpuwarden.SavingConfirmed, "provider kept billing: powered-off-still-billing (an OS shutdown keeps azure billing)", nov(10, 19, 0), nov(12, 9, 0), ""},
		{"stop requested, never confirmed", func(s *Stop) {
			s.Outcome = gpuwarden.StopOutcome{Method: gpuwarden.StopCommand, Billing: gpuwarden.NodeStopRequested, At: nov(10, 19, 0)}
		}, time.Time{}, nil, 0, 0, gpuwarden.SavingConfirmed, "never confirmed", nov(10, 19, 0), dec1, ""},
		{"OS shutdown on AWS: documented, not read back", func(s *Stop) {
			s.Provider, s.StillBills = "aws", 0
			s.Outcome = gpuwarden.StopOutcome{Method: gpuwarden.StopOSShutdown, Billing: gpuwarden.NodeStopped, At: nov(2, 20, 0)}
		}, nov(3, 8, 0), nil, 12, 4080, gpuwarden.SavingEstimated, "", nov(2, 20, 0), nov(3, 8, 0), "documented stop semantics"},
		{"no rate", func(s *Stop) { s.Rate, s.StillBills = 0, 0; s.Outcome = azureStop(nov(3, 18, 0)) }, nov(4, 8, 30), nil,
			0, 0, gpuwarden.SavingConfirmed, "rate is unknown", nov(3, 18, 0), nov(4, 8, 30), ""},
		{"seconds round to the cent", func(s *Stop) { s.Outcome = azureStop(nov(3, 18, 0)) }, nov(3, 18, 20).Add(17 * time.Second), nil,
			0.338056, 111, gpuwarden.SavingConfirmed, "", nov(3, 18, 0), nov(3, 18, 20).Add(17 * time.Second), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base
			tt.mutate(&s)
			got := StopSaving(s, tt.next, tt.on, nil, nov(30, 0, 0))
			if got.Hours != tt.hours || got.Amount != tt.amount || got.Basis != tt.basis || !got.From.Equal(tt.from) || !got.To.Equal(tt.to) {
				t.Errorf("got %v h, %d cents, %s, [%s, %s); want %v h, %d, %s, [%s, %s)", got.Hours, got.Amount, got.Basis,
					got.From, got.To, tt.hours, tt.amount, tt.basis, tt.from, tt.to)
			}
			if (tt.notSaved == "") != (got.NotSaved == "") || !strings.Contains(got.NotSaved, tt.notSaved) {
				t.Errorf("NotSaved = %q, want one with %q", got.NotSaved, tt.notSaved)
			}
			if !strings.Contains(got.Evidence, tt.inEvidenc) || !strings.Contains(got.Evidence, s.Key) {
				t.Errorf("Evidence = %q, want the key and %q", got.Evidence, tt.inEvidenc)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("the event is not storable: %v", err)
			}
			if got.NotSaved == "" && got.Amount != gpuwarden.MulCents(got.Rate, gpuwarden.MicrosFromFloat(got.Hours)) {
				t.Errorf("Amount %d is not Rate × Hours (%s × %v)", got.Amount, got.Rate, got.Hours)
			}
		})
	}
}

// TestOverlapCountsOnce is the rule "an idle stop inside a budget stop
// counts once": a box whose idle stop was only requested, then stopped
// for its budget and confirmed, then stopped again while the first
// confirmed stop's hours run, counts each hour once.
func TestOverlapCountsOnce(t *testing.T) {
	s := Stop{Node: "gpu-c", Provider: "aws", Rate: 10_000_000, Currency: "USD"}
	first := s
	first.Kind, first.Key, first.Outcome = gpuwarden.SavingBudgetStop, "budget-stop-2026-11", gpuwarden.StopOutcome{Billing: gpuwarden.NodeStopped, State: "stopped", At: nov(20, 10, 0)}
	a := StopSaving(first, nov(21, 10, 0), nil, nil, nov(30, 0, 0))
	second := s
	second.Kind, second.Key, second.Outcome = gpuwarden.SavingIdleStop, "idle-stop-x", gpuwarden.StopOutcome{Billing: gpuwarden.NodeStopped, State: "stopped", At: nov(21, 4, 0)}
	b := StopSaving(second, nov(21, 16, 0), nil, []gpuwarden.Saving{a}, nov(30, 0, 0))
	tests := []struct {
		name     string
		got      gpuwarden.Saving
		hours    float64
		amount   gpuwarden.Cents
		from, to time.Time
	}{
		{"budget stop, first", a, 24, 24000, nov(20, 10, 0), nov(21, 10, 0)},
		{"idle stop inside it: only the hours after it", b, 6, 6000, nov(21, 10, 0), nov(21, 16, 0)},
	}
	for _, tt := range tests {
		if tt.got.Hours != tt.hours || tt.got.Amount != tt.amount || !tt.got.From.Equal(tt.from) || !tt.got.To.Equal(tt.to) {
			t.Errorf("%s: %v h %d [%s, %s), want %v h %d [%s, %s)", tt.name, tt.got.Hours, tt.got.Amount, tt.got.From, tt.got.To,
				tt.hours, tt.amount, tt.from, tt.to)
		}
	}
	if !strings.Contains(b.Evidence, "already counted by "+a.ID) {
		t.Errorf("the clipped event does not say by what: %q", b.Evidence)
	}
	// A stop that saved nothing covers nothing: a later one counts in full.
	unconfirmed := a
	unconfirmed.NotSaved, unconfirmed.Hours, unconfirmed.Amount = "never confirmed", 0, 0
	if c := StopSaving(second, nov(21, 16, 0), nil, []gpuwarden.Saving{unconfirmed}, nov(30, 0, 0)); c.Hours != 12 {
		t.Errorf("after a not-saved stop: %v h, want 12", c.Hours)
	}
	// Wholly inside: nothing left to count.
	inside := StopSaving(second, nov(21, 8, 0), nil, []gpuwarden.Saving{a}, nov(30, 0, 0))
	if inside.Hours != 0 || inside.Amount != 0 || inside.NotSaved != "" {
		t.Errorf("a stop wholly inside a counted one: %+v", inside)
	}
}

func TestSpotSaving(t *testing.T) {
	run := func(hours float64, lost ...float64) gpuwarden.RunReport {
		r := gpuwarden.RunReport{Command: []string{"python", "train.py"}, Start: nov(18, 0, 0), End: nov(18, 0, 0).Add(time.Duration(hours * float64(time.Hour)))}
		total := 0.0
		for i, l := range lost {
			r.Attempts = append(r.Attempts, gpuwarden.Attempt{Number: i + 1, Class: gpuwarden.ExitPreempted, LostSeconds: l})
			total += l
		}
		r.Attempts = append(r.Attempts, gpuwarden.Attempt{Number: len(lost) + 1, Class: gpuwarden.ExitOK})
		r.LostSeconds = total
		return r
	}
	tests := []struct {
		name       string
		in         Spot
		amount     gpuwarden.Cents
		notSaved   string
		inEvidence string
	}{
		// (32.77 − 9.83) × 20 = 458.80; 1.25 h × 9.83 = 12.2875 → 12.29.
		{"two preemptions", Spot{Node: "s", Run: run(20, 1800, 2700), SpotRate: 9_830_000, OnDemandRate: 32_770_000, Currency: "USD"}, 44651, "", "2 preempted, 4500 s"},
		// (4 − 3.6) × 1 = 0.40; 2 h × 3.60 = 7.20: a loss.
		{"rework bigger than the discount", Spot{Node: "s", Run: run(1, 7200), SpotRate: 3_600_000, OnDemandRate: 4_000_000, Currency: "USD"}, -680, "", "1 preempted"},
		{"no on-demand rate", Spot{Node: "s", Run: run(3), SpotRate: 3_600_000, Currency: "USD"}, 0, "on-demand rate", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SpotSaving(tt.in, nov(30, 0, 0))
			if got.Amount != tt.amount || !strings.Contains(got.NotSaved, tt.notSaved) || (tt.notSaved == "") != (got.NotSaved == "") {
				t.Errorf("Amount %d NotSaved %q, want %d %q", got.Amount, got.NotSaved, tt.amount, tt.notSaved)
			}
			if !strings.Contains(got.Evidence, tt.inEvidence) {
				t.Errorf("Evidence %q lacks %q", got.Evidence, tt.inEvidence)
			}
			if err := got.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestOrphanSaving(t *testing.T) {
	base := Orphan{Node: "gpu-d", Project: "ml", Reasons: []string{"idle"}, Flagged: nov(24, 9, 0), By: "admin token t1",
		Rate: 2_100_000, Currency: "USD"}
	tests := []struct {
		name   string
		mutate func(*Orphan)
		ok     bool
		hours  float64
		amount gpuwarden.Cents
	}{
		{"to the month's end", func(o *Orphan) { o.Ended = nov(27, 10, 0) }, true, 86, 18060},
		{"capped at a week", func(o *Orphan) { o.Flagged, o.Ended = nov(1, 0, 0), nov(2, 0, 0) }, true, 168, 35280},
		{"capped at a shorter TTL", func(o *Orphan) { o.Ended, o.TTL = nov(27, 10, 0), 12*time.Hour }, true, 12, 2520},
		{"ended more than a week after the flag", func(o *Orphan) { o.Flagged, o.Ended = nov(20, 9, 0), nov(27, 9, 1) }, false, 0, 0},
		{"never flagged", func(o *Orphan) { o.Reasons, o.Ended = nil, nov(21, 0, 0) }, false, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base
			tt.mutate(&o)
			got, ok := OrphanSaving(o, nil, nov(30, 0, 0))
			if ok != tt.ok || got.Hours != tt.hours || got.Amount != tt.amount {
				t.Errorf("got %v %v h %d, want %v %v h %d", ok, got.Hours, got.Amount, tt.ok, tt.hours, tt.amount)
			}
			if ok && (got.Basis != gpuwarden.SavingAttributed || got.Validate() != nil) {
				t.Errorf("basis %s, %v", got.Basis, got.Validate())
			}
		})
	}
}

// agentEvents is what an agent's ledger holds after a stop, as billstop.go
// writes it: the alert, then box-stopped with the provider's answer.
func agentEvents(seq int64, why, key string, out gpuwarden.StopOutcome, rate string) []gpuwarden.Event {
	alert := "idle-stop"
	if why == WhyBudget {
		alert = "budget-stop"
	}
	data := map[string]string{"method": out.Method, "billing": out.Billing, DataWhy: why, DataAt: out.At.Format(time.RFC3339Nano), DataRate: rate}
	if out.HTTPStatus != 0 {
		data["http_status"] = "202"
	}
	if out.State != "" {
		data["state"] = out.State
	}
	return []gpuwarden.Event{
		{Seq: seq, Time: out.At.Add(-time.Second), Kind: alert, Key: key},
		{Seq: seq + 1, Time: out.At, Kind: "box-stopped", Key: "box-stopped-" + out.At.Format(time.RFC3339Nano), Data: data},
	}
}

func TestFromAgent(t *testing.T) {
	box := Box{Node: "gpu-a", Provider: "azure", Rate: 3_400_000, StillBills: 120_000, Currency: "USD", Spot: true,
		OnDemandRate: 4_000_000, OnDemandSource: "label on_demand_price"}
	var evs []gpuwarden.Event
	evs = append(evs, agentEvents(10, WhyIdle, "idle-stop-A", azureStop(nov(3, 18, 0)), "")...)
	evs = append(evs, agentEvents(20, WhyIdle, "idle-stop-B", azureStop(nov(13, 20, 0)), "")...)
	evs = append(evs, agentEvents(30, WhyOffHours, "offhours-stop-C", azureStop(nov(14, 20, 0)), "")...)
	report, _ := json.Marshal(gpuwarden.RunReport{Command: []string{"train"}, Start: nov(5, 0, 0), End: nov(5, 2, 0)})
	evs = append(evs, gpuwarden.Event{Seq: 40, Time: nov(5, 2, 0), Kind: "run-report", Data: map[string]string{"report": string(report)}})
	// The agent started on Nov 4 08:30 and Nov 16 08:00: each closes a stop.
	first := FromAgent(box, evs, []time.Time{nov(4, 8, 30)}, nil, nov(5, 0, 0))
	all := FromAgent(box, evs, []time.Time{nov(4, 8, 30), nov(16, 8, 0)}, nil, nov(16, 8, 0))
	if len(first) != 3 || len(all) != 3 {
		t.Fatalf("got %d and %d events, want 3 (two idle stops and a spot run; the off-hours stop is the plan)", len(first), len(all))
	}
	if first[1].ID != all[1].ID || first[1].To.Equal(all[1].To) {
		t.Errorf("the second stop re-priced at the next start should keep its ID and change its end: %+v / %+v", first[1], all[1])
	}
	want := []struct {
		kind   gpuwarden.SavingKind
		amount gpuwarden.Cents
	}{{gpuwarden.SavingIdleStop, 4756}, {gpuwarden.SavingIdleStop, 19680}, {gpuwarden.SavingSpot, 120}}
	for i, w := range want {
		if all[i].Kind != w.kind || all[i].Amount != w.amount {
			t.Errorf("event %d: %s %d, want %s %d", i, all[i].Kind, all[i].Amount, w.kind, w.amount)
		}
	}
}

// TestMonthSumsToTheCent is the issue's "a test sums the events and checks
// the total to the cent": the month of testdata/savings-month.md, computed
// here from its evidence, adds up to the hand-computed totals.
func TestMonthSumsToTheCent(t *testing.T) {
	var events []gpuwarden.Saving
	azure := Box{Node: "gpu-a", Provider: "azure", Rate: 3_400_000, StillBills: 120_000, Currency: "USD"}
	var evs []gpuwarden.Event
	evs = append(evs, agentEvents(1, WhyIdle, "idle-stop-1", azureStop(nov(3, 18, 0)), "")...)
	evs = append(evs, agentEvents(3, WhyIdle, "idle-stop-2", azureStop(nov(13, 20, 0)), "")...)
	events = append(events, FromAgent(azure, evs, []time.Time{nov(1, 0, 0), nov(4, 8, 30), nov(16, 8, 0)}, nil, dec1)...)
	os := Box{Node: "gpu-b", Provider: "azure", Rate: 3_400_000, Currency: "USD", Why: "an OS shutdown keeps azure billing"}
	events = append(events, FromAgent(os, agentEvents(1, WhyIdle, "idle-stop-3",
		gpuwarden.StopOutcome{Method: gpuwarden.StopOSShutdown, Billing: gpuwarden.NodePoweredOffStillBilling, At: nov(10, 19, 0)}, ""),
		[]time.Time{nov(12, 9, 0)}, nil, dec1)...)
	aws := Box{Node: "gpu-c", Provider: "aws", Rate: 32_770_000, StillBills: 270_000, Currency: "USD"}
	events = append(events, FromAgent(aws, agentEvents(1, WhyBudget, "budget-stop-2026-11",
		gpuwarden.StopOutcome{Method: gpuwarden.StopAWS, HTTPStatus: 200, State: "stopped", Billing: gpuwarden.NodeStopped, At: nov(24, 14, 15)}, ""),
		nil, nil, dec1)...)
	events = append(events, SpotSaving(Spot{Node: "gpu-s", Run: gpuwarden.RunReport{Command: []string{"train"}, Start: nov(18, 0, 0), End: nov(18, 20, 0),
		LostSeconds: 4500}, SpotRate: 9_830_000, OnDemandRate: 32_770_000, Currency: "USD"}, dec1))
	o, ok := OrphanSaving(Orphan{Node: "gpu-d", Reasons: []string{"no-owner"}, Flagged: nov(27, 0, 0), Ended: nov(27, 0, 0), Rate: 2_100_000, Currency: "USD"}, nil, dec1)
	if !ok {
		t.Fatal("the orphan is no event")
	}
	events = append(events, o)
	// Hand-computed (cmd/gpuwarden/testdata/savings-month.md): 47.56 +
	// 196.80 + 0 + 4996.88 + 446.51 confirmed, 201.60 attributed.
	want := gpuwarden.SavingsTotal{Confirmed: 568775, Attributed: 20160, Total: 588935, Currency: "USD", Events: 6, NotSaved: 1}
	if got := gpuwarden.SumSavings(events); got != want {
		t.Errorf("SumSavings = %+v, want %+v", got, want)
	}
	var sum gpuwarden.Cents
	for _, e := range events {
		sum += e.Amount
	}
	if sum != want.Total {
		t.Errorf("the events' amounts add to %d, the total says %d", sum, want.Total)
	}
}
