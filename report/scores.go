package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// NodeScore is one node's record: burn-ins, hardware errors, jobs and
// preemptions, and the error rate that makes a bad host stand out.
type NodeScore struct {
	Node     string `json:"node"`
	Hostname string `json:"hostname,omitempty"`
	Project  string `json:"project,omitempty"`
	// Provider is the node's label, None when empty, Unknown when the
	// ledger no longer lists the node.
	Provider     string    `json:"provider"`
	BurnIns      int       `json:"burnins"`
	BurnInPass   int       `json:"burnin_pass"`
	BurnInWarn   int       `json:"burnin_warn"`
	BurnInFail   int       `json:"burnin_fail"`
	LastBurnIn   string    `json:"last_burnin,omitempty"`
	LastBurnInAt time.Time `json:"last_burnin_at,omitzero"`
	Xids         int       `json:"xids"`
	// XidCodes are the distinct Xid numbers the events named.
	XidCodes []uint64 `json:"xid_codes,omitempty"`
	// ECC counts uncorrected-ECC and row-remap alerts.
	ECC        int `json:"ecc"`
	Runs       int `json:"runs"`
	FailedRuns int `json:"failed_runs"`
	// Preemptions counts the cloud's preemption notices; Notices counts its
	// rebalance and maintenance notices.
	Preemptions int `json:"preemptions"`
	Notices     int `json:"notices"`
	// PreemptedRestarts counts job restarts after a preemption, from the
	// run reports; a notice and its restart are one event seen twice, so
	// this is not added to Preemptions.
	PreemptedRestarts int     `json:"preempted_restarts"`
	UpHours           float64 `json:"up_hours"`
	// Errors are burn-in FAILs + failed runs + Xids + ECC; ErrorRate is
	// Errors per 100 up hours, the hours floored at one.
	Errors    int     `json:"errors"`
	ErrorRate float64 `json:"error_rate"`
}

// tally is what one node's events and hours add up to.
type tally struct {
	NodeScore
	minutes  int
	xidCodes map[uint64]bool
}

// tallies folds hours and the events the scorecards read into one tally per
// node ID, including nodes the ledger no longer lists.
func tallies(in Input, ix index) map[string]*tally {
	out := map[string]*tally{}
	get := func(id string) *tally {
		t := out[id]
		if t == nil {
			t = &tally{NodeScore: NodeScore{Node: id, Provider: Unknown}, xidCodes: map[uint64]bool{}}
			if n := ix.nodes[id]; n != nil {
				t.Hostname, t.Project, t.Provider = n.Hostname, n.Project, orNone(n.Labels.Provider)
			}
			out[id] = t
		}
		return t
	}
	for i := range in.Nodes {
		get(in.Nodes[i].ID)
	}
	for _, h := range in.Hours {
		get(h.Node).minutes += max(h.Minutes, 0)
	}
	for _, e := range in.Events {
		id := e.Node
		if id == "" {
			id = e.Data["node"]
		}
		switch e.Kind {
		case KindBurnin:
			v := burninVerdict(e.Event)
			if v == "" {
				continue
			}
			t := get(id)
			t.BurnIns++
			switch v {
			case gpuwarden.VerdictPass:
				t.BurnInPass++
			case gpuwarden.VerdictWarn:
				t.BurnInWarn++
			case gpuwarden.VerdictFail:
				t.BurnInFail++
			}
			at := e.Time.UTC()
			if t.LastBurnIn == "" || at.After(t.LastBurnInAt) || (at.Equal(t.LastBurnInAt) && severity(v) > severity(t.LastBurnIn)) {
				t.LastBurnIn, t.LastBurnInAt = v, at
			}
		case KindRunReport:
			rr, ok := runReport(e.Event)
			if !ok {
				continue
			}
			t := get(id)
			t.Runs++
			if runFailed(rr) {
				t.FailedRuns++
			}
			t.PreemptedRestarts += rr.Restarts[gpuwarden.ExitPreempted]
		case KindPreemption:
			get(id).Preemptions++
		case KindRebalance, KindMaintenance:
			get(id).Notices++
		case KindXid:
			t := get(id)
			t.Xids++
			if x, err := strconv.ParseUint(strings.TrimSpace(e.Data["xid"]), 10, 64); err == nil {
				t.xidCodes[x] = true
			}
		case KindECC, KindRemap:
			get(id).ECC++
		}
	}
	return out
}

