package preempt_test

// The cases in this file are the ones the clouds' documentation describes
// and issue 28 found gpuwarden getting wrong: Azure events of sibling VMs,
// NotBefore in ISO 8601, approved events that stay listed, hardware-failure
// reboots, a slow first call, and GCP GPU VMs' 1-hour notice.

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/syncbuf"
	"github.com/gpuwarden/gpuwarden/preempt"
	"github.com/gpuwarden/gpuwarden/preempt/preempttest"
)

// TestAzureOnlyThisVMsEvents: Microsoft delivers the events of every VM in
// an availability set or scale-set placement group to all of them; only
// those whose Resources name this VM (compute.name) are notices here.
func TestAzureOnlyThisVMsEvents(t *testing.T) {
	notBefore := azureNow.Add(15 * time.Minute)
	nb := notBefore.Format(preempttest.AzureTimeLayout)
	tests := []struct {
		name      string
		resources []string
		listed    bool
	}{
		{"this VM alone", []string{preempttest.AzureVMName}, true},
		{"a sibling's", []string{"vm1"}, false},
		{"several siblings'", []string{"vm1", "vm2"}, false},
		{"this VM among others", []string{"vm1", preempttest.AzureVMName, "vm2"}, true},
		{"this VM, other case (Azure names ignore case)", []string{"FAKE-VM"}, true},
		{"no resources named", []string{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := preempttest.NewAzure()
			defer f.Close()
			id := f.Schedule(preempttest.AzureEvent{EventType: "Reboot", NotBefore: nb, Resources: tt.resources})
			src := preempt.NewAzure(nil, f.URL)
			src.Now = func() time.Time { return azureNow }
			got, err := src.Poll(testCtx(t))
			if err != nil {
				t.Fatalf("Poll: %v", err)
			}
			var want []gpuwarden.Notice
			if tt.listed {
				want = []gpuwarden.Notice{{Provider: "azure", Kind: gpuwarden.NoticeReboot, At: notBefore, Detail: "Reboot Scheduled", ID: id}}
			}
			equalNotices(t, got, want)
		})
	}
}

// TestAzureApprovesOnlyThisVMsEvents: approving lets an event go ahead for
// every VM it lists, so Approve refuses an event that does not name this VM,
// and one no longer listed, and sends nothing for them.
func TestAzureApprovesOnlyThisVMsEvents(t *testing.T) {
	nb := time.Now().Add(15 * time.Minute).UTC().Format(preempttest.AzureTimeLayout)
	tests := []struct {
		name      string
		resources []string
		remove    bool
		wantErr   []string // nil: approved
	}{
		{name: "this VM's", resources: []string{preempttest.AzureVMName}},
		{name: "shared with a sibling", resources: []string{"vm1", preempttest.AzureVMName}},
		{name: "a sibling's", resources: []string{"vm1"}, wantErr: []string{"azure", "vm1", "not this VM", preempttest.AzureVMName}},
		{name: "no longer listed", resources: []string{preempttest.AzureVMName}, remove: true, wantErr: []string{"azure", "not listed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := preempttest.NewAzure()
			defer f.Close()
			id := f.Schedule(preempttest.AzureEvent{EventType: "Reboot", NotBefore: nb, Resources: tt.resources})
			if tt.remove {
				f.Remove(id)
			}
			err := preempt.NewAzure(nil, f.URL).Approve(testCtx(t), id)
			var wantApproved []string
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Approve: %v", err)
				}
				wantApproved = []string{id}
			} else {
				wantErrMentions(t, err, tt.wantErr...)
			}
			if got := f.Approved(); !slices.Equal(got, wantApproved) {
				t.Errorf("the fake saw approvals %v, want %v", got, wantApproved)
			}
			if n := f.Rejected(); n != 0 {
				t.Errorf("fake refused %d requests", n)
			}
		})
	}
}

