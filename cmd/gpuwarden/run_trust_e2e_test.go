package main

// End-to-end tests of what `gpuwarden run` trusts in a folder store
// (--sync DIR) before the job starts: issue #32, items 2 and 3. Each case
// plants in the store what a careless or hostile writer could, runs the
// real binary on a fresh box, and checks what it restored, what it skipped
// and why, and that it neither ran a name as a command, nor filled the
// box's disk, nor hung.

import (
	"context"
	"crypto/sha256"
	binenc "encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden/internal/manifest"
	"github.com/gpuwarden/gpuwarden/internal/syncbuf"
	"github.com/gpuwarden/gpuwarden/objstore"
)

// trustReport is the part of the run report these tests read.
type trustReport struct {
	Result   string `json:"result"`
	Attempts []struct {
		ResumedFrom string `json:"resumed_from"`
	} `json:"attempts"`
	Sync *struct {
		Restored       string `json:"restored"`
		RestoreSkipped []struct {
			Checkpoint string `json:"checkpoint"`
			Reason     string `json:"reason"`
		} `json:"restore_skipped"`
	} `json:"sync"`
}

func decodeTrustReport(t *testing.T, r result) trustReport {
	t.Helper()
	var rep trustReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Sync == nil || len(rep.Attempts) == 0 {
		t.Fatalf("exit %d, report %v:\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	return rep
}

// skipped maps each checkpoint the restore skipped to its reason.
func (rep trustReport) skipped() map[string]string {
	out := map[string]string{}
	for _, s := range rep.Sync.RestoreSkipped {
		out[s.Checkpoint] = s.Reason
	}
	return out
}

// trainerState is examples/trainer's state.json after step steps: its
// training is a hash chain, so a resume from it ends where an
// uninterrupted run ends.
func trainerState(steps int) []byte {
	h := hex.EncodeToString(make([]byte, 32))
	for s := 0; s < steps; s++ {
		sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", h, s)))
		h = hex.EncodeToString(sum[:])
	}
	b, _ := json.Marshal(struct {
		Step int    `json:"step"`
		Hash string `json:"hash"`
	}{steps, h})
	return b
}

// seedTrainer pushes into the folder store a checkpoint of the example
// trainer at step, under name (any name: a store holds what it is given),
// committed at the given time; files false stores a manifest that lists
// none. It returns the store's folder of it.
func seedTrainer(t *testing.T, store, name string, step int, committed time.Time, files bool) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state.json"), trainerState(step), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "weights.bin"), make([]byte, 256<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	cp, err := manifest.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	cp.Step, cp.Committed = int64(step), committed.UTC()
	if !files {
		cp.Files, cp.Bytes = nil, 0
	}
	if err := (&objstore.Local{Dir: store}).Push(context.Background(), cp); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(store, name)
}

// trustRun starts argv (the real binary, or a wrapper that execs it) in
// dir and returns a wait that fails the test when it does not end in time,
// its stderr as it comes, and a way to signal it.
func trustRun(t *testing.T, dir string, argv []string, extra ...*os.File) (func(time.Duration) result, *syncbuf.Buffer, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.ExtraFiles = extra
	var out, errb syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var once sync.Once
	var waited result
	finish := func(err error) result {
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return result{out.String(), errb.String(), code}
	}
	t.Cleanup(func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			<-done
		})
	})
	wait := func(within time.Duration) result {
		t.Helper()
		select {
		case err := <-done:
			once.Do(func() { waited = finish(err) })
			return waited
		case <-time.After(within):
			once.Do(func() {
				_ = cmd.Process.Kill()
				<-done
			})
			t.Fatalf("run did not finish within %s:\n%s", within, errb.String())
			return result{}
		}
	}
	return wait, &errb, cmd
}

