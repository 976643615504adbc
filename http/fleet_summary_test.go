package http

import (
	"context"
	"encoding/json"
	"io"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/notify"
	"github.com/gpuwarden/gpuwarden/notify/notifytest"
	"github.com/gpuwarden/gpuwarden/report"
)

// hookReceiver is a webhook receiver on loopback that keeps what it got
// and answers with the statuses queued, then 200.
type hookReceiver struct {
	mu      sync.Mutex
	bodies  []string
	answers []int
	srv     *httptest.Server
}

func newHookReceiver(t *testing.T) *hookReceiver {
	t.Helper()
	h := &hookReceiver{}
	h.srv = httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.bodies = append(h.bodies, string(b))
		code := 200
		if len(h.answers) > 0 {
			code, h.answers = h.answers[0], h.answers[1:]
		}
		h.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookReceiver) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.bodies...)
}

// summaryClock is a clock the test moves.
type summaryClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *summaryClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *summaryClock) set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

// summaryHook is a webhook of a format on a receiver, tried once.
func summaryHook(t *testing.T, id, rawURL, format string) SummaryHook {
	t.Helper()
	w, err := notify.NewWebhook(rawURL, format, nil, notify.WithAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	return SummaryHook{ID: id, Send: w.SendSummary}
}

const summaryRoutingKey = "R0UT1NGKEY0123456789abcdefABCDEF"

// TestMonthlySummary runs the month's end on a test clock: nothing goes
// out before the 1st; on the 1st Slack, Teams and PagerDuty receivers each
// get the summary once, in their format, with the spend the API reports,
// the savings to the cent (confirmed and estimated apart), the biggest
// saving and the biggest waste; checking again, or a restarted server on
// the same ledger and data dir, sends nothing more; a receiver that failed
// gets it at the next check; past the first week nothing is sent; the
// next month's 1st sends the next month's.
func TestMonthlySummary(t *testing.T) {
	clock := &summaryClock{now: fixtureNow}
	f := newDashFixtureAt(t, clock.Now)
	seedFleet(t, f.store, fixtureNow)
	seedSavings(t, f.store)
	admin := f.token(gpuwarden.AllProjects, gpuwarden.RoleAdmin)
	slack, teams, pager, flaky := newHookReceiver(t), newHookReceiver(t), newHookReceiver(t), newHookReceiver(t)
	flaky.answers = []int{503}
	hooks := []SummaryHook{
		summaryHook(t, "slack", slack.srv.URL+"/services/T0/B0/secret", notify.FormatSlack),
		summaryHook(t, "teams", teams.srv.URL+"/workflows/1/triggers/manual/paths/invoke", notify.FormatTeams),
		summaryHook(t, "pagerduty", pager.srv.URL+"/v2/enqueue?routing_key="+summaryRoutingKey, notify.FormatPagerDuty),
		summaryHook(t, "flaky", flaky.srv.URL+"/services/T1/B1/secret", notify.FormatSlack),
	}
	m := &MonthlySummaries{Server: f.srv, Hooks: hooks, Link: f.base}
	check := func(want int, wantErr bool) {
		t.Helper()
		n, err := m.Check(context.Background())
		if n != want || (err != nil) != wantErr {
			t.Fatalf("at %s: sent %d (err %v), want %d (an error: %v)", clock.Now().Format(time.RFC3339), n, err, want, wantErr)
		}
	}
	counts := func() []int {
		return []int{len(slack.got()), len(teams.got()), len(pager.got()), len(flaky.got())}
	}
	same := func(got []int, want ...int) {
		t.Helper()
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("receivers got %v requests, want %v", got, want)
			}
		}
	}

	check(0, false) // the 29th of November: nothing yet
	same(counts(), 0, 0, 0, 0)

	dec1 := time.Date(2026, 12, 1, 0, 5, 0, 0, time.UTC)
	clock.set(dec1)
	check(3, true) // the flaky receiver answered 503
	same(counts(), 1, 1, 1, 1)

	// The spend the summary says is the spend report's for November.
	resp, body := f.do("GET", "/api/v1/reports/spend?month=2026-11&by=project", "", nil, map[string]string{"Authorization": "Bearer " + admin})
	if resp.StatusCode != 200 {
		t.Fatalf("spend report: %d %s", resp.StatusCode, body)
	}
	var spend report.SpendReport
	if err := json.Unmarshal([]byte(body), &spend); err != nil {
		t.Fatal(err)
	}
	want := []string{"2026-11", "€210.00", "-$3.25", "€25.20", "€100.80", "€84.00",
		"€100.80 budget stop on ml-train-1", "ml-train-1 in project ml (ana): €4.20/h", f.base + "/savings?month=2026-11"}
	for _, tot := range spend.Totals {
		want = append(want, tot.Currency.Format(tot.Spent))
	}
	if len(spend.Totals) != 2 {
		t.Fatalf("November's spend has %d currencies, want 2", len(spend.Totals))
	}

	sl := slack.got()[0]
	notifytest.CheckSlack(t, []byte(sl))
	tm := notifytest.CheckTeams(t, []byte(teams.got()[0]))
	pd := notifytest.CheckPagerDuty(t, []byte(pager.got()[0]))
	if pd.EventAction != "trigger" || pd.DedupKey != "savings-summary-2026-11" || pd.RoutingKey != summaryRoutingKey ||
		pd.Payload == nil || pd.Payload.Severity != "info" || pd.Payload.Source != "gpuwarden server" {
		t.Errorf("pagerduty event %+v: want an info trigger from gpuwarden server keyed savings-summary-2026-11", pd)
	} else if got := pd.Payload.CustomDetails["saved_confirmed_EUR"]; got != "25.20" {
		t.Errorf("pagerduty custom_details.saved_confirmed_EUR = %q, want 25.20", got)
	}
	teamsText, _ := json.Marshal(tm)
	for name, text := range map[string]string{"slack": sl, "teams": string(teamsText), "pagerduty": pager.got()[0]} {
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("the %s summary does not say %q:\n%s", name, w, text)
			}
		}
	}

	// Checking again sends nothing, but retries the receiver that failed.
	clock.set(dec1.Add(10 * time.Minute))
	check(1, false)
	same(counts(), 1, 1, 1, 2)
	check(0, false)
	same(counts(), 1, 1, 1, 2)

	// A restarted server over the same ledger sends nothing.
	again := NewFleetServer(f.store, nil)
	again.Now = clock.Now
	m2 := &MonthlySummaries{Server: again, Hooks: hooks}
	if n, err := m2.Check(context.Background()); n != 0 || err != nil {
		t.Fatalf("after a restart: sent %d (err %v), want 0", n, err)
	}
	same(counts(), 1, 1, 1, 2)

	// A webhook added within the first week gets the month's summary; one
	// added later waits for the next month.
	late := newHookReceiver(t)
	m2.Hooks = append(m2.Hooks, summaryHook(t, "late", late.srv.URL+"/hook", notify.FormatSlack))
	clock.set(time.Date(2026, 12, 7, 23, 0, 0, 0, time.UTC))
	if n, err := m2.Check(context.Background()); n != 1 || err != nil {
		t.Fatalf("a webhook added on the 7th: sent %d (err %v), want 1", n, err)
	}
	clock.set(time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC))
	m2.Hooks = append(m2.Hooks, summaryHook(t, "later", late.srv.URL+"/hook2", notify.FormatSlack))
	if n, err := m2.Check(context.Background()); n != 0 || err != nil {
		t.Fatalf("a webhook added on the 8th: sent %d (err %v), want 0", n, err)
	}

	// The next 1st sends December's to every webhook.
	clock.set(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
	if n, err := m2.Check(context.Background()); n != 6 || err != nil {
		t.Fatalf("on 1 January: sent %d (err %v), want 6", n, err)
	}
	same(counts(), 2, 2, 2, 3)
	if last := slack.got()[1]; !strings.Contains(last, "2026-12") || strings.Contains(last, "€210.00") {
		t.Errorf("January's summary is not December's:\n%s", last)
	}
}
