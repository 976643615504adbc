package http

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/gpuwarden/gpuwarden"
)

// maxScreenshotBytes keeps the committed screenshots small enough to review.
const maxScreenshotBytes = 300 << 10

// TestFleetDashboardInABrowser signs in through the form in headless
// Chromium on a 1366×768 screen, visits every page of a small fleet, and
// checks that each shows its key text with no script error, no CSP
// violation and no request leaving the server; the overview must refresh
// itself in place. With -update it saves screenshots of the overview and
// the heatmap to testdata. GPUWARDEN_BROWSER_TESTS=1 (set by .ci/run) turns
// a missing Chromium into a failure rather than a skip.
func TestFleetDashboardInABrowser(t *testing.T) {
	browser := chromiumOrSkip(t)
	// One second, so that the test sees a refresh without waiting for one.
	defer func(s int) { fleetRefreshSeconds = s }(fleetRefreshSeconds)
	fleetRefreshSeconds = 1

	f := newDashFixture(t)
	seedFleet(t, f.store, fixtureNow)
	admin := f.token(gpuwarden.AllProjects, gpuwarden.RoleAdmin)

	ctx, problems := fleetBrowser(t, browser, f.base)

	// Signed out, the overview sends the browser to the form, and the
	// form back to the overview.
	if err := chromedp.Do(ctx, chromedp.Navigate(f.base+"/"), chromedp.WaitVisible("#token")); err != nil {
		t.Fatalf("load the login form in %s: %v", browser, err)
	}
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); loc != f.base+"/login?next=%2F" {
		t.Errorf("signed out, / went to %q, want the login form", loc)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys("#token", admin), chromedp.Click("form button[type=submit]"), chromedp.WaitVisible("#h-nodes")); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); loc != f.base+"/" {
		t.Errorf("after sign-in the browser is at %q, want the overview", loc)
	}
	cookie, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie`))
	if cookie != "" {
		t.Errorf("script reads the session cookie %q; it must be HttpOnly", cookie)
	}
	// What the browser keeps is a session ID, never the token.
	jar, err := chromedp.Run(ctx, func(ctx context.Context, tg *chromedp.Target) ([]*network.Cookie, error) {
		res, err := cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{})
		return res.Cookies, err
	})
	if err != nil {
		t.Fatalf("read the browser's cookies: %v", err)
	}
	var names []string
	for _, c := range jar {
		names = append(names, c.Name)
		if strings.Contains(c.Value, admin[len(admin)-64:]) {
			t.Errorf("the browser keeps the token's secret in cookie %s", c.Name)
		}
	}
	if len(jar) != 1 || jar[0].Name != sessionCookie || !jar[0].HTTPOnly || jar[0].SameSite != network.CookieSameSiteStrict {
		t.Errorf("the browser keeps cookies %v, want the HttpOnly, SameSite=Strict %s alone", names, sessionCookie)
	}

	pages := []struct {
		path, ready string
		want        []string
		shot        string
	}{
		{"/", "#h-nodes", []string{"train-1.ml.example", "idle-2.ml.example", "vision-x.example", "lost", "no owner", "€2,500.00", "orphans"}, "fleet-dashboard.png"},
		{"/nodes/ml-train-1", "#h-heat", []string{"train-1.ml.example", "p5.4xlarge", "Burn-in history", "PASS", "agent started"}, ""},
		{"/nodes/vision-x", "#h-events", []string{"Xid 79: GPU has fallen off the bus", "lost"}, ""},
		{"/projects/ml", "#h-owner", []string{"Project ml", "ana", "bo", "aws", "gcp"}, ""},
		{"/orphans", "#h-todo", []string{"vision-x.example", "no-owner", "heartbeat-lost", "What to do"}, ""},
		{"/scorecards", "#h-providers", []string{"train-1.ml.example", "lambda", "Xid 79"}, ""},
		{"/heatmap", "svg.hm", []string{"Utilisation heatmap", "train-1.ml.example gpu1", "no data"}, "fleet-heatmap.png"},
	}
	for _, p := range pages {
		if err := chromedp.Do(ctx, chromedp.Navigate(f.base+p.path), chromedp.WaitVisible(p.ready)); err != nil {
			t.Errorf("load %s: %v", p.path, err)
			continue
		}
		text, err := chromedp.Run(ctx, chromedp.Text("body"))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range p.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s does not show %q", p.path, w)
			}
		}
		// The layout must fit a laptop screen: nothing wider than the window.
		wide, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
		if err != nil {
			t.Fatal(err)
		}
		if wide > 1366 {
			t.Errorf("%s is %d px wide, more than a 1366 px screen", p.path, wide)
		}
		if p.shot != "" {
			shoot(t, ctx, p.shot)
		}
	}

	// Live refresh: a new heartbeat shows up on the overview without a
	// reload (the marker set on the window survives).
	if err := chromedp.Do(ctx, chromedp.Navigate(f.base+"/"), chromedp.WaitVisible("#h-nodes")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.gpuwardenMarker = 7`)); err != nil {
		t.Fatal(err)
	}
	hb := gpuwarden.Heartbeat{Node: "ml-idle-2", Time: fixtureNow, State: gpuwarden.NodeRunning, GPUUtil: 42}
	if err := f.store.RecordHeartbeats(context.Background(), fixtureNow, []gpuwarden.Heartbeat{hb}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('page').innerText.includes('42%') && window.gpuwardenMarker === 7`,
		chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		t.Errorf("the overview did not refresh in place to show the new heartbeat: %v", err)
	}
	if stale, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('stale').hidden`)); !stale {
		t.Error("the stale badge shows while the server answers")
	}

	// Signing out clears the cookie: the pages send the browser back to
	// the form.
	if err := chromedp.Do(ctx, chromedp.Click(".signout button"), chromedp.WaitVisible("#token"),
		chromedp.Navigate(f.base+"/orphans"), chromedp.WaitVisible("#token")); err != nil {
		t.Errorf("sign out: %v", err)
	}

	if p := problems(); len(p) > 0 {
		t.Errorf("the pages reported problems:\n%s", strings.Join(p, "\n"))
	}
}

// shoot takes a full-page PNG of what the browser shows; with -update it
// goes to testdata for people to look at, else to a temporary directory.
func shoot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	if len(png) > maxScreenshotBytes {
		t.Errorf("screenshot %s is %d KiB, over %d KiB", name, len(png)>>10, maxScreenshotBytes>>10)
	}
	dir := t.TempDir()
	if *update {
		dir = "testdata"
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Error(err)
	}
}