// TestRunTrustAStoredNameNeverReachesTheShell: a checkpoint stored as
// 000009-x$(touch${IFS}PWNED), newest by every measure the store offers,
// is never pulled or resumed, and so never runs in the job's sh -c; the
// job resumes gpuwarden's own checkpoint, and the report says which and
// why the other was skipped.
func TestRunTrustAStoredNameNeverReachesTheShell(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	now := time.Now()
	forged := "000009-x$(touch${IFS}PWNED)"
	seedTrainer(t, store, "000001-step-000020", 20, now.Add(-time.Hour), true)
	seedTrainer(t, store, forged, 40, now, true)
	final := filepath.Join(dir, "final.json")
	script := `echo "resume from [{resume}]"; exec "$0" --steps 60 --every 20 --step-time 1ms --out ` + final
	wait, _, _ := trustRun(t, dir, append([]string{binary}, append(runArgs(dir, "--sync", store, "--cloud", "none"), "--", "sh", "-c", script, trainer)...))
	r := wait(2 * time.Minute)
	if _, err := os.Stat(filepath.Join(dir, "PWNED")); err == nil {
		t.Fatalf("the stored name ran as a command in the job's shell: PWNED exists\n%s", r.stderr)
	}
	rep := decodeTrustReport(t, r)
	if r.code != 0 || rep.Sync.Restored != "000001-step-000020" || rep.Attempts[0].ResumedFrom != "000001-step-000020" {
		t.Errorf("exit %d, restored %q, resumed %q; want gpuwarden's 000001-step-000020\n%s", r.code, rep.Sync.Restored, rep.Attempts[0].ResumedFrom, r.stderr)
	}
	if why := rep.skipped()[forged]; !strings.Contains(why, "not a name gpuwarden writes") {
		t.Errorf("skipped %v; want %s skipped as not gpuwarden's", rep.Sync.RestoreSkipped, forged)
	}
	// Logged quoted (%q), the way slog's text handler writes a quoted value.
	if want := strconv.Quote(strconv.Quote(forged)); !strings.Contains(r.stderr, "not a checkpoint gpuwarden wrote") || !strings.Contains(r.stderr, want) {
		t.Errorf("no warning naming %s:\n%s", want, r.stderr)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "ckpt", "committed")); len(entries) == 0 {
		t.Error("nothing committed")
	} else {
		for _, e := range entries {
			if strings.Contains(e.Name(), "PWNED") {
				t.Errorf("%q was pulled onto the box", e.Name())
			}
		}
	}
	if got, _ := os.ReadFile(final); string(got) != reference(t, 60) {
		t.Errorf("final state %s, want the uninterrupted run's", got)
	}
}

// TestRunTrustResumeIsQuotedForTheShell: a checkpoint folder whose path
// has a space and a quote reaches the job's sh -c as one word in code and
// inside double quotes, and a plain argument ($1 here) gets it raw.
func TestRunTrustResumeIsQuotedForTheShell(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "my ckpt's dir")
	args := []string{"run", "--data-dir", filepath.Join(dir, "data"), "--checkpoint-dir", ckpt, "--cloud", "none", "-o", "json"}
	first, _, _ := trustRun(t, dir, append([]string{binary}, append(args, "--", trainer, "--steps", "40", "--every", "20", "--step-time", "1ms")...))
	if r := first(2 * time.Minute); r.code != 0 {
		t.Fatalf("first run: exit %d\n%s", r.code, r.stderr)
	}
	final := filepath.Join(dir, "final.json")
	script := `test -f {resume}/state.json && echo "QUOTED:{resume}:" && printf 'RAW:%s:\n' "$1" && exec "$0" --steps 60 --every 20 --step-time 1ms --out ` + final
	second, _, _ := trustRun(t, dir, append([]string{binary}, append(args, "--", "sh", "-c", script, trainer, "{resume}")...))
	r := second(2 * time.Minute)
	real, err := filepath.EvalSymlinks(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(real, "committed", "000002-step-000040")
	if r.code != 0 || !strings.Contains(r.stderr, "QUOTED:"+path+":") || !strings.Contains(r.stderr, "RAW:"+path+":") {
		t.Fatalf("exit %d; want QUOTED:%s: and RAW:%s: from the job\n%s", r.code, path, path, r.stderr)
	}
	if got, _ := os.ReadFile(final); string(got) != reference(t, 60) {
		t.Errorf("final state %s, want the uninterrupted run's", got)
	}
}

