package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden/preempt/preempttest"
)

// TestRunAzureApprovesOnlyItsOwnEvent drives `run --azure-approve` against
// the Azure fake (written from Microsoft's Scheduled Events docs) with a
// sibling VM's preemption listed beside this VM's reboot (issue 28 item 1):
// the sibling's event is neither acted on nor approved; this VM's reboot
// stops the job, is approved after the checkpoint, stays listed as Started
// while the job waits, and once Azure drops it (done) the job restarts here
// and finishes.
func TestRunAzureApprovesOnlyItsOwnEvent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := preempttest.NewAzure()
	defer f.Close()
	wait, errb, _ := startRunWatched(t, dir, nil, runArgs(dir, "--cloud", "azure", "--azure-metadata", f.URL, "--azure-approve", "--grace", "5s",
		"--", trainer, "--steps", "150", "--every", "20", "--step-time", "20ms")...)
	waitFor(t, errb, "watching for cloud notices", 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	// The sibling's time in the documented RFC 1123, this VM's in the ISO
	// 8601 that Microsoft's mock server sends (item 2): both must be read.
	soon := time.Now().Add(20 * time.Second).UTC()
	sibling := f.Schedule(preempttest.AzureEvent{EventType: "Preempt", NotBefore: soon.Format(preempttest.AzureTimeLayout), Resources: []string{"vm1"},
		Description: "Virtual machine is being preempted."})
	own := f.Schedule(preempttest.AzureEvent{EventType: "Reboot", NotBefore: soon.Format(preempttest.AzureISOLayout),
		Description: "Virtual machine is going to be restarted as requested by authorized user."})

	deadline := time.Now().Add(15 * time.Second)
	for len(f.Approved()) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := f.Approved(); !slices.Equal(got, []string{own}) {
		t.Fatalf("approved %v, want only this VM's reboot %s (the sibling's is %s)\n%s", got, own, sibling, errb.String())
	}
	// Started, still listed: the job must wait, not restart.
	time.Sleep(1500 * time.Millisecond)
	if strings.Contains(errb.String(), "over before its stop") || strings.Count(errb.String(), "job started") > 1 {
		t.Fatalf("the job was let go while the approved reboot was still listed:\n%s", errb.String())
	}
	f.Remove(own) // done
	r := wait(30 * time.Second)
	rep := decodeReport(t, r.stdout)
	if r.code != 0 || rep.Result != "ok" || len(rep.Attempts) != 2 {
		t.Fatalf("exit %d result %s attempts %d, want 0, ok and 2 (stopped for the reboot, restarted once it was done)\n%s",
			r.code, rep.Result, len(rep.Attempts), r.stderr)
	}
	if len(rep.Notices) != 1 || !strings.Contains(rep.Notices[0].Detail, "Reboot") {
		t.Errorf("notices %+v, want only this VM's reboot %s", rep.Notices, own)
	}
	if strings.Contains(r.stderr, sibling) {
		t.Errorf("the sibling's event %s appears in the log:\n%s", sibling, r.stderr)
	}
}

// TestRunGCPGPUMaintenanceIsScheduled: on a GPU VM Google announces
// TERMINATE_ON_HOST_MAINTENANCE an hour ahead (issue 28 item 4), so `run`
// plans the checkpoint and stop for that hour less --maintenance-lead and
// the job keeps its GPUs busy meanwhile, instead of stopping at once.
func TestRunGCPGPUMaintenanceIsScheduled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := preempttest.NewGCP()
	defer f.Close()
	f.GPUVM("a3-highgpu-8g")
	wait, errb, _ := startRunWatched(t, dir, nil, runArgs(dir, "--cloud", "gcp", "--gcp-metadata", f.URL, "--grace", "5s",
		"--", trainer, "--steps", "150", "--every", "20", "--step-time", "20ms")...)
	waitFor(t, errb, "watching for cloud notices", 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	f.Maintenance("TERMINATE_ON_HOST_MAINTENANCE")
	r := wait(20 * time.Second)
	rep := decodeReport(t, r.stdout)
	if r.code != 0 || rep.Result != "ok" || len(rep.Attempts) != 1 {
		t.Fatalf("exit %d result %s attempts %d, want 0, ok and 1: the job runs on through the hour's notice\n%s",
			r.code, rep.Result, len(rep.Attempts), r.stderr)
	}
	if len(rep.Notices) != 1 || rep.Notices[0].Action != "scheduled" || !strings.Contains(rep.Notices[0].Detail, "1-hour notice") {
		t.Errorf("notices %+v, want one maintenance scheduled for later (GPU VM: 1-hour notice)", rep.Notices)
	}
}
