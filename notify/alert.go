package notify

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Box is what every alert says about the box it comes from, so that the
// person paged can tell one box of a fleet from another and see what it
// costs without logging in.
type Box struct {
	// Host is the host name; NodeID and InstanceID are the fleet server's
	// node ID and the cloud's instance ID, empty where not known.
	Host       string
	NodeID     string
	InstanceID string
	// Owner, Provider and Region come from the agent's labels.
	Owner    string
	Provider string
	Region   string
	// Link is the dashboard: the fleet server's URL, else the agent's own.
	Link string
	// DryRun marks an agent that only logs its stop action: its stop
	// alerts say "dry run: would have …".
	DryRun bool
	// StopCommand is the stop action, for the alert's action line.
	StopCommand string
	// Status reads the agent's live state when an alert is sent (rate,
	// spend, stop time); nil means no money line beyond "unknown".
	Status func() gpuwarden.AgentStatus
}

// Fact is one labelled line of an alert: the receivers show them as
// fields, facts or key/value lines.
type Fact struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Money is what the box costs, as the agent's budget meter knows it.
type Money struct {
	Currency gpuwarden.Currency `json:"currency"`
	// RatePerHour is the box's hourly rate, storage included.
	RatePerHour gpuwarden.Micros `json:"rate_per_hour"`
	// SpentThisMonth is what the box has cost this calendar month (UTC).
	SpentThisMonth gpuwarden.Cents `json:"spent_this_month"`
	// Budget is the month's limit; 0 means none.
	Budget gpuwarden.Cents `json:"budget"`
}

// Alert is an event with everything a receiver shows about it, built once
// per send so that every format says the same thing.
type Alert struct {
	Event gpuwarden.Event
	Box   Box
	// Resolve is true for an event that ends earlier alerts; Resolves
	// lists their keys.
	Resolve  bool
	Resolves []string
	// Title is the headline: "[WARNING] idle-warning on gpu-box-1".
	Title string
	// Summary is the event's message, prefixed "dry run: would have …"
	// when the agent only pretends to stop the box.
	Summary string
	// Action says what the agent does about it and when.
	Action string
	// Money is nil when the agent's rate and spend are not known.
	Money *Money
	// Facts are the labelled lines, in the order shown.
	Facts []Fact
}

// The event kinds whose alert announces a stop, and those that warn of one.
var (
	stopKinds = map[string]string{"idle-stop": "idle", "budget-stop": "budget", "offhours-stop": "off-hours"}
	warnKinds = map[string]bool{"idle-warning": true, "offhours-warning": true}
)

// NewAlert builds the alert for e from box b, reading b.Status once.
func NewAlert(e gpuwarden.Event, b Box) Alert {
	var st *gpuwarden.AgentStatus
	if b.Status != nil {
		s := b.Status()
		st = &s
	}
	b.Status = nil
	if b.Host == "" && st != nil {
		b.Host = st.Node
	}
	a := Alert{Event: e, Box: b, Summary: e.Message}
	if r := strings.Fields(e.Data[gpuwarden.DataResolves]); len(r) > 0 {
		a.Resolve, a.Resolves = true, r
	}
	sev := strings.ToUpper(e.Severity)
	if sev == "" {
		sev = strings.ToUpper(gpuwarden.SeverityInfo)
	}
	if a.Resolve {
		sev = "RESOLVED"
	}
	a.Title = "[" + sev + "]"
	if e.Kind != "" {
		a.Title += " " + e.Kind
	}
	if b.Host != "" {
		a.Title += " on " + b.Host
	}
	if st != nil && (st.Budget.HourlyRate > 0 || st.Budget.Spent > 0) {
		a.Money = &Money{Currency: st.Budget.Currency, RatePerHour: st.Budget.HourlyRate,
			SpentThisMonth: st.Budget.Spent, Budget: st.Budget.Limit}
	}
	a.Action = action(e, b, st, a.Resolve)
	if b.DryRun && (stopKinds[e.Kind] != "" || warnKinds[e.Kind]) {
		a.Title = "[DRY RUN] " + a.Title
		if stopKinds[e.Kind] != "" {
			a.Summary = "dry run: would have stopped the box: " + e.Message
		} else {
			a.Summary = "dry run: would stop the box later: " + e.Message
		}
	}
	a.Facts = a.facts()
	return a
}

