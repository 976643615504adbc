package http

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/report"
)

// TestFleetSavingsInABrowser signs in through the form in headless
// Chromium on a 1366×768 screen and checks the "saved this month" tile
// against GET /api/v1/savings: the tile's total is the API's total, the
// tile drills down to a page that lists every event the API lists (with
// "not saved: <why>" where a stop left the bill running), a per-kind row
// drills down to that kind's events, and no page has a script error, a
// CSP violation or a request leaving the server. With -update it saves the
// drill-down as docs/fleet-savings.png.
func TestFleetSavingsInABrowser(t *testing.T) {
	browser := chromiumOrSkip(t)
	f := newDashFixtureAt(t, func() time.Time { return fixtureNow })
	seedFleet(t, f.store, fixtureNow)
	seedSavings(t, f.store)
	admin := f.token(gpuwarden.AllProjects, gpuwarden.RoleAdmin)

	// What the API says, read as a script would.
	resp, body := f.do("GET", "/api/v1/savings", "", nil, map[string]string{"Authorization": "Bearer " + admin})
	if resp.StatusCode != 200 {
		t.Fatalf("GET /api/v1/savings: %d %s", resp.StatusCode, body)
	}
	var api report.SavingsReport
	if err := json.Unmarshal([]byte(body), &api); err != nil {
		t.Fatal(err)
	}
	var totals []string
	for _, x := range api.Totals {
		totals = append(totals, x.Currency.Format(x.Total))
	}
	apiTotal := strings.Join(totals, " + ")
	if apiTotal != "€210.00 + -$3.25" {
		t.Fatalf("the API's total is %q, want the hand-computed €210.00 + -$3.25", apiTotal)
	}

	ctx, problems := fleetBrowser(t, browser, f.base)

	if err := chromedp.Do(ctx, chromedp.Navigate(f.base+"/"), chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", admin), chromedp.Click("form button[type=submit]"), chromedp.WaitVisible("#saved-tile")); err != nil {
		t.Fatalf("sign in and load the overview: %v", err)
	}
	tile, err := chromedp.Run(ctx, chromedp.Text("#saved-total"))
	if err != nil {
		t.Fatal(err)
	}
	if tile != apiTotal {
		t.Errorf("the tile says %q saved this month, the API %q", tile, apiTotal)
	}
	// The tile sits beside "burning now", in the same row of stats.
	beside, err := chromedp.Run(ctx, chromedp.Evaluate[bool](
		`document.getElementById('saved-tile').parentElement === [...document.querySelectorAll('.stats .stat')].find(e => e.innerText.includes('burning now')).parentElement`))
	if err != nil || !beside {
		t.Errorf("the tile is not beside \"burning now\" (%v)", err)
	}

	// The tile drills down to every event of the month.
	if err := chromedp.Do(ctx, chromedp.Click("#saved-tile"), chromedp.WaitVisible("table.saving-events")); err != nil {
		t.Fatalf("drill down from the tile: %v", err)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('tr.saving')].map(r => r.dataset.id)`))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range api.Events {
		ids = append(ids, e.ID)
	}
	if strings.Join(rows, " ") != strings.Join(ids, " ") {
		t.Errorf("the drill-down lists events %v, the API %v", rows, ids)
	}
	pageTotal, _ := chromedp.Run(ctx, chromedp.Text("#savings-total"))
	text, _ := chromedp.Run(ctx, chromedp.Text("body"))
	if pageTotal != apiTotal {
		t.Errorf("the drill-down's total is %q, the API's %q", pageTotal, apiTotal)
	}
	for _, w := range []string{"not saved: provider kept billing: powered-off-still-billing", "12 h × €2.10/h", "box rate",
		"provider answer: stopped (gcp-stop operation op-1)", "a loss", "attributed"} {
		if !strings.Contains(text, w) {
			t.Errorf("the drill-down does not show %q", w)
		}
	}
	if wide, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`)); wide > 1366 {
		t.Errorf("the drill-down is %d px wide, more than a 1366 px screen", wide)
	}
	shootTo(t, ctx, filepath.Join("..", "docs"), "fleet-savings.png")

	// A per-kind row of the overview drills down to that kind alone.
	if err := chromedp.Do(ctx, chromedp.Navigate(f.base+"/"), chromedp.WaitVisible("#h-saved"),
		chromedp.Click(`table.saved a[href*="kind=budget-stop"]`), chromedp.WaitVisible("table.saving-events")); err != nil {
		t.Fatalf("drill down to a kind: %v", err)
	}
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('tr.saving').length`)); n != 1 {
		t.Errorf("the budget-stop drill-down lists %d events, want 1", n)
	}

	if p := problems(); len(p) > 0 {
		t.Errorf("the pages reported problems:\n%s", strings.Join(p, "\n"))
	}
}

// shootTo is shoot with a directory of its own: with -update the PNG goes
// to dir for people to look at, else to a temporary directory.
func shootTo(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	if len(png) > maxScreenshotBytes {
		t.Errorf("screenshot %s is %d KiB, over %d KiB", name, len(png)>>10, maxScreenshotBytes>>10)
	}
	if !*update {
		dir = t.TempDir()
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Error(err)
	}
}
