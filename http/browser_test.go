package http

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// TestDashboardInABrowser loads the dashboard in headless Chromium: the page
// must render the GPUs and the charts, run its refresh script without a
// Content-Security-Policy or script error, and keep the node name escaped.
// .ci/run installs Chromium and sets GPUWARDEN_BROWSER_TESTS=1, so in CI a
// missing browser fails the test instead of skipping it.
func TestDashboardInABrowser(t *testing.T) {
	browser := chromiumOrSkip(t)
	st := fixtureStatus()
	st.Node = `gpu-box-<script>alert(1)</script>`
	_, url := startServer(t, newFakeAgent(st))

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-first-run", true), chromedp.UserDataDir(t.TempDir()))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	defer cancel()

	var mu sync.Mutex
	var problems []string
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			problems = append(problems, "exception: "+e.ExceptionDetails.Text)
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				problems = append(problems, "console error")
			}
		}
	}); err != nil {
		t.Fatalf("start %s: %v", browser, err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(url+"/"), chromedp.WaitVisible("#h-gpus")); err != nil {
		t.Fatalf("load the dashboard in %s: %v", browser, err)
	}
	title, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	node, err := chromedp.Run(ctx, chromedp.Text(".node"))
	if err != nil {
		t.Fatal(err)
	}
	gpuRows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('table tbody tr').length`))
	if err != nil {
		t.Fatal(err)
	}
	polylines, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('svg polyline').length`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(title, "gpuwarden") {
		t.Errorf("title %q", title)
	}
	if node != st.Node {
		t.Errorf("node shown as %q, want the literal %q (escaped, not run)", node, st.Node)
	}
	if gpuRows < len(st.GPUs) {
		t.Errorf("%d table rows, want at least one per GPU (%d)", gpuRows, len(st.GPUs))
	}
	if polylines == 0 {
		t.Error("no chart lines (svg polyline) on the page")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("the page reported problems: %v", problems)
	}
}
