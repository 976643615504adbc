package supervise

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseOwnCgroup(t *testing.T) {
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{"hybrid", "9:name=systemd:/\n4:memory:/x\n0::/\n", "/", false},
		{"pure v2 service", "0::/system.slice/gpuwarden.service\n", "/system.slice/gpuwarden.service", false},
		{"v1 only", "4:memory:/x\n1:cpu:/\n", "", true},
		{"removed cgroup", "0::/gone (deleted)\n", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseOwnCgroup([]byte(tt.in))
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("parseOwnCgroup = %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestCgroup2Path(t *testing.T) {
	const (
		hybrid   = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
		v1       = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
		pure     = "29 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
		subtree  = "700 600 0:26 /kubepods/pod1 /sys/fs/cgroup ro,nosuid - cgroup2 cgroup ro\n"
		escaped  = "50 23 0:26 / /mnt/cg\\040two rw - cgroup2 cgroup2 rw\n"
		tmpfsTop = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
	)
	tests := []struct {
		name, mountinfo, own, want string
		wantErr                    bool
	}{
		{"hybrid root", tmpfsTop + v1 + hybrid, "/", "/sys/fs/cgroup/unified", false},
		{"pure v2 service", pure, "/system.slice/x.service", "/sys/fs/cgroup/system.slice/x.service", false},
		{"subtree mount", subtree, "/kubepods/pod1/c1", "/sys/fs/cgroup/c1", false},
		{"subtree mount, cgroup outside", subtree, "/system.slice", "", true},
		{"escaped mount point", escaped, "/a", "/mnt/cg two/a", false},
		{"no cgroup2", tmpfsTop + v1, "/", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := cgroup2Path(strings.NewReader(tt.mountinfo), tt.own)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("cgroup2Path = %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestIsJobCgroup(t *testing.T) {
	tests := []struct {
		dir  string
		want bool
	}{
		{"/sys/fs/cgroup/unified/gpuwarden-job-0123", true},
		{"/sys/fs/cgroup/system.slice", false},
		{"/sys/fs/cgroup/unified/gpuwarden-job-1/../../system.slice", false},
		{"gpuwarden-job-1", false},
		{"/sys/fs/cgroup/gpuwarden-job-1\n/x", false},
	}
	for _, tt := range tests {
		if got := isJobCgroup(tt.dir); got != tt.want {
			t.Errorf("isJobCgroup(%q) = %v, want %v", tt.dir, got, tt.want)
		}
	}
}

func TestWithJobID(t *testing.T) {
	got := withJobID([]string{"A=1", EnvJobID + "=outer", "B=2"}, "inner")
	want := []string{"A=1", "B=2", EnvJobID + "=inner"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("withJobID = %q, want %q", got, want)
	}
	var n int
	for _, kv := range withJobID(nil, "x") {
		if strings.HasPrefix(kv, EnvJobID+"=") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("nil env: %d %s entries, want 1", n, EnvJobID)
	}
}

func TestParseProcStat(t *testing.T) {
	tail := " 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 4242 0 0"
	tests := []struct {
		name, in string
		want     procInfo
		ok       bool
	}{
		{"plain", "12 (sleep) S 1 12 12" + tail, procInfo{'S', 1, 12, 4242}, true},
		{"name with spaces and parens", "13 (a (b) c) Z 5 7 7" + tail, procInfo{'Z', 5, 7, 4242}, true},
		{"truncated", "14 (x) S 1 14", procInfo{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseProcStat(tt.in)
			if got != tt.want || ok != tt.ok {
				t.Errorf("parseProcStat = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// A job whose grandchild left its group and session (setsid) still ends
// whole: by its cgroup where the machine allows one, by its job ID without
// one, and a grandchild that also scrubbed its environment by the cgroup.
// A leader moved into the cgroup after its start may fork before the move
// takes effect (it waits for an RCU grace period), so that child is found
// by its job ID.
func TestSetsidGrandchildEndsWithJob(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		opts  startOptions
		scrub bool
		// wantIsolation is the start of Isolation(); for a cgroup, the
		// cgroup's directory follows it.
		wantIsolation string
	}{
		{"cgroup", startOptions{}, false, "cgroup "},
		{"group and job id only", startOptions{noCgroup: true}, false, "process group (cgroup: disabled)"},
		{"cgroup, scrubbed environment", startOptions{}, true, "cgroup "},
		{"cgroup joined after start", startOptions{noCloneInto: true}, false, "cgroup "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pidfile := filepath.Join(t.TempDir(), "gc.pid")
			kv := []string{"H_SETSID_PIDFILE=" + pidfile, "H_THEN=exit"}
			if tt.scrub {
				kv = append(kv, "H_SCRUB=1")
			}
			env, tag := helperEnvFor(t, "setsid-parent", kv...)
			p, err := startJob(context.Background(), []string{os.Args[0]}, append(os.Environ(), env...), "", nil, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("isolation: %s", p.Isolation())
			gc := readPid(t, pidfile, 10*time.Second)
			if !tt.opts.noCgroup && p.Cgroup() == "" {
				// This machine allows no cgroup: the fallback is tested by
				// the case without, and a scrubbed grandchild cannot be found.
				_ = syscall.Kill(gc, syscall.SIGKILL)
				p.Wait()
				waitDead(gc, 5*time.Second)
				t.Skipf("no cgroup here: %s", p.Isolation())
			}
			want := tt.wantIsolation
			if p.Cgroup() != "" {
				want += p.Cgroup()
			}
			if got := p.Isolation(); !strings.HasPrefix(got, want) {
				t.Errorf("Isolation() = %q, want it to start with %q", got, want)
			}
			if got, want := strings.Contains(p.Isolation(), "moved in after its start"), tt.opts.noCloneInto; got != want {
				t.Errorf("Isolation() = %q; says the leader was moved: %v, want %v", p.Isolation(), got, want)
			}
			if ex := p.Wait(); !ex.OK() {
				t.Errorf("exit = %v, want 0", ex)
			}
			if alive(gc) {
				t.Errorf("setsid grandchild %d survived the job", gc)
				_ = syscall.Kill(gc, syscall.SIGKILL)
				waitDead(gc, 5*time.Second)
			}
			assertNoLeftovers(t, tag)
			if cg := p.Cgroup(); cg != "" {
				if _, err := os.Stat(cg); !os.IsNotExist(err) {
					t.Errorf("cgroup %s left behind (stat: %v)", cg, err)
				}
			}
		})
	}
}

// KillGroup reaches the processes that left the group too, and the leader
// runs in the job's cgroup, started there or moved in.
func TestKillGroupReachesSetsid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts startOptions
	}{
		{"cgroup", startOptions{}},
		{"cgroup joined after start", startOptions{noCloneInto: true}},
		{"no cgroup", startOptions{noCgroup: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pidfile := filepath.Join(t.TempDir(), "gc.pid")
			env, tag := helperEnvFor(t, "setsid-parent", "H_SETSID_PIDFILE="+pidfile)
			p, err := startJob(context.Background(), []string{os.Args[0]}, append(os.Environ(), env...), "", nil, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			gc := readPid(t, pidfile, 10*time.Second)
			if cg := p.Cgroup(); cg != "" {
				b, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/cgroup")
				own, _ := parseOwnCgroup(b)
				if err != nil || filepath.Base(own) != filepath.Base(cg) {
					t.Errorf("leader's cgroup = %q (%v), want %s", own, err, filepath.Base(cg))
				}
			}
			if err := p.KillGroup(syscall.SIGKILL); err != nil {
				t.Errorf("KillGroup: %v", err)
			}
			if ex := p.Wait(); ex.Signal != syscall.SIGKILL {
				t.Errorf("exit = %v, want killed by SIGKILL", ex)
			}
			// Killed, it may still be on its way out (its environ already
			// gone, so the scan no longer counts it) for a moment on a
			// loaded machine; surviving means still there seconds later.
			if !waitDead(gc, 2*time.Second) {
				t.Errorf("setsid grandchild %d survived", gc)
				_ = syscall.Kill(gc, syscall.SIGKILL)
				waitDead(gc, 5*time.Second)
			}
			assertNoLeftovers(t, tag)
		})
	}
}

// The cgroup steps a start falls back on and the end of a job uses: a
// process moved in after its start, a signal other than SIGKILL sent to
// each member, and the removal of the emptied cgroup with a child below.
func TestCgroupSteps(t *testing.T) {
	t.Parallel()
	sleep := sleepPath(t)
	id, err := newJobID()
	if err != nil {
		t.Fatal(err)
	}
	cg, err := createJobCgroup(id)
	if err != nil {
		t.Skipf("no cgroup here: %v", err)
	}
	defer func() { _ = removeCgroup(cg) }()
	// Its own session and no job ID: only the cgroup can find it.
	c := startDirect(t, []string{sleep, "3600"}, nil, &syscall.SysProcAttr{Setsid: true})
	if err := cgroupMove(cg, c.Process.Pid); err != nil {
		t.Fatalf("move into the cgroup: %v", err)
	}
	if err := os.Mkdir(filepath.Join(cg, "nested"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, _ := cgroupProcs(cg); len(got) != 1 || got[0] != c.Process.Pid {
		t.Errorf("cgroup.procs = %v, want [%d]", got, c.Process.Pid)
	}
	if !cgroupPopulated(cg) {
		t.Error("populated = false with a process inside")
	}
	j := &job{cgroups: []string{cg}}
	if pids, err := j.signal(syscall.SIGTERM); err != nil || len(pids) != 1 || pids[0] != c.Process.Pid {
		t.Errorf("signal = %v, %v; want [%d]", pids, err, c.Process.Pid)
	}
	err = c.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("sleep ended with %v, want SIGTERM", err)
	}
	if killed, gone := j.end(5 * time.Second); !gone || len(killed) != 0 {
		t.Errorf("end of an emptied cgroup = %v, %v; want nothing, gone", killed, gone)
	}
	if err := removeCgroup(cg); err != nil {
		t.Errorf("remove: %v", err)
	}
	if _, err := os.Stat(cg); !os.IsNotExist(err) {
		t.Errorf("cgroup %s still there (stat: %v)", cg, err)
	}
	if err := removeCgroup(cg); err != nil {
		t.Errorf("remove of a removed cgroup: %v", err)
	}
}