// TestAzureNotBeforeFormats: the documentation shows RFC 1123, Microsoft's
// mock server sends ISO 8601; both are read, and a time that is neither is
// due now rather than dropped.
func TestAzureNotBeforeFormats(t *testing.T) {
	at := time.Date(2016, 9, 19, 18, 29, 47, 0, time.UTC)
	tests := []struct {
		name, notBefore string
		want            time.Time
	}{
		{"RFC 1123, as documented", "Mon, 19 Sep 2016 18:29:47 GMT", at},
		{"ISO 8601 in UTC, as the mock sends", "2016-09-19T18:29:47Z", at},
		{"RFC 3339 with an offset", "2016-09-19T20:29:47+02:00", at},
		{"ISO 8601 with fractions", "2016-09-19T18:29:47.5000000Z", at.Add(500 * time.Millisecond)},
		{"ISO 8601 without a zone is UTC", "2016-09-19T18:29:47", at},
		{"RFC 1123 with a numeric zone", "Mon, 19 Sep 2016 18:29:47 +0000", at},
		{"unparseable: due now", "next Tuesday", azureNow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := preempttest.NewAzure()
			defer f.Close()
			id := f.Schedule(preempttest.AzureEvent{EventType: "Reboot", NotBefore: tt.notBefore})
			src := preempt.NewAzure(nil, f.URL)
			src.Now = func() time.Time { return azureNow }
			got, err := src.Poll(testCtx(t))
			if err != nil {
				t.Fatalf("Poll: %v", err)
			}
			equalNotices(t, got, []gpuwarden.Notice{{Provider: "azure", Kind: gpuwarden.NoticeReboot, At: tt.want, Detail: "Reboot Scheduled", ID: id}})
		})
	}
}

// TestAzureApprovedEventStaysListed follows an approved reboot the way
// `gpuwarden run --azure-approve` sees it: one source polls, another (the
// supervisor's) approves. Azure keeps the event listed, now Started, until
// it is done; it is over only when it leaves the list.
func TestAzureApprovedEventStaysListed(t *testing.T) {
	f := preempttest.NewAzure()
	defer f.Close()
	now := azureNow
	poller := preempt.NewAzure(nil, f.URL)
	poller.Now = func() time.Time { return now }
	notBefore := azureNow.Add(15 * time.Minute)
	id := f.Schedule(preempttest.AzureEvent{EventType: "Reboot", NotBefore: notBefore.Format(preempttest.AzureTimeLayout)})
	ctx := testCtx(t)

	steps := []struct {
		name string
		act  func()
		want []gpuwarden.Notice
	}{
		{"scheduled", func() {}, []gpuwarden.Notice{
			{Provider: "azure", Kind: gpuwarden.NoticeReboot, At: notBefore, Detail: "Reboot Scheduled", ID: id}}},
		{"approved: listed as Started, happening now", func() {
			if err := preempt.NewAzure(nil, f.URL).Approve(ctx, id); err != nil {
				t.Fatalf("Approve: %v", err)
			}
		}, []gpuwarden.Notice{
			{Provider: "azure", Kind: gpuwarden.NoticeReboot, At: azureNow.Add(time.Minute), Detail: "Reboot Started", ID: id}}},
		{"still Started: same At", func() {}, []gpuwarden.Notice{
			{Provider: "azure", Kind: gpuwarden.NoticeReboot, At: azureNow.Add(time.Minute), Detail: "Reboot Started", ID: id}}},
		{"done: over once", func() { f.Remove(id) }, []gpuwarden.Notice{
			{Provider: "azure", Kind: gpuwarden.NoticeReboot, At: azureNow.Add(time.Minute), Canceled: true,
				Detail: "Reboot Started (done: Scheduled Events no longer lists it under way)", ID: id}}},
		{"then quiet", func() {}, nil},
	}
	for _, s := range steps {
		s.act()
		got, err := poller.Poll(ctx)
		if err != nil {
			t.Fatalf("%s: Poll: %v", s.name, err)
		}
		t.Logf("step %s", s.name)
		equalNotices(t, got, s.want)
		now = now.Add(time.Minute)
	}
	if got, want := f.Approved(), []string{id}; !slices.Equal(got, want) {
		t.Errorf("approved %v, want %v", got, want)
	}
}

