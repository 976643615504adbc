package supervise

import (
	"bytes"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"golang.org/x/sys/unix"
)

// Output signatures, matched case-insensitively against the job's last
// lines. Order matters: see Explain.
var (
	// hardwareFaults name the GPU or its link failing, whatever the job did.
	hardwareFaults = []string{
		"uncorrectable ecc error",      // cudaErrorECCUncorrectable's message
		"cuda_error_ecc_uncorrectable", // driver API name
		"cudaerroreccuncorrectable",
		"uncorrectable nvlink error", // cudaErrorNvlinkUncorrectable
		"gpu has fallen off the bus", // Xid 79
	}
	// xid matches an NVRM Xid report ("NVRM: Xid (PCI:0000:3b:00): 79, ...").
	xid = regexp.MustCompile(`\bXid\b`)

	// cudaOOM is the GPU running out of memory: PyTorch, the CUDA driver and
	// runtime APIs, JAX/XLA, TensorFlow and cuBLAS.
	cudaOOM = []string{
		"cuda out of memory",
		"cuda error: out of memory",
		"cuda_error_out_of_memory",
		"cudaerrormemoryallocation",
		"resource_exhausted: out of memory",
		"oom when allocating tensor",
		"cublas_status_alloc_failed",
	}

	// userCUDA are bugs in the job's own kernels or indexing: an illegal
	// memory access is almost always an out-of-bounds index, and CUDA errors
	// are sticky, so NCCL often reports the same fault afterwards. Retrying
	// repeats the bug, so these are user errors unless a hardware signature
	// (Xid, ECC) is also present.
	userCUDA = []string{
		"an illegal memory access was encountered",
		"device-side assert triggered",
		"misaligned address",
		"an illegal instruction was encountered",
	}

	// gpuFaults are failures of the GPU, its driver or the collective
	// fabric that a restart often cures. Plain "NCCL WARN" lines are not
	// among them: NCCL warns about retried connections and missing
	// transports in healthy runs; a real failure ends in one of these.
	gpuFaults = []string{
		"nccl error",
		"ncclinternalerror",
		"ncclsystemerror",
		"ncclunhandledcudaerror",
		"ncclremoteerror",
		"unhandled system error",
		"unhandled cuda error",
		"remote process exited or there was a network error",
		"watchdog caught collective operation timeout",
		"cuda error: unspecified launch failure",
		"cuda_error_launch_failed",
		"cudaerrorlaunchfailure",
	}

	// ncclUsage are NCCL errors caused by how the job calls it.
	ncclUsage = []string{"invalid usage", "invalid argument", "ncclinvalidusage", "ncclinvalidargument"}
)

// Classify returns the gpuwarden.Exit* class of an attempt: how it ended,
// its last output lines, whether the supervisor stopped it for a notice and
// whether the kernel's OOM killer took one of its processes.
func Classify(exit Exit, tail []string, preempted, hostOOM bool) string {
	class, _ := Explain(exit, tail, preempted, hostOOM)
	return class
}

