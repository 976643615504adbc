package http

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// chromiumOrSkip finds Chromium on PATH. Without it the test skips, except
// under GPUWARDEN_BROWSER_TESTS=1 (set by .ci/run), where it fails.
func chromiumOrSkip(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("GPUWARDEN_BROWSER_TESTS") == "1" {
		t.Fatal("no Chromium on PATH, but GPUWARDEN_BROWSER_TESTS=1 asks for the browser tests")
	}
	t.Skip("no Chromium on PATH (apt-get install chromium)")
	return ""
}

// fleetBrowser starts headless Chromium on a 1366×768 screen for the fleet
// dashboard at base, for at most 90 s. It notes every script exception,
// console error or warning, error or security log entry (CSP violations
// arrive there) and request leaving base; problems returns them.
func fleetBrowser(t *testing.T, browser, base string) (ctx context.Context, problems func() []string) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1366, 768),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-first-run", true),
		chromedp.Flag("force-color-profile", "srgb"), chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancel)

	var mu sync.Mutex
	var noted []string
	note := func(format string, args ...any) {
		mu.Lock()
		noted = append(noted, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	if err := chromedp.Listen(ctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			note("exception: %s", e.ExceptionDetails.Text)
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning {
				note("console %s", e.Type)
			}
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError || e.Entry.Source == log.EntrySourceSecurity {
				note("log %s %s: %s (%s)", e.Entry.Source, e.Entry.Level, e.Entry.Text, e.Entry.URL)
			}
		case *network.EventRequestWillBeSent:
			if u := e.Request.URL; !strings.HasPrefix(u, base+"/") && !strings.HasPrefix(u, "data:") {
				note("request to %s leaves the server", u)
			}
		}
	}); err != nil {
		t.Fatalf("start %s: %v", browser, err)
	}
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), noted...)
	}
}