// TestAzureHardwareFailureSkipsScheduled: a reboot after a host failure is
// listed Started with a blank NotBefore and never was Scheduled; it is due
// at the poll that first saw it.
func TestAzureHardwareFailureSkipsScheduled(t *testing.T) {
	f := preempttest.NewAzure()
	defer f.Close()
	id := f.HardwareFailure()
	src := preempt.NewAzure(nil, f.URL)
	src.Now = func() time.Time { return azureNow }
	got, err := src.Poll(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	equalNotices(t, got, []gpuwarden.Notice{{Provider: "azure", Kind: gpuwarden.NoticeReboot, At: azureNow, ID: id,
		Detail: "Reboot Started: Virtual machine is being restarted because of a host hardware failure."}})
}

// TestGCPGPUMaintenanceNotice: Google gives a VM with GPUs a 1-hour notice of
// TERMINATE_ON_HOST_MAINTENANCE and other VMs 60 s (the "Handle GPU host
// maintenance events" page), so At is the first sighting plus the notice of
// this VM's kind. The machine type tells accelerator-optimized VMs (a2, a3,
// g2 ...); an N1 VM with attached GPUs is told by the GPUs on the box.
func TestGCPGPUMaintenanceNotice(t *testing.T) {
	const terminate = "TERMINATE_ON_HOST_MAINTENANCE"
	hour := gcpNow.Add(time.Hour)
	minute := gcpNow.Add(60 * time.Second)
	tests := []struct {
		name        string
		machineType string
		onHost      string
		value       string
		want        gpuwarden.Notice
	}{
		{"a3 GPU VM", "a3-highgpu-8g", "TERMINATE", terminate,
			gpuwarden.Notice{Kind: gpuwarden.NoticeMaintenance, At: hour, Detail: terminate + " (a GPU VM: 1-hour notice)"}},
		{"a2 GPU VM", "a2-ultragpu-1g", "TERMINATE", terminate,
			gpuwarden.Notice{Kind: gpuwarden.NoticeMaintenance, At: hour, Detail: terminate + " (a GPU VM: 1-hour notice)"}},
		{"g2 GPU VM", "g2-standard-4", "TERMINATE", terminate,
			gpuwarden.Notice{Kind: gpuwarden.NoticeMaintenance, At: hour, Detail: terminate + " (a GPU VM: 1-hour notice)"}},
		{"a CPU VM set to terminate", "n2-standard-8", "TERMINATE", terminate,
			gpuwarden.Notice{Kind: gpuwarden.NoticeMaintenance, At: minute, Detail: terminate}},
		{"a CPU VM that migrates: insurance", "n2-standard-8", "MIGRATE", "MIGRATE_ON_HOST_MAINTENANCE",
			gpuwarden.Notice{Kind: gpuwarden.NoticeMigration, At: minute, Detail: "MIGRATE_ON_HOST_MAINTENANCE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := preempttest.NewGCP()
			defer f.Close()
			f.SetScheduling(tt.machineType, tt.onHost)
			src := preempt.NewGCP(nil, f.URL)
			src.Now = func() time.Time { return gcpNow }
			if got, err := src.Poll(testCtx(t)); err != nil || len(got) != 0 {
				t.Fatalf("before the notice: %+v, %v; want none", got, err)
			}
			f.Maintenance(tt.value)
			got, err := src.Poll(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			want.Provider, want.ID = "gcp", "gcp-maintenance-1"
			equalNotices(t, got, []gpuwarden.Notice{want})
		})
	}
}

// TestGCPGPUAttachedToN1: the metadata server lists no accelerators, so an
// N1 VM with attached GPUs is told by the GPUs on the box; the machine type
// and policy are read once.
func TestGCPGPUAttachedToN1(t *testing.T) {
	tests := []struct {
		name      string
		onHost    string
		localGPUs bool
		want      time.Time
	}{
		{"GPUs on the box", "TERMINATE", true, gcpNow.Add(time.Hour)},
		{"no GPUs on the box", "TERMINATE", false, gcpNow.Add(time.Minute)},
		{"GPUs but set to migrate (not a GPU VM's policy)", "MIGRATE", true, gcpNow.Add(time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := preempttest.NewGCP()
			defer f.Close()
			f.SetScheduling("n1-standard-8", tt.onHost)
			src := preempt.NewGCP(nil, f.URL)
			src.Now = func() time.Time { return gcpNow }
			src.LocalGPUs = func() bool { return tt.localGPUs }
			for range 3 {
				if _, err := src.Poll(testCtx(t)); err != nil {
					t.Fatal(err)
				}
			}
			f.Maintenance("TERMINATE_ON_HOST_MAINTENANCE")
			got, err := src.Poll(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || !got[0].At.Equal(tt.want) {
				t.Fatalf("got %+v, want one notice at %v", got, tt.want)
			}
			if n := f.MachineTypeReads(); n != 1 {
				t.Errorf("machine-type read %d times over 4 polls, want once", n)
			}
		})
	}
}

// TestHealth walks a source's polls on a fixed clock and checks the level
// of each line and whether the source is up.
func TestHealth(t *testing.T) {
	boom := errors.New("connection refused")
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	type step struct {
		at    time.Duration // after the first poll
		err   error
		level string // "" for no line
		up    bool
	}
	tests := []struct {
		name   string
		warmUp time.Duration
		steps  []step
	}{
		{"azure: quiet inside the 2-minute warm-up, then a warning", preempt.AzureWarmUp, []step{
			{0, boom, "DEBUG", false},
			{time.Minute, boom, "DEBUG", false},
			{2*time.Minute - time.Second, boom, "DEBUG", false},
			{2 * time.Minute, boom, "WARN", false},
			{2*time.Minute + 5*time.Second, boom, "DEBUG", false},
			{3 * time.Minute, boom, "WARN", false},
			{3*time.Minute + time.Second, nil, "INFO", true},
			{3*time.Minute + 2*time.Second, nil, "", true},
		}},
		{"azure: answers inside the warm-up, no warning", preempt.AzureWarmUp, []step{
			{0, boom, "DEBUG", false},
			{90 * time.Second, nil, "", true},
			{91 * time.Second, nil, "", true},
		}},
		{"no warm-up: the first failure warns", 0, []step{
			{0, nil, "", true},
			{time.Second, boom, "WARN", false},
			{2 * time.Second, boom, "DEBUG", false},
			{3 * time.Second, nil, "INFO", true},
			{4 * time.Second, boom, "WARN", false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			h := preempt.NewHealth(fakeSource{}, log)
			h.WarmUp = tt.warmUp
			var changes []bool
			h.OnChange = func(up bool) { changes = append(changes, up) }
			var wantChanges []bool
			for i, s := range tt.steps {
				h.Now = func() time.Time { return t0.Add(s.at) }
				buf.Reset()
				h.Observe(s.err)
				line := buf.String()
				level := ""
				if m := regexp.MustCompile(`level=(\w+)`).FindStringSubmatch(line); m != nil {
					level = m[1]
				}
				if level != s.level {
					t.Errorf("step %d at %v: level %q, want %q (%s)", i, s.at, level, s.level, strings.TrimSpace(line))
				}
				if level != "" && !strings.Contains(line, "cloud=fake") {
					t.Errorf("step %d: line %q does not name the cloud", i, line)
				}
				if up, known := h.Up(); up != s.up || !known {
					t.Errorf("step %d: up %v known %v, want up %v", i, up, known, s.up)
				}
				if i == 0 || tt.steps[i-1].up != s.up {
					wantChanges = append(wantChanges, s.up)
				}
			}
			if !slices.Equal(changes, wantChanges) {
				t.Errorf("OnChange heard %v, want %v", changes, wantChanges)
			}
		})
	}
}

// fakeSource is a Source with no warm-up, named "fake".
type fakeSource struct{}

func (fakeSource) Provider() string { return "fake" }
func (fakeSource) Poll(context.Context) ([]gpuwarden.Notice, error) {
	return nil, nil
}

// TestAzureSlowFirstCall: Azure's first Scheduled Events call hangs while it
// enables the service; Watch's polls time out meanwhile, the source is down
// without a warning (inside the documented warm-up), and the preemption
// listed all along is delivered once the service answers.
func TestAzureSlowFirstCall(t *testing.T) {
	f := preempttest.NewAzure()
	defer f.Close()
	f.Enabling(2500 * time.Millisecond)
	id := f.Preempt(time.Now().Add(30 * time.Second))
	src := preempt.NewAzure(nil, f.URL)
	var buf syncbuf.Buffer
	h := preempt.NewHealth(src, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	var mu sync.Mutex
	var ups []bool
	h.OnChange = func(up bool) { mu.Lock(); ups = append(ups, up); mu.Unlock() }

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan gpuwarden.Notice, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		preempt.Watch(ctx, src, 100*time.Millisecond, func(n gpuwarden.Notice) {
			select {
			case got <- n:
			default:
			}
		}, h.Observe)
	}()
	select {
	case n := <-got:
		if n.ID != id || n.Kind != gpuwarden.NoticePreemption {
			t.Errorf("delivered %+v, want the preemption %s", n, id)
		}
	case <-ctx.Done():
		t.Fatal("no notice once Scheduled Events answered")
	}
	// Watch hears of the poll that delivered the notice just after the
	// delivery; a cancel in between would skip it (a stopping agent
	// records no health), so wait for it.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(ups)
		mu.Unlock()
		if n >= 2 {
			break
		}
	}
	cancel()
	<-done
	if n := f.Calls(); n < 2 {
		t.Errorf("%d Scheduled Events calls, want the slow first and the ones after it", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(ups, []bool{false, true}) {
		t.Errorf("up went %v, want [false true]: down while Azure enables the service, then up", ups)
	}
	if log := buf.String(); strings.Contains(log, "level=WARN") || !strings.Contains(log, "warm-up") {
		t.Errorf("log %q: want debug lines naming the warm-up and no warning", log)
	}
}

// TestAzureUnparseableNotBeforeWarns: an event acted on as due now because
// its time does not parse is said at warning level, once per event.
func TestAzureUnparseableNotBeforeWarns(t *testing.T) {
	f := preempttest.NewAzure()
	defer f.Close()
	id := f.Schedule(preempttest.AzureEvent{EventType: "Redeploy", NotBefore: "tomorrow-ish"})
	src := preempt.NewAzure(nil, f.URL)
	var buf syncbuf.Buffer
	preempt.SetLogger(src, slog.New(slog.NewTextHandler(&buf, nil)))
	for range 3 {
		if _, err := src.Poll(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	log := buf.String()
	if got := strings.Count(log, "level=WARN"); got != 1 {
		t.Errorf("%d warnings in %q, want 1", got, log)
	}
	for _, want := range []string{id, "tomorrow-ish", "due now"} {
		if !strings.Contains(log, want) {
			t.Errorf("warning %q does not mention %q", log, want)
		}
	}
}

// TestAzureCompletedIsOver: Microsoft's mock server lists an event as
// Completed at the end of its walk; that is the event being over, once,
// and a Completed event never seen active is history, not news.
func TestAzureCompletedIsOver(t *testing.T) {
	f := preempttest.NewAzure()
	defer f.Close()
	src := preempt.NewAzure(nil, f.URL)
	src.Now = func() time.Time { return azureNow }
	notBefore := azureNow.Add(10 * time.Minute)
	id := f.Schedule(preempttest.AzureEvent{EventType: "Freeze", NotBefore: notBefore.Format(preempttest.AzureTimeLayout)})
	old := f.Schedule(preempttest.AzureEvent{EventType: "Reboot", EventStatus: "Completed"})
	ctx := testCtx(t)
	steps := []struct {
		name string
		act  func()
		want []gpuwarden.Notice
	}{
		{"scheduled", func() {}, []gpuwarden.Notice{{Provider: "azure", Kind: gpuwarden.NoticeMigration, At: notBefore, Detail: "Freeze Scheduled", ID: id}}},
		{"started", func() { f.Start(id) }, []gpuwarden.Notice{{Provider: "azure", Kind: gpuwarden.NoticeMigration, At: azureNow, Detail: "Freeze Started", ID: id}}},
		{"completed", func() { f.Complete(id) }, []gpuwarden.Notice{{Provider: "azure", Kind: gpuwarden.NoticeMigration, At: azureNow, Canceled: true,
			Detail: "Freeze Started (done: Scheduled Events no longer lists it under way)", ID: id}}},
		{"still listed Completed: quiet", func() {}, nil},
		{"dropped: quiet", func() { f.Remove(id); f.Remove(old) }, nil},
	}
	for _, s := range steps {
		s.act()
		got, err := src.Poll(ctx)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		t.Logf("step %s", s.name)
		equalNotices(t, got, s.want)
	}
}
