// Package canary records a host's software stack once and checks it on
// every new box in about a second: `gpuwarden lock` calls Collect and
// NewLock and writes gpuwarden.lock with WriteLock; `gpuwarden canary` calls
// Collect again, reads the lock with ReadLock and compares the two with
// Compare, which sorts every locked field into compared, ignored (its rule
// is ignore) or skipped (the run did not probe it, and why), so that a
// verdict never counts a field it did not check.
//
// The stack is a flat set of facts (gpuwarden.Facts) rather than a typed
// snapshot, so that the lock file diffs line by line, a user can relax one
// check by editing one line, and a new probe adds a fact without a schema
// change. Every probe runs concurrently and is bounded by Options.Timeout: a
// hung driver call or a slow `import torch` becomes a note, never a hung
// canary. A probe that finds nothing leaves its facts out; the lock then
// reports them as missing on a box that lacks them.
//
// # Facts and their default match rules
//
// DefaultMatch gives each fact the rule NewLock writes into a new lock. The
// rules are the gpuwarden.Match values: exact, same-major (the same part
// before the first dot), at-least (this version or newer) and ignore.
//
//	key                          source                                   rule        why
//	gpu.count                    GPUs.List                                exact       a job sized for 8 GPUs fails on 4
//	gpu.model                    GPU.Model (Name when empty); mixed:      exact       kernels, memory and speed differ per model
//	                             the distinct models, sorted, comma-joined
//	gpu.vram_gb                  VRAMBytes in GiB, rounded ("80", "141")  exact       batch sizes are tuned to it
//	gpu.compute_capability       "9.0"                                    exact       compiled kernels target it
//	gpu.ecc                      "on", "off" or "mixed"                   exact       ECC off changes results silently
//	gpu.mig                      "on", "off" or "mixed"                   exact       MIG slices a GPU into smaller ones
//	gpu.mig_layout               only with MIG on: each GPU's instances   exact       a job sized for 3g.40gb fails on 1g.10gb
//	                             ("GI 1/CI 0 3g.40gb; GI 2/CI 0 3g.40gb",
//	                             "off" for a GPU without MIG), distinct,
//	                             sorted, comma-joined
//	gpu.persistence              "on", "off" or "mixed"                   exact       off adds seconds to every CUDA start
//	driver.version               GPUs.Driver ("580.159.04")               same-major  a driver branch keeps its behaviour
//	cuda.driver_version          newest CUDA the driver runs ("13.0")     at-least    newer drivers run older CUDA builds
//	os.id                        ID= of /etc/os-release ("ubuntu")        exact
//	os.version_id                VERSION_ID= ("24.04")                    exact       glibc and system libraries follow it
//	os.kernel                    Options.Uname or /proc/sys/kernel/       ignore      changes with every patch reboot;
//	                             osrelease                                            recorded for diagnosis only
//	cudnn.version                cudnn_version.h when its major agrees    same-major  the cuDNN ABI is stable within a major
//	                             with the libraries, else libcudnn.so.X.Y.Z
//	nccl.version                 libnccl.so.2.X.Y                         same-major  as above
//	container.runtime            docker (/.dockerenv), podman             exact
//	                             (/run/.containerenv), kubernetes
//	                             (KUBERNETES_SERVICE_HOST), else "none"
//	container.image              GPUWARDEN_IMAGE, else CONTAINER_IMAGE,   exact       the image is the stack
//	                             else image= of /run/.containerenv
//	container.name               name= of /run/.containerenv              ignore      differs for every container
//	env.CUDA_VISIBLE_DEVICES     the variable, also when set but empty    exact       "" hides every GPU
//	env.NVIDIA_VISIBLE_DEVICES   the variable                             exact
//	env.NCCL_*                   every NCCL_ variable, name kept as is    exact       they change how collectives run
//	python.P.version             interpreter P ("3.12.3")                 same-major  the frameworks below pin the minor
//	python.P.F.version           F = torch, jax or tensorflow             exact       the framework is the job's stack
//	python.P.F.cuda              CUDA F was built for, "none" for CPU     exact
//	python.P.F.cudnn             cuDNN torch loads, or jax and            exact
//	                             tensorflow were built for ("9.10.2")
//	python.P.F.sees_gpu          "true" or "false"                        exact       a CPU fallback is a silent 100× slowdown
//	any other key                                                         exact       new facts are checked until relaxed
//
// P is the base name of each interpreter in Options.Pythons ("python3"). A
// fact whose probe failed or timed out is absent, and Collect says why in a
// note ("python3: timed out after 2s").
//
// Libraries are found by name in the directories the dynamic loader
// searches: each absolute entry of LD_LIBRARY_PATH, then
// /usr/lib/x86_64-linux-gnu, /usr/lib/aarch64-linux-gnu,
// /usr/local/cuda/lib64, /usr/lib64 and /usr/local/lib. Among the names
// found the newest major wins (a note lists the others), and within it the
// fullest name, since libcudnn.so.9 is only the link to libcudnn.so.9.1.0.
// The cuDNN header is looked for in /usr/include and /usr/local/cuda/include.
//
// # The lock file
//
// WriteLock writes gpuwarden.lock as YAML that a person can review and edit:
// a comment header, version, created, host and one line per field, sorted,
// with the value always quoted so that "13.0" stays text:
//
//	fields:
//	  driver.version: {value: "580.159.04", match: same-major}
//
// ReadLock is strict: unknown keys, a value that is not text, an unknown
// rule or a version other than 1 are errors whose message reads
// NAME:LINE:COL: FIELD: what is wrong.
package canary
