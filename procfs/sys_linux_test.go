//go:build linux

package procfs

import (
	"os"
	"os/exec"
	"testing"
)

// TestStatFilesFollowProcesses starts and ends a child and checks that the
// sampler opens its stat file once, keeps it between samples, and closes it
// when the child is gone; and that Close leaves no descriptor behind.
func TestStatFilesFollowProcesses(t *testing.T) {
	fds := func() int {
		t.Helper()
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	before := fds()
	s := &Sampler{}
	sample := func() {
		t.Helper()
		if _, err := s.Sample(); err != nil {
			t.Fatal(err)
		}
	}
	entry := func(pid int) (procEntry, bool) {
		for _, e := range s.procs.procs.ents {
			if int(e.pid) == pid {
				return e, true
			}
		}
		return procEntry{}, false
	}

	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Skip("cannot start sleep:", err)
	}
	pid := child.Process.Pid
	sample()
	e, ok := entry(pid)
	if !ok || e.fd < 0 {
		t.Fatalf("child %d: entry %+v, found %v; want its stat file open", pid, e, ok)
	}
	sample()
	if again, _ := entry(pid); again.fd != e.fd {
		t.Errorf("child's stat file reopened: fd %d then %d", e.fd, again.fd)
	}
	open := s.procs.procs.open

	_ = child.Process.Kill()
	_ = child.Wait()
	sample()
	if e, ok := entry(pid); ok {
		t.Errorf("exited child still tracked: %+v", e)
	}
	if got := s.procs.procs.open; got >= open {
		t.Errorf("open stat files %d after the child exited, want fewer than %d", got, open)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if after := fds(); after != before {
		t.Errorf("descriptors: %d before, %d after Close", before, after)
	}
}
