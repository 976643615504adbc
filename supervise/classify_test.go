package supervise

import (
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

func TestClassify(t *testing.T) {
	exit1 := Exit{Code: 1}
	killed := Exit{Code: -1, Signal: syscall.SIGKILL}
	tests := []struct {
		name      string
		exit      Exit
		tail      []string
		preempted bool
		hostOOM   bool
		want      string
	}{
		{"clean exit", Exit{}, []string{"done step 40"}, false, false, gpuwarden.ExitOK},
		{"stopped for a notice, exited 0 after saving", Exit{}, nil, true, false, gpuwarden.ExitPreempted},
		{"stopped for a notice, killed", killed, nil, true, true, gpuwarden.ExitPreempted},
		{"pytorch oom", exit1, []string{
			"Traceback (most recent call last):",
			`  File "/opt/conda/lib/python3.11/site-packages/torch/nn/modules/linear.py", line 116, in forward`,
			"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.03 GiB memory in use.",
		}, false, false, gpuwarden.ExitCUDAOOM},
		{"older pytorch oom", exit1, []string{"RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.21 GiB already allocated)"}, false, false, gpuwarden.ExitCUDAOOM},
		{"c10 cuda error oom", exit1, []string{"RuntimeError: CUDA error: out of memory", "CUDA kernel errors might be asynchronously reported at some other API call"}, false, false, gpuwarden.ExitCUDAOOM},
		{"jax oom", exit1, []string{"jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes."}, false, false, gpuwarden.ExitCUDAOOM},
		{"cupy driver oom", exit1, []string{"cupy_backends.cuda.api.driver.CUDADriverError: CUDA_ERROR_OUT_OF_MEMORY: out of memory"}, false, false, gpuwarden.ExitCUDAOOM},
		{"runtime api oom", exit1, []string{"CUDA error cudaErrorMemoryAllocation at train.cu:42"}, false, false, gpuwarden.ExitCUDAOOM},
		{"tensorflow oom", exit1, []string{"tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[4096,4096] and type float on /job:localhost/replica:0/task:0/device:GPU:0"}, false, false, gpuwarden.ExitCUDAOOM},
		{"nccl system error", exit1, []string{"torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1", "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error."}, false, false, gpuwarden.ExitGPUFault},
		{"nccl remote error", exit1, []string{"ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely."}, false, false, gpuwarden.ExitGPUFault},
		{"nccl watchdog timeout", Exit{Code: -1, Signal: syscall.SIGABRT}, []string{"[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12041, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600054 milliseconds before timing out."}, false, false, gpuwarden.ExitGPUFault},
		{"nccl invalid usage is the job's", exit1, []string{"torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.19.3"}, false, false, gpuwarden.ExitUser},
		{"nccl warn alone is noise", exit1, []string{"node1:1234:1300 [0] NCCL WARN NET/IB : No device found.", "ValueError: bad config"}, false, false, gpuwarden.ExitUser},
		{"xid", killed, []string{"NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, GPU has fallen off the bus."}, false, false, gpuwarden.ExitGPUFault},
		{"ecc", exit1, []string{"RuntimeError: CUDA error: uncorrectable ECC error encountered"}, false, false, gpuwarden.ExitGPUFault},
		{"ecc driver api", exit1, []string{"CUDA_ERROR_ECC_UNCORRECTABLE"}, false, false, gpuwarden.ExitGPUFault},
		{"launch failure", exit1, []string{"RuntimeError: CUDA error: unspecified launch failure"}, false, false, gpuwarden.ExitGPUFault},
		{"illegal memory access is a bug", exit1, []string{"RuntimeError: CUDA error: an illegal memory access was encountered", "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."}, false, false, gpuwarden.ExitUser},
		{"illegal access behind an nccl error is still a bug", exit1, []string{"NCCL WARN Cuda failure 'an illegal memory access was encountered'", "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error"}, false, false, gpuwarden.ExitUser},
		{"illegal access with an xid is hardware", exit1, []string{"NVRM: Xid (PCI:0000:3b:00): 48, pid=1, An uncorrectable double bit error", "RuntimeError: CUDA error: an illegal memory access was encountered"}, false, false, gpuwarden.ExitGPUFault},
		{"device-side assert", exit1, []string{"RuntimeError: CUDA error: device-side assert triggered"}, false, false, gpuwarden.ExitUser},
		{"host oom", killed, []string{"epoch 3"}, false, true, gpuwarden.ExitHostOOM},
		{"host oom under a launcher", exit1, []string{"torch.distributed.elastic.multiprocessing.errors.ChildFailedError"}, false, true, gpuwarden.ExitHostOOM},
		{"killed by someone", killed, []string{"epoch 3"}, false, false, gpuwarden.ExitSignal},
		{"segfault", Exit{Code: -1, Signal: syscall.SIGSEGV}, nil, false, false, gpuwarden.ExitSignal},
		{"plain failure", Exit{Code: 2}, []string{"usage: train.py [-h]", "train.py: error: unrecognized arguments: --lr"}, false, false, gpuwarden.ExitUser},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.exit, tt.tail, tt.preempted, tt.hostOOM); got != tt.want {
				_, why := Explain(tt.exit, tt.tail, tt.preempted, tt.hostOOM)
				t.Errorf("Classify = %s (%s), want %s", got, why, tt.want)
			}
		})
	}
}

func TestParseOOMKill(t *testing.T) {
	dmesg := []string{
		"[12345.678901] python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
		"[12345.679012] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,task_memcg=/user.slice/user-1000.slice/session-3.scope,task=python3,pid=48213,uid=1000",
		"[12345.679100] Out of memory: Killed process 48213 (python3) total-vm:123456789kB, anon-rss:98765432kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:200000kB oom_score_adj:0",
		"[12345.700000] oom_reaper: reaped process 48213 (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
	}
	kmsg := []string{"3,1187,5678901234,-;Memory cgroup out of memory: Killed process 777 (pt_data_worker) total-vm:1024kB, anon-rss:512kB"}
	old := []string{"[  812.123] Out of memory: Kill process 9001 (python) score 951 or sacrifice child", "[  812.124] Killed process 9001 (python) total-vm:8kB"}
	onlyOomKill := []string{"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/job,task_memcg=/job,task=python,pid=4242,uid=0"}
	tests := []struct {
		name  string
		lines []string
		pid   int
		want  bool
	}{
		{"dmesg names the pid", dmesg, 48213, true},
		{"a different pid", dmesg, 4821, false},
		{"a longer pid is not a prefix match", dmesg, 482130, false},
		{"the reaper line alone is not a kill", dmesg[3:], 48213, false},
		{"kmsg cgroup kill", kmsg, 777, true},
		{"old kernel", old, 9001, true},
		{"oom-kill summary line", onlyOomKill, 4242, true},
		{"unrelated line", []string{"Killed process group leader politely"}, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseOOMKill(tt.lines, tt.pid); got != tt.want {
				t.Errorf("ParseOOMKill(pid %d) = %v, want %v", tt.pid, got, tt.want)
			}
		})
	}
}

func TestOOMKilledReadsTheLogQuietly(t *testing.T) {
	// No assertion on the answer (the host's log is not ours); it must
	// return promptly, not block at the end of /dev/kmsg.
	done := make(chan bool, 1)
	go func() { done <- OOMKilled([]int{1 << 30}, time.Now().Add(-time.Minute)) }()
	select {
	case got := <-done:
		if got {
			t.Error("an impossible pid was reported OOM-killed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OOMKilled blocked")
	}
}