// TestRunTrustRestoreOrderAndRejects: the restore goes by sequence, not by
// the clocks of the boxes that committed, and a candidate the resume would
// reject (a manifest listing no file, a name with no sequence) is skipped
// for the next one, so the report's "restored" is the checkpoint the job
// really resumed.
func TestRunTrustRestoreOrderAndRejects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	now := time.Now()
	seedTrainer(t, store, "000001-step-000020", 20, now.Add(24*time.Hour), true) // a box whose clock ran a day ahead
	seedTrainer(t, store, "000002-step-000040", 40, now, true)
	seedTrainer(t, store, "000003-step-000060", 60, now.Add(48*time.Hour), false)
	seedTrainer(t, store, "best", 60, now.Add(72*time.Hour), true)
	final := filepath.Join(dir, "final.json")
	wait, _, _ := trustRun(t, dir, append([]string{binary}, append(runArgs(dir, "--sync", store, "--cloud", "none"), "--", trainer, "--steps", "80", "--every", "20", "--step-time", "1ms", "--out", final)...))
	r := wait(2 * time.Minute)
	rep := decodeTrustReport(t, r)
	if r.code != 0 || rep.Sync.Restored != "000002-step-000040" || rep.Attempts[0].ResumedFrom != "000002-step-000040" {
		t.Errorf("exit %d, restored %q, resumed %q; want 000002-step-000040\n%s", r.code, rep.Sync.Restored, rep.Attempts[0].ResumedFrom, r.stderr)
	}
	skipped := rep.skipped()
	for name, phrase := range map[string]string{"000003-step-000060": "lists no files", "best": "not a name gpuwarden writes"} {
		if !strings.Contains(skipped[name], phrase) {
			t.Errorf("skipped %s for %q, want %q", name, skipped[name], phrase)
		}
	}
	if !strings.Contains(r.stderr, "resumed from") || !strings.Contains(r.stderr, "at step 40") {
		t.Errorf("the job did not resume at step 40:\n%s", r.stderr)
	}
	if got, _ := os.ReadFile(final); string(got) != reference(t, 80) {
		t.Errorf("final state %s, want the uninterrupted run's", got)
	}
}