// burninVerdict reads a burn-in event's verdict: the Data field the CLI
// writes, else the report inside; "" when neither is a known verdict.
func burninVerdict(e gpuwarden.Event) string {
	v := e.Data["verdict"]
	if v == "" {
		var r gpuwarden.BurnReport
		if json.Unmarshal([]byte(e.Data["report"]), &r) == nil {
			v = r.Verdict
		}
	}
	if severity(v) < 0 {
		return ""
	}
	return v
}

// severity orders verdicts mildest first; -1 for anything else.
func severity(v string) int {
	switch v {
	case gpuwarden.VerdictPass:
		return 0
	case gpuwarden.VerdictWarn:
		return 1
	case gpuwarden.VerdictFail:
		return 2
	}
	return -1
}

// runReport decodes a run-report event; a report that does not decode is
// left out, since its outcome is unknown.
func runReport(e gpuwarden.Event) (gpuwarden.RunReport, bool) {
	var r gpuwarden.RunReport
	if err := json.Unmarshal([]byte(e.Data["report"]), &r); err != nil {
		return r, false
	}
	if r.JobClass == "" {
		// A report written before the job's fields were named so: its
		// exit_code and class were the job's.
		var old struct {
			ExitCode int    `json:"exit_code"`
			Class    string `json:"class"`
		}
		_ = json.Unmarshal([]byte(e.Data["report"]), &old)
		r.JobExitCode, r.JobClass = old.ExitCode, old.Class
	}
	return r, true
}

// runFailed says whether a job ended in anything but success. A job that
// ended preempted counts as failed: its work did not finish on this box.
func runFailed(r gpuwarden.RunReport) bool {
	switch r.JobClass {
	case gpuwarden.ExitOK, "success":
		return false
	case "":
		return r.JobExitCode != 0
	}
	return true
}

// NodeScores scores every node seen in the input, worst error rate first.
func NodeScores(in Input) []NodeScore {
	ix := newIndex(in)
	ts := tallies(in, ix)
	out := make([]NodeScore, 0, len(ts))
	for _, t := range ts {
		s := t.NodeScore
		s.UpHours = round2(float64(t.minutes) / 60)
		s.Errors = s.BurnInFail + s.FailedRuns + s.Xids + s.ECC
		s.ErrorRate = per100(s.Errors, float64(t.minutes)/60)
		for _, x := range sortedKeys(t.xidCodes) {
			s.XidCodes = append(s.XidCodes, x)
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b NodeScore) int {
		return cmp.Or(cmp.Compare(b.ErrorRate, a.ErrorRate), cmp.Compare(b.Errors, a.Errors),
			cmp.Compare(b.BurnInWarn, a.BurnInWarn), cmp.Compare(a.Node, b.Node))
	})
	return out
}

// ProviderScore compares providers: how fast their boxes come up, how often
// they are taken back, and how often work on them fails.
type ProviderScore struct {
	Provider     string       `json:"provider"`
	Nodes        int          `json:"nodes"`
	UpHours      float64      `json:"up_hours"`
	Provisioning Provisioning `json:"provisioning"`
	Preemptions  int          `json:"preemptions"`
	// PreemptionsPer100Hours floors the hours at one, as NodeScore does.
	PreemptionsPer100Hours float64 `json:"preemptions_per_100h"`
	BurnIns                int     `json:"burnins"`
	FailedBurnIns          int     `json:"failed_burnins"`
	Runs                   int     `json:"runs"`
	FailedRuns             int     `json:"failed_runs"`
	// FailureRate is (failed burn-ins + failed runs) / (burn-ins + runs),
	// 0–1, and 0 when there were none.
	FailureRate float64 `json:"failure_rate"`
}

