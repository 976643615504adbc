package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden/notify/notifytest"
)

// TestServerSendsTheMonthlySummaryOnce runs the real server on the 1st
// (--now) with Slack, Teams and PagerDuty receivers on loopback: each gets
// last month's summary in its format; a restart on the same data dir sends
// them nothing more, while a webhook added at the restart gets its copy.
func TestServerSendsTheMonthlySummaryOnce(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "server.db")
	const key = "R0UT1NGKEY0123456789abcdefABCDEF"
	slack, slackSrv := newHookReceiver(t)
	teams, teamsSrv := newHookReceiver(t)
	pager, pagerSrv := newHookReceiver(t)
	hooks := []string{"--now", "2026-12-01",
		"--webhook", slackSrv.URL + "/services/T0/B0/secret",
		"--webhook", "teams+" + teamsSrv.URL + "/workflows/1/triggers/manual/paths/invoke",
		"--webhook", "pagerduty+" + pagerSrv.URL + "/v2/enqueue?routing_key=" + key}
	s := startServer(t, dir, db, hooks...)
	one := func(bs [][]byte) bool { return len(bs) >= 1 }
	sl := slack.waitFor(t, s.upProc, 20*time.Second, one)[0]
	tm := teams.waitFor(t, s.upProc, 20*time.Second, one)[0]
	pd := pager.waitFor(t, s.upProc, 20*time.Second, one)[0]
	notifytest.CheckSlack(t, sl)
	notifytest.CheckTeams(t, tm)
	ev := notifytest.CheckPagerDuty(t, pd)
	if ev.DedupKey != "savings-summary-2026-11" || ev.EventAction != "trigger" {
		t.Errorf("pagerduty: %s with dedup_key %q, want a trigger keyed savings-summary-2026-11", ev.EventAction, ev.DedupKey)
	}
	for name, b := range map[string][]byte{"slack": sl, "teams": tm, "pagerduty": pd} {
		for _, w := range []string{"2026-11", "Spent", "Biggest waste still running"} {
			if !strings.Contains(strings.ToLower(string(b)), strings.ToLower(w)) {
				t.Errorf("the %s summary does not say %q:\n%s", name, w, b)
			}
		}
	}
	s.kill(syscall.SIGTERM)
	s.wait(t, "fleet server stopped", 10*time.Second)

	// Restarted with one more webhook: only that one gets November's.
	late, lateSrv := newHookReceiver(t)
	s2 := startServer(t, dir, db, append(hooks, "--webhook", lateSrv.URL+"/hooks/late")...)
	late.waitFor(t, s2.upProc, 20*time.Second, one)
	for name, rec := range map[string]*hookReceiver{"slack": slack, "teams": teams, "pagerduty": pager} {
		rec.mu.Lock()
		n := len(rec.bodies)
		rec.mu.Unlock()
		if n != 1 {
			t.Errorf("after a restart the %s receiver has %d summaries, want 1", name, n)
		}
	}
}
