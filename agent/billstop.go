package agent

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/savings"
)

// StopConfig is how the agent stops the box, and what that does to the
// bill (issue #27: an OS shutdown leaves an Azure VM allocated and billed,
// a Lambda instance billed until terminated, a RunPod or Vast container
// running).
type StopConfig struct {
	// Stopper stops the box; nil when nothing on this box can stop its
	// bill, where an idle or budget stop only alerts that the box is idle
	// and still billing, and never claims it stopped.
	Stopper gpuwarden.BillStopper
	// Report is what is known before any stop: the method, whether it ends
	// compute billing on this provider (gpuwarden.StopsComputeBilling),
	// why, the fix, and what keeps billing after it.
	Report gpuwarden.StopReport
	// ProveEvery is how often the stop path is proven again (default 10
	// min; the stoppers answer from a cache within a minute anyway).
	ProveEvery time.Duration
	// ProveTimeout bounds one proof (default 30 s).
	ProveTimeout time.Duration
}

func (c *StopConfig) defaults() {
	if c.ProveEvery <= 0 {
		c.ProveEvery = 10 * time.Minute
	}
	if c.ProveTimeout <= 0 {
		c.ProveTimeout = 30 * time.Second
	}
}

// method names the stop in messages.
func (c StopConfig) method() string {
	if c.Report.Method != "" {
		return c.Report.Method
	}
	if c.Stopper != nil {
		return c.Stopper.Method()
	}
	return "none"
}

// SetStop sets how the box stops; call it before Run. It is apart from
// New because the stop may need the agent (its MayTerminate guard).
func (a *Agent) SetStop(c StopConfig) {
	c.defaults()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cfg.Stop = c
	a.stopReport = c.Report
	if a.stopReport.Method == "" {
		a.stopReport.Method = c.method()
	}
}