// Provisioning is how long a provider's boxes took from the launch request
// to their first registration.
//
// Percentiles are nearest-rank: the p-th percentile of n sorted samples is
// the ⌈p/100 × n⌉-th, always a time that was measured. An outlier is a node
// above p50 + 3 × MAD, where MAD (the median absolute deviation from p50,
// also nearest-rank) is floored at 10 % of p50 so that a fleet of near-equal
// boots does not flag seconds of noise; it needs at least 3 samples. The
// MAD rule was chosen over "above 2 × p95" because with fewer than 20
// samples the nearest-rank p95 is the maximum, and nothing can exceed twice
// the maximum.
type Provisioning struct {
	Samples     int     `json:"samples"`
	MeanSeconds float64 `json:"mean_seconds"`
	P50Seconds  float64 `json:"p50_seconds"`
	P95Seconds  float64 `json:"p95_seconds"`
	// OutlierAboveSeconds is the threshold; zero with under 3 samples.
	OutlierAboveSeconds float64               `json:"outlier_above_seconds"`
	Outliers            []ProvisioningOutlier `json:"outliers"`
}

// ProvisioningOutlier is a node that took far longer to come up than its
// provider's usual.
type ProvisioningOutlier struct {
	Node    string  `json:"node"`
	Seconds float64 `json:"seconds"`
}

// minOutlierSamples is the fewest samples the outlier rule judges.
const minOutlierSamples = 3

// ProviderScores scores each provider label over the nodes the ledger lists,
// sorted by provider name; events of nodes it no longer lists are left out,
// since their provider is unknown.
func ProviderScores(in Input) []ProviderScore {
	ix := newIndex(in)
	ts := tallies(in, ix)
	type acc struct {
		ProviderScore
		minutes int
		prov    []ProvisioningOutlier
	}
	by := map[string]*acc{}
	for i := range in.Nodes {
		n := &in.Nodes[i]
		if ix.nodes[n.ID] != n {
			continue // a node listed twice counts once, as its last row
		}
		key := orNone(n.Labels.Provider)
		a := by[key]
		if a == nil {
			a = &acc{ProviderScore: ProviderScore{Provider: key}}
			by[key] = a
		}
		a.Nodes++
		t := ts[n.ID]
		a.minutes += t.minutes
		a.Preemptions += t.Preemptions
		a.BurnIns += t.BurnIns
		a.FailedBurnIns += t.BurnInFail
		a.Runs += t.Runs
		a.FailedRuns += t.FailedRuns
		if !n.Labels.LaunchedAt.IsZero() && !n.Registered.IsZero() && !n.Labels.LaunchedAt.After(n.Registered) {
			a.prov = append(a.prov, ProvisioningOutlier{Node: n.ID, Seconds: n.Registered.Sub(n.Labels.LaunchedAt).Seconds()})
		}
	}
	out := make([]ProviderScore, 0, len(by))
	for _, key := range sortedKeys(by) {
		a := by[key]
		s := a.ProviderScore
		hours := float64(a.minutes) / 60
		s.UpHours = round2(hours)
		s.PreemptionsPer100Hours = per100(s.Preemptions, hours)
		if tries := s.BurnIns + s.Runs; tries > 0 {
			s.FailureRate = math.Round(float64(s.FailedBurnIns+s.FailedRuns)/float64(tries)*10000) / 10000
		}
		s.Provisioning = provisioning(a.prov)
		out = append(out, s)
	}
	return out
}

// provisioning summarises provisioning times per the rules on Provisioning.
func provisioning(samples []ProvisioningOutlier) Provisioning {
	p := Provisioning{Samples: len(samples), Outliers: []ProvisioningOutlier{}}
	if len(samples) == 0 {
		return p
	}
	secs := make([]float64, len(samples))
	sum := 0.0
	for i, s := range samples {
		secs[i] = s.Seconds
		sum += s.Seconds
	}
	slices.Sort(secs)
	p.MeanSeconds = round1(sum / float64(len(secs)))
	p50 := nearestRank(secs, 50)
	p.P50Seconds = round1(p50)
	p.P95Seconds = round1(nearestRank(secs, 95))
	if len(secs) < minOutlierSamples {
		return p
	}
	dev := make([]float64, len(secs))
	for i, s := range secs {
		dev[i] = math.Abs(s - p50)
	}
	slices.Sort(dev)
	mad := max(nearestRank(dev, 50), p50/10)
	threshold := p50 + 3*mad
	p.OutlierAboveSeconds = round1(threshold)
	for _, s := range samples {
		if s.Seconds > threshold {
			p.Outliers = append(p.Outliers, ProvisioningOutlier{Node: s.Node, Seconds: round1(s.Seconds)})
		}
	}
	slices.SortFunc(p.Outliers, func(a, b ProvisioningOutlier) int {
		return cmp.Or(cmp.Compare(b.Seconds, a.Seconds), cmp.Compare(a.Node, b.Node))
	})
	return p
}