// Explain is Classify with the reason: the line or fact that decided.
//
// The order: a stop for a notice is preempted whatever the exit (trainers
// often exit 0 after saving on SIGTERM); then a zero exit is ok; then a
// kernel OOM kill; then hardware signatures; then CUDA out-of-memory; then
// user CUDA bugs; then NCCL and launch failures; then any other signal is
// killed and any other exit a user error.
func Explain(exit Exit, tail []string, preempted, hostOOM bool) (class, reason string) {
	if preempted {
		return gpuwarden.ExitPreempted, "stopped by the supervisor, for a notice or its own stop"
	}
	if exit.OK() {
		return gpuwarden.ExitOK, "exit 0"
	}
	if hostOOM {
		// Not only SIGKILL of the leader: under a launcher (torchrun) the
		// OOM killer takes a worker and the launcher exits 1.
		return gpuwarden.ExitHostOOM, "the kernel OOM killer killed a process of the job (" + exit.String() + ")"
	}
	lower := make([]string, len(tail))
	for i, l := range tail {
		lower[i] = strings.ToLower(l)
	}
	for i, l := range tail {
		if xid.MatchString(l) || containsAny(lower[i], hardwareFaults) {
			return gpuwarden.ExitGPUFault, strings.TrimSpace(l)
		}
	}
	for i, l := range tail {
		if containsAny(lower[i], cudaOOM) {
			return gpuwarden.ExitCUDAOOM, strings.TrimSpace(l)
		}
	}
	for i, l := range tail {
		if containsAny(lower[i], userCUDA) {
			return gpuwarden.ExitUser, strings.TrimSpace(l)
		}
	}
	for i, l := range tail {
		if containsAny(lower[i], gpuFaults) && !containsAny(lower[i], ncclUsage) {
			return gpuwarden.ExitGPUFault, strings.TrimSpace(l)
		}
	}
	if exit.Signal != 0 {
		return gpuwarden.ExitSignal, exit.String()
	}
	return gpuwarden.ExitUser, exit.String()
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// ParseOOMKill reports whether kernel log lines (dmesg or /dev/kmsg format)
// say the OOM killer killed pid: "Out of memory: Killed process PID (comm)",
// "Memory cgroup out of memory: Killed process PID", older kernels'
// "Killed process PID", or "oom-kill:...,pid=PID,...".
func ParseOOMKill(lines []string, pid int) bool {
	for _, l := range lines {
		for _, p := range oomPids(l) {
			if p == pid {
				return true
			}
		}
	}
	return false
}

var (
	killedProcess = regexp.MustCompile(`Kill(?:ed)? process (\d+) `)
	oomKillPid    = regexp.MustCompile(`oom-kill:.*[,:]pid=(\d+)(?:,|$|\s)`)
)

// oomPids returns the process IDs an OOM-killer line names as killed.
func oomPids(line string) []int {
	if !strings.Contains(line, "process") && !strings.Contains(line, "oom-kill:") {
		return nil
	}
	var out []int
	if strings.Contains(line, "out of memory") || strings.Contains(line, "Out of memory") ||
		strings.Contains(line, "Killed process") {
		for _, m := range killedProcess.FindAllStringSubmatch(line, -1) {
			if n, err := strconv.Atoi(m[1]); err == nil {
				out = append(out, n)
			}
		}
	}
	if m := oomKillPid.FindStringSubmatch(line); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// OOMKilled reports whether the kernel log (/dev/kmsg) shows the OOM killer
// killing any of pids since a time. It takes every pid seen in the job's group
// because the killer usually picks the biggest worker, not the leader. It is
// false when the log cannot be read (no root, dmesg_restrict, containers).
func OOMKilled(pids []int, since time.Time) bool {
	lines, err := readKmsg(since)
	if err != nil {
		return false
	}
	for _, pid := range pids {
		if ParseOOMKill(lines, pid) {
			return true
		}
	}
	return false
}

// readKmsg returns the kernel log records logged since a time, read without
// blocking from /dev/kmsg ("prio,seq,usec,flags;message").
func readKmsg(since time.Time) ([]string, error) {
	// A raw descriptor: os.File.Fd would switch it back to blocking, and
	// the read at the end of the log must return EAGAIN, not wait.
	fd, err := unix.Open("/dev/kmsg", unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	// Record times are microseconds of the monotonic clock since boot; a
	// few seconds of slack covers the two clocks' drift and a slow attempt start.
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return nil, err
	}
	nowMono := time.Duration(ts.Nano())
	fromUsec := int64((nowMono - time.Since(since) - 5*time.Second) / time.Microsecond)
	var out []string
	buf := make([]byte, 16384)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EPIPE) || errors.Is(err, unix.EINTR) {
			continue // records overwritten while reading; go on with the next
		}
		if err != nil || n <= 0 {
			break // EAGAIN: no more records
		}
		rec := buf[:n]
		head, msg, ok := bytes.Cut(rec, []byte{';'})
		if !ok {
			continue
		}
		fields := strings.Split(string(head), ",")
		if len(fields) < 3 {
			continue
		}
		usec, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil || usec < fromUsec {
			continue
		}
		if i := bytes.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		out = append(out, string(msg))
	}
	return out, nil
}