// TestRunTrustRestoreStopsAtTheManifestSize: a 1 GiB sparse file listed as
// 256 KiB is cut one byte past its size, on a box whose checkpoint folder
// is a 64 MiB tmpfs (in a mount namespace of the run's own), so the disk
// never fills and the next checkpoint restores. Where no tmpfs can be
// mounted, an RLIMIT_FSIZE of 64 MiB stands for the disk: any file the run
// wrote past it would fail with "file too large".
func TestRunTrustRestoreStopsAtTheManifestSize(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	ckpt := filepath.Join(dir, "ckpt")
	if err := os.MkdirAll(ckpt, 0o755); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	seedTrainer(t, store, "000001-step-000020", 20, now, true)
	big := seedTrainer(t, store, "000002-step-000040", 40, now, true)
	if err := os.Truncate(filepath.Join(big, "weights.bin"), 1<<30); err != nil {
		t.Fatal(err)
	}
	final := filepath.Join(dir, "final.json")
	run := append([]string{binary}, append(runArgs(dir, "--sync", store, "--cloud", "none"), "--", trainer, "--steps", "60", "--every", "20", "--step-time", "1ms", "--out", final)...)
	tmpfs := []string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c", `mount -t tmpfs -o size=64m gpwckpt "$1" && shift && exec "$@"`, "sh", ckpt}
	var argv []string
	if probe := exec.Command(tmpfs[0], append(tmpfs[1:], "true")...); probe.Run() == nil {
		argv = append(tmpfs, run...)
		t.Log("the checkpoint folder is a 64 MiB tmpfs")
	} else if _, err := exec.LookPath("prlimit"); err == nil {
		argv = append([]string{"prlimit", "--fsize=67108864", "--"}, run...)
		t.Log("no tmpfs here: every file the run writes is capped at 64 MiB (RLIMIT_FSIZE)")
	} else {
		t.Skip("neither a tmpfs (unshare, mount) nor prlimit is available to cap the box's disk")
	}
	wait, _, _ := trustRun(t, dir, argv)
	r := wait(2 * time.Minute)
	rep := decodeTrustReport(t, r)
	if r.code != 0 || rep.Sync.Restored != "000001-step-000020" || rep.Attempts[0].ResumedFrom != "000001-step-000020" {
		t.Errorf("exit %d, restored %q, resumed %q; want 000001-step-000020\n%s", r.code, rep.Sync.Restored, rep.Attempts[0].ResumedFrom, r.stderr)
	}
	if why := rep.skipped()["000002-step-000040"]; !strings.Contains(why, "holds more than the 262144 bytes its manifest lists") {
		t.Errorf("000002-step-000040 skipped for %q; want the copy stopped at the manifest's size", why)
	}
	for _, full := range []string{"no space left on device", "file too large"} {
		if strings.Contains(r.stderr, full) {
			t.Errorf("the copy ran into the disk's cap (%s): it did not stop at size+1\n%s", full, r.stderr)
		}
	}
	if got, _ := os.ReadFile(final); string(got) != reference(t, 60) {
		t.Errorf("final state %s, want the uninterrupted run's", got)
	}
}

// TestRunTrustFIFOInTheStore: a FIFO where a stored checkpoint's file or
// manifest belongs is refused at once; run neither waits on it nor gives
// up on the store, and restores the next checkpoint.
func TestRunTrustFIFOInTheStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	now := time.Now()
	seedTrainer(t, store, "000001-step-000020", 20, now, true)
	for name, file := range map[string]string{"000002-step-000040": "weights.bin", "000003-step-000060": manifest.Name} {
		p := filepath.Join(seedTrainer(t, store, name, 40, now, true), file)
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	final := filepath.Join(dir, "final.json")
	wait, _, _ := trustRun(t, dir, append([]string{binary}, append(runArgs(dir, "--sync", store, "--cloud", "none", "--sync-timeout", "20s"), "--", trainer, "--steps", "60", "--every", "20", "--step-time", "1ms", "--out", final)...))
	r := wait(2 * time.Minute)
	rep := decodeTrustReport(t, r)
	if r.code != 0 || rep.Sync.Restored != "000001-step-000020" || rep.Attempts[0].ResumedFrom != "000001-step-000020" {
		t.Errorf("exit %d, restored %q, resumed %q; want 000001-step-000020\n%s", r.code, rep.Sync.Restored, rep.Attempts[0].ResumedFrom, r.stderr)
	}
	if why := rep.skipped()["000002-step-000040"]; !strings.Contains(why, "is a FIFO, not a regular file") {
		t.Errorf("000002-step-000040 skipped for %q; want the FIFO refused", why)
	}
	if got, _ := os.ReadFile(final); string(got) != reference(t, 60) {
		t.Errorf("final state %s, want the uninterrupted run's", got)
	}
}