// nearestRank is the p-th percentile of sorted values by the nearest-rank
// method: the ⌈p/100 × n⌉-th smallest.
func nearestRank(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(k, 1), len(sorted))-1]
}

// WriteNodeScoreTable prints the node scorecard, worst first.
func WriteNodeScoreTable(w io.Writer, scores []NodeScore) error {
	var b strings.Builder
	b.WriteString("Node scorecard, worst first (errors = burn-in FAILs + failed runs + Xids + ECC/remaps)\n\n")
	if len(scores) == 0 {
		b.WriteString("No nodes.\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	t := newTable("NODE", "PROVIDER", "BURN-INS P/W/F", "LAST", "XID", "ECC", "RUNS", "FAILED", "PREEMPT", "UP H", "ERR/100H").
		alignRight(2, 4, 5, 6, 7, 8, 9, 10)
	for _, s := range scores {
		last := "-"
		if s.LastBurnIn != "" {
			last = s.LastBurnIn + " " + s.LastBurnInAt.Format("01-02")
		}
		t.add(truncate(s.Node, 24), truncate(s.Provider, 10), fmt.Sprintf("%d/%d/%d", s.BurnInPass, s.BurnInWarn, s.BurnInFail), last,
			fmt.Sprint(s.Xids), fmt.Sprint(s.ECC), fmt.Sprint(s.Runs), fmt.Sprint(s.FailedRuns), fmt.Sprint(s.Preemptions),
			fmt.Sprintf("%.1f", s.UpHours), fmt.Sprintf("%.1f", s.ErrorRate))
	}
	if err := t.write(&b); err != nil {
		return err
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteProviderScoreTable prints the provider scorecard and its outliers.
func WriteProviderScoreTable(w io.Writer, scores []ProviderScore) error {
	var b strings.Builder
	b.WriteString("Provider scorecard (provisioning: launch request to first registration, nearest-rank percentiles)\n\n")
	if len(scores) == 0 {
		b.WriteString("No providers.\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	t := newTable("PROVIDER", "NODES", "UP H", "PROV N", "MEAN", "P50", "P95", "PREEMPT", "PER 100H", "FAILED", "FAIL %").
		alignRight(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	for _, s := range scores {
		p := s.Provisioning
		mean, p50, p95 := "-", "-", "-"
		if p.Samples > 0 {
			mean, p50, p95 = secs(p.MeanSeconds), secs(p.P50Seconds), secs(p.P95Seconds)
		}
		t.add(truncate(s.Provider, 16), fmt.Sprint(s.Nodes), fmt.Sprintf("%.1f", s.UpHours), fmt.Sprint(p.Samples), mean, p50, p95,
			fmt.Sprint(s.Preemptions), fmt.Sprintf("%.2f", s.PreemptionsPer100Hours),
			fmt.Sprintf("%d/%d", s.FailedBurnIns+s.FailedRuns, s.BurnIns+s.Runs), fmt.Sprintf("%.1f", s.FailureRate*100))
	}
	if err := t.write(&b); err != nil {
		return err
	}
	first := true
	for _, s := range scores {
		for _, o := range s.Provisioning.Outliers {
			if first {
				b.WriteString("\nSlow to provision (above p50 + 3 × MAD):\n")
				first = false
			}
			fmt.Fprintf(&b, "  - %s %s: %s (threshold %s)\n", s.Provider, truncate(o.Node, 40), secs(o.Seconds), secs(s.Provisioning.OutlierAboveSeconds))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// secs prints seconds compactly: "45s", "3m 20s", "1h 05m".
func secs(s float64) string {
	d := time.Duration(math.Round(finite(s))) * time.Second
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int64(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm %02ds", int64(d/time.Minute), int64(d%time.Minute/time.Second))
	default:
		return fmt.Sprintf("%dh %02dm", int64(d/time.Hour), int64(d%time.Hour/time.Minute))
	}
}