// WatchStop proves the stop path at once and then every ProveEvery until
// ctx ends, without stopping anything: the status and /metrics show the
// proof, and a stop that is not proven, or that would not end the bill on
// this provider, alerts loudly. It runs beside Run, so that a slow provider
// API never delays the agent's start.
func (a *Agent) WatchStop(ctx context.Context) {
	a.announceStop(ctx)
	if a.cfg.Stop.Stopper == nil {
		return
	}
	t := time.NewTicker(a.cfg.Stop.ProveEvery)
	defer t.Stop()
	for {
		a.ProveStop(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// announceStop says once, at start, when the stop in force would not end
// the bill here.
func (a *Agent) announceStop(ctx context.Context) {
	r := a.cfg.Stop.Report
	if r.StopsBilling {
		return
	}
	a.alert(ctx, gpuwarden.Event{Kind: "stop-keeps-billing", Severity: gpuwarden.SeverityCritical,
		Key:     "stop-keeps-billing-" + a.cfg.Stop.method() + "-" + a.started.UTC().Format(time.RFC3339),
		Message: fmt.Sprintf("%s: the idle stop would NOT stop billing here: %s%s", a.cfg.Node, r.Why, fixSuffix(r.Fix)),
		Data:    map[string]string{"method": a.cfg.Stop.method()}})
}

// ProveStop proves the stop path once and records the proof.
func (a *Agent) ProveStop(ctx context.Context) gpuwarden.StopProof {
	s := a.cfg.Stop.Stopper
	if s == nil {
		return gpuwarden.StopProof{Method: a.cfg.Stop.method(), Reason: "nothing on this box can stop its bill"}
	}
	pctx, cancel := context.WithTimeout(ctx, a.cfg.Stop.ProveTimeout)
	defer cancel()
	proof, err := s.Prove(pctx)
	if proof.Method == "" {
		proof.Method = s.Method()
	}
	if proof.At.IsZero() {
		proof.At = a.Now()
	}
	if err != nil && proof.Proven {
		proof.Proven = false
	}
	if err != nil && proof.Reason == "" {
		proof.Reason = err.Error()
		if proof.Fix == "" {
			proof.Fix = gpuwarden.ErrorHint(err)
		}
	}
	a.mu.Lock()
	before := a.stopReport.Proof
	p := proof
	a.stopReport.Proof = &p
	a.mu.Unlock()
	if ctx.Err() != nil {
		return proof // shutting down: a cancelled proof is not news
	}
	key := "stop-unproven-" + proof.Method
	switch {
	case !proof.Proven && (before == nil || before.Proven || before.Reason != proof.Reason):
		a.alert(ctx, gpuwarden.Event{Kind: "stop-unproven", Severity: gpuwarden.SeverityCritical,
			Key:     key + "-" + proof.At.UTC().Format(time.RFC3339),
			Message: fmt.Sprintf("%s: the idle stop (%s) is not proven and may not stop billing: %s%s", a.cfg.Node, proof.Method, proof.Reason, fixSuffix(proof.Fix)),
			Data:    map[string]string{"method": proof.Method}})
	case proof.Proven && (before == nil || !before.Proven):
		a.log.Info("idle stop proven", "method", proof.Method, "checked", proof.Checked)
	}
	return proof
}

// stop stops the box with the stop in force, or only says so in a dry
// run, and records what the provider answered: the status and the fleet
// server then say what the box still costs, never "stopped" on faith.
func (a *Agent) stop(ctx context.Context, why string) {
	method := a.cfg.Stop.method()
	if a.cfg.DryRun {
		a.log.Warn("dry run: would stop the box", "method", method, "why", why)
		return
	}
	s := a.cfg.Stop.Stopper
	if s == nil {
		r := a.cfg.Stop.Report
		a.alert(ctx, gpuwarden.Event{Kind: "idle-still-billing", Severity: gpuwarden.SeverityCritical,
			Key:     "still-billing-" + why + "-" + a.Now().UTC().Format("2006-01-02T15"),
			Message: fmt.Sprintf("%s should stop (%s) but nothing here can stop its bill, so it keeps running and billing: %s%s", a.cfg.Node, why, r.Why, fixSuffix(r.Fix))})
		return
	}
	a.log.Warn("stopping the box", "method", method, "why", why)
	out, err := s.Stop(ctx)
	if out.Method == "" {
		out.Method = s.Method()
	}
	// Settled now, on the agent's clock: the stopper's own reads stay on
	// the machine's, and a simulated box's clock (simclock) is the agent's.
	out.At = a.Now()
	if err != nil {
		a.log.Error("stop failed", "method", method, "err", err)
		// Retried while the reason holds (stopRetryDue); alerted once an
		// hour, not at every try.
		a.mu.Lock()
		a.stopRetryAt = a.Now().Add(a.stopRetryEvery())
		a.mu.Unlock()
		a.alert(ctx, gpuwarden.Event{Kind: "stop-failed", Severity: gpuwarden.SeverityCritical,
			Key:     "stop-failed-" + method + "-" + a.Now().UTC().Format("2006-01-02T15"),
			Message: fmt.Sprintf("the stop (%s) failed, the box still bills: %v%s", method, err, fixSuffix(gpuwarden.ErrorHint(err))),
			Data:    outcomeData(out)})
		if out.Billing == "" || out.Billing == gpuwarden.NodeRunning {
			return
		}
	}
	a.mu.Lock()
	a.stopRetryAt = time.Time{}
	a.mu.Unlock()
	if out.Billing == "" {
		out.Billing = gpuwarden.NodeStopRequested
	}
	a.mu.Lock()
	o := out
	a.stopReport.Outcome = &o
	a.mu.Unlock()
	sev, msg := gpuwarden.SeverityInfo, fmt.Sprintf("%s stopped (%s, %s): the provider says %s", a.cfg.Node, why, method, describeOutcome(out))
	switch out.Billing {
	case gpuwarden.NodeStopRequested:
		sev = gpuwarden.SeverityWarning
		msg = fmt.Sprintf("%s stop requested (%s, %s), not yet confirmed: %s; it bills until the provider says it stopped", a.cfg.Node, why, method, describeOutcome(out))
	case gpuwarden.NodePoweredOffStillBilling:
		sev = gpuwarden.SeverityCritical
		r := a.cfg.Stop.Report
		msg = fmt.Sprintf("%s powered off (%s, %s) but STILL BILLING: %s%s", a.cfg.Node, why, method, r.Why, fixSuffix(r.Fix))
	}
	// The reason, the time and the rates in force ride with the answer:
	// the saving is priced from this event alone (savings.FromAgent).
	data := outcomeData(out)
	data[savings.DataWhy], data[savings.DataAt] = why, out.At.UTC().Format(time.RFC3339Nano)
	a.mu.Lock()
	rate, cur := a.savings.Rate, a.savings.Currency
	a.mu.Unlock()
	if rate <= 0 {
		rate = a.cfg.Budget.HourlyRate
	}
	if cur == "" {
		cur = a.cfg.Budget.Currency
	}
	data[savings.DataRate], data[savings.DataCurrency] = rate.String(), string(cur)
	data[savings.DataStillBills] = a.cfg.Stop.Report.StillBillsHourly.String()
	a.alert(ctx, gpuwarden.Event{Kind: "box-stopped", Severity: sev, Key: "box-stopped-" + out.At.UTC().Format(time.RFC3339Nano),
		Message: msg, Data: data})
	a.recordSavings(ctx)
}

// MayTerminate is the guard of a stop that destroys the box and its disk
// (Lambda's terminate): it refuses while a supervised job has a checkpoint
// newer than its last durable one, or runs without a store at all, since
// the terminate would lose that work; the agent then alerts and keeps the
// box.
func (a *Agent) MayTerminate(context.Context) error {
	var why []string
	for _, j := range a.Jobs.Undurable() {
		newest := "none"
		if d := j.Sync.NewestDurable; d != nil {
			newest = d.Name
		}
		why = append(why, fmt.Sprintf("job %s: checkpoint %s is not in %s (newest durable: %s)", j.ID, j.Sync.NewestCommitted, j.Sync.Target, newest))
	}
	for _, j := range a.Jobs.Active() {
		if j.Sync == nil {
			why = append(why, fmt.Sprintf("job %s runs without a checkpoint store: nothing of it would survive", j.ID))
		}
	}
	if len(why) == 0 {
		return nil
	}
	return gpuwarden.Errorf(gpuwarden.EConflict, "terminating would lose work: %s", strings.Join(why, "; ")).
		WithHint("the box is kept; sync the checkpoints (gpuwarden run --store) or stop the box by hand")
}

// stopRetryEvery is how long after a failed stop the agent tries again
// while the reason for it holds: the idle window, between 10 s and 5 min.
func (a *Agent) stopRetryEvery() time.Duration {
	return min(max(a.cfg.Idle.Window, 10*time.Second), 5*time.Minute)
}

// stopRetryDue reports whether a stop failed and its retry is due.
func (a *Agent) stopRetryDue(now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.stopRetryAt.IsZero() && !now.Before(a.stopRetryAt)
}

func (a *Agent) stopReportLocked() gpuwarden.StopReport {
	r := a.stopReport
	if r.Proof != nil {
		p := *r.Proof
		r.Proof = &p
	}
	if r.Outcome != nil {
		o := *r.Outcome
		r.Outcome = &o
	}
	return r
}

// describeOutcome is the provider's answer for the stop's log line, else
// what the stop did to the bill.
func describeOutcome(o gpuwarden.StopOutcome) string {
	return cmp.Or(o.Answer(), o.Billing)
}

func outcomeData(o gpuwarden.StopOutcome) map[string]string {
	d := map[string]string{"method": o.Method, "billing": o.Billing}
	if o.HTTPStatus != 0 {
		d["http_status"] = fmt.Sprint(o.HTTPStatus)
	}
	if o.OperationID != "" {
		d["operation_id"] = o.OperationID
	}
	if o.State != "" {
		d["state"] = o.State
	}
	return d
}

func fixSuffix(fix string) string {
	if fix == "" {
		return ""
	}
	return "; fix: " + fix
}