// TestRunTrustHungMount: a store file whose reads never come back (a FUSE
// file system of one file that answers no read stands for a hung NFS
// mount) holds run neither past --sync-timeout nor past a SIGTERM. The run
// says why it stopped and starts no job, since the store may hold work a
// fresh start would redo. Such a read cannot be ended, even by SIGKILL,
// until the file system answers; the test answers it, with EIO, once run
// has printed its verdict, so that the process can finish exiting.
func TestRunTrustHungMount(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		flags   []string
		sigterm bool
		code    int // -1: any failure
		says    string
	}{
		{"--sync-timeout gives up on the read", []string{"--sync-timeout", "2s"}, false, 3, "the store did not answer in time"},
		{"SIGTERM ends the wait", nil, true, -1, "context canceled"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			store := filepath.Join(dir, "store")
			now := time.Now()
			seedTrainer(t, store, "000001-step-000020", 20, now, true)
			hung := filepath.Join(seedTrainer(t, store, "000002-step-000040", 40, now, true), "weights.bin")
			fuse := newHungFile(t, 256<<10)
			run := append([]string{binary}, append(runArgs(dir, append([]string{"--sync", store, "--cloud", "none"}, tt.flags...)...), "--", trainer, "--steps", "60", "--every", "20", "--step-time", "1ms")...)
			wait, stderr, cmd := trustRun(t, dir, fuse.wrap(hung, run), fuse.dev)
			t.Cleanup(fuse.release)
			deadline := time.Now().Add(time.Minute)
			for fuse.held() == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("run never read the hung file:\n%s", stderr.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if tt.sigterm {
				if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			// The verdict comes while the read is still held in the kernel.
			waitFor(t, stderr, "error:", time.Minute)
			fuse.release()
			r := wait(time.Minute)
			if (tt.code >= 0 && r.code != tt.code) || r.code == 0 || !strings.Contains(r.stderr, tt.says) || strings.Contains(r.stderr, "job started") {
				t.Errorf("exit %d, want %d (-1: any failure) with %q and no job started:\n%s", r.code, tt.code, tt.says, r.stderr)
			}
		})
	}
}

// hungFile is a FUSE file system of one regular file, mounted over a file
// of the store in the mount namespace of the command it wraps: it answers
// lookups, opens and attributes, and holds every read without an answer
// until release, as a hard NFS mount whose server went away does. Only
// what the kernel asks of a file mounted over a file is served.
type hungFile struct {
	dev  *os.File
	size uint64

	mu       sync.Mutex
	reads    []uint64 // the requests held
	released bool
	closed   bool
}

// close ends serving; the device closes once no read of it is under way
// (a read of a mounted one ends when its namespace does).
func (h *hungFile) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.dev.Close()
}

// newHungFile opens /dev/fuse and serves it, or skips the test where FUSE
// or mounting is not available (no root, no /dev/fuse, no unshare): a
// probe mounts a throwaway one first, since a FUSE device serves one mount.
func newHungFile(t *testing.T, size uint64) *hungFile {
	t.Helper()
	for _, tool := range []string{"unshare", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s to mount a hung file system in a namespace of its own", tool)
		}
	}
	open := func() *hungFile {
		// A plain blocking descriptor: Go's poller cannot wait on /dev/fuse.
		fd, err := syscall.Open("/dev/fuse", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
		if err != nil {
			t.Skipf("no FUSE to stand for a hung mount: %v", err)
		}
		h := &hungFile{dev: os.NewFile(uintptr(fd), "/dev/fuse"), size: size}
		t.Cleanup(h.close)
		go h.serve()
		return h
	}
	probe := open()
	target := filepath.Join(t.TempDir(), "probe")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	argv := probe.wrap(target, []string{"true"})
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.ExtraFiles = []*os.File{probe.dev}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("cannot mount FUSE in a private mount namespace here: %v %s", err, out)
	}
	probe.close()
	return open()
}

// wrap runs argv in a private mount namespace in which target is the hung
// file; the namespace, and the mount, end with argv's process.
func (h *hungFile) wrap(target string, argv []string) []string {
	mount := `mount -i -t fuse -o fd=3,rootmode=100000,user_id=0,group_id=0 gpwhang "$1" && exec 3<&- && shift && exec "$@"`
	return append([]string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c", mount, "sh", target}, argv...)
}

// held counts the reads waiting for an answer.
func (h *hungFile) held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.reads)
}