// action says what the agent does about the event, and when.
func action(e gpuwarden.Event, b Box, st *gpuwarden.AgentStatus, resolve bool) string {
	at := e.Time.UTC().Format(time.RFC3339)
	cmd := b.StopCommand
	if cmd == "" && st != nil && st.Stop != nil && st.Stop.Method != "" {
		cmd = st.Stop.Method // the stop in force: azure-deallocate, os-shutdown …
	}
	if cmd == "" {
		cmd = "the stop command"
	}
	switch {
	case resolve:
		return "resolved at " + at + ": nothing to do"
	case stopKinds[e.Kind] != "" && b.DryRun:
		return fmt.Sprintf("dry run: would have stopped the box (%s) at %s; it keeps running", cmd, at)
	case stopKinds[e.Kind] != "":
		return fmt.Sprintf("stopping the box (%s) at %s, reason: %s", cmd, at, stopKinds[e.Kind])
	case warnKinds[e.Kind]:
		when := "later"
		if e.Kind == "idle-warning" && st != nil && !st.Idle.StopAt.IsZero() {
			when = "at " + st.Idle.StopAt.UTC().Format(time.RFC3339)
		}
		if b.DryRun {
			return fmt.Sprintf("dry run: would stop the box (%s) %s unless work starts; warned at %s", cmd, when, at)
		}
		return fmt.Sprintf("stops the box (%s) %s unless work starts; warned at %s", cmd, when, at)
	}
	return "alert only, nothing stopped; seen at " + at
}

// facts are the labelled lines every format shows; unknown owner or
// provider are left out, unknown money is said to be unknown.
func (a Alert) facts() []Fact {
	box := a.Box.Host
	var ids []string
	if a.Box.NodeID != "" {
		ids = append(ids, "node "+a.Box.NodeID)
	}
	if a.Box.InstanceID != "" {
		ids = append(ids, "instance "+a.Box.InstanceID)
	}
	if len(ids) > 0 {
		box += " (" + strings.Join(ids, ", ") + ")"
	}
	fs := []Fact{{"Box", box}}
	if a.Box.Owner != "" {
		fs = append(fs, Fact{"Owner", a.Box.Owner})
	}
	if where := strings.Trim(a.Box.Provider+"/"+a.Box.Region, "/"); where != "" {
		fs = append(fs, Fact{"Provider/region", where})
	}
	fs = append(fs, Fact{"Money", a.moneyText()}, Fact{"Action", a.Action})
	if a.Box.Link != "" {
		fs = append(fs, Fact{"Dashboard", a.Box.Link})
	}
	if a.Event.Key != "" {
		fs = append(fs, Fact{"Key", a.Event.Key})
	}
	return fs
}

// moneyText is the money line: "$2.50/h, $41.20 spent this month of a
// $500.00 budget".
func (a Alert) moneyText() string {
	m := a.Money
	if m == nil {
		return "unknown (no rate: give --rate or a plan with a box)"
	}
	s := m.Currency.FormatRate(m.RatePerHour, "h") + ", " + m.Currency.Format(m.SpentThisMonth) + " spent this month"
	if m.Budget > 0 {
		s += " of a " + m.Currency.Format(m.Budget) + " budget"
	}
	return s
}

// Text is the alert as plain lines: the headline, the summary, then one
// "Name: value" line per fact.
func (a Alert) Text() string {
	var b strings.Builder
	b.WriteString(a.Title + ": " + a.Summary)
	for _, f := range a.Facts {
		b.WriteString("\n" + f.Name + ": " + f.Value)
	}
	return b.String()
}

// Line is the alert in one line, the headline and the summary.
func (a Alert) Line() string { return a.Title + ": " + a.Summary }