// release answers every held read, and every later one, with EIO.
func (h *hungFile) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.released = true
	for _, u := range h.reads {
		h.reply(u, -int32(syscall.EIO), nil)
	}
	h.reads = nil
}

// The FUSE opcodes served (linux/fuse.h).
const (
	fuseForget      = 2
	fuseGetattr     = 3
	fuseOpen        = 14
	fuseRead        = 15
	fuseRelease     = 18
	fuseFlush       = 25
	fuseInit        = 26
	fuseInterrupt   = 36
	fuseBatchForget = 42
)

// serve answers the kernel until the file system goes away.
func (h *hungFile) serve() {
	le := binenc.LittleEndian
	buf := make([]byte, 1<<20+4096)
	for {
		n, err := h.dev.Read(buf)
		switch {
		case errors.Is(err, syscall.EPERM):
			h.mu.Lock()
			closed := h.closed
			h.mu.Unlock()
			if closed {
				return
			}
			time.Sleep(10 * time.Millisecond) // not mounted yet
			continue
		case errors.Is(err, syscall.EINTR), errors.Is(err, syscall.ENOENT):
			continue // a request interrupted before it was read
		case err != nil:
			return // unmounted, or the device closed
		case n < 40:
			continue
		}
		op, unique, body := le.Uint32(buf[4:]), le.Uint64(buf[8:]), buf[40:n]
		h.mu.Lock()
		switch op {
		case fuseInit:
			out := make([]byte, 64) // fuse_init_out
			le.PutUint32(out[0:], 7)
			le.PutUint32(out[4:], min(le.Uint32(body[4:]), 31))
			le.PutUint32(out[8:], le.Uint32(body[8:])) // max_readahead
			le.PutUint16(out[16:], 16)                 // max_background
			le.PutUint16(out[18:], 12)                 // congestion_threshold
			le.PutUint32(out[20:], 128<<10)            // max_write
			le.PutUint32(out[24:], 1)                  // time_gran
			h.reply(unique, 0, out)
		case fuseGetattr:
			out := make([]byte, 104) // fuse_attr_out: no caching, then fuse_attr
			a := out[16:]
			le.PutUint64(a[0:], 1)                      // ino
			le.PutUint64(a[8:], h.size)                 // size
			le.PutUint64(a[16:], (h.size+511)/512)      // blocks
			le.PutUint32(a[60:], syscall.S_IFREG|0o644) // mode
			le.PutUint32(a[64:], 1)                     // nlink
			le.PutUint32(a[80:], 4096)                  // blksize
			h.reply(unique, 0, out)
		case fuseOpen:
			out := make([]byte, 16) // fuse_open_out
			le.PutUint64(out[0:], 1)
			h.reply(unique, 0, out)
		case fuseRead:
			if h.released {
				h.reply(unique, -int32(syscall.EIO), nil)
			} else {
				h.reads = append(h.reads, unique)
			}
		case fuseFlush, fuseRelease:
			h.reply(unique, 0, nil)
		case fuseForget, fuseBatchForget, fuseInterrupt:
			// No answer: the held read stays held, as on a hard mount.
		default:
			h.reply(unique, -int32(syscall.ENOSYS), nil)
		}
		h.mu.Unlock()
	}
}

// reply writes one answer (fuse_out_header, then out).
func (h *hungFile) reply(unique uint64, errno int32, out []byte) {
	le := binenc.LittleEndian
	b := make([]byte, 16+len(out))
	le.PutUint32(b[0:], uint32(len(b)))
	le.PutUint32(b[4:], uint32(errno))
	le.PutUint64(b[8:], unique)
	copy(b[16:], out)
	_, _ = h.dev.Write(b)
}
