#!/usr/bin/env bash
# Runs on a GPU host (no Go needed) after scripts/build-device.sh, and prints
# raw output for docs/benchmarks.md: the host, the gpu-tagged suites, canary
# timings without and with framework probes, and `import torch` beside them.
set -u
cd "$(dirname "$0")/.."
B="$PWD/bin/gpuwarden"
t() { local s e; s=$(date +%s.%N); "$@" >/tmp/gw.out 2>&1; local rc=$?; e=$(date +%s.%N); printf '%.3f s  rc=%d  %s\n' "$(echo "$e - $s" | bc)" "$rc" "$*"; }

echo "== host"
date -u; uname -r; nproc
nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1

echo "== nvml gpu suite"
bin/nvml.test -test.v -test.run GPU -test.bench . -test.benchtime 2000x 2>&1 | tail -30
echo "== cuda gpu suite"
bin/cuda.test -test.v -test.run GPU -test.bench . -test.benchtime 5x 2>&1 | tail -40

work=$(mktemp -d); cd "$work"
echo "== lock"
"$B" lock --no-frameworks; echo "rc=$?"
echo "== canary (first run, then 10 timed runs, no framework probes)"
"$B" canary --no-frameworks; echo "rc=$?"
for i in $(seq 10); do t "$B" canary --no-frameworks; done
echo "== canary -o json"
"$B" canary --no-frameworks -o json | head -60
echo "== canary with framework probes (python3), 3 runs"
"$B" lock >/dev/null 2>&1
for i in 1 2 3; do t "$B" canary; done
cat /tmp/gw.out | tail -25
echo "== import torch + tiny tensor, 3 runs (the PyTorch way)"
for i in 1 2 3; do t python3 -c "import torch; x=torch.ones(1<<26,device='cuda'); torch.cuda.synchronize(); print(float(x.sum()))"; done
echo "== burnin --quick (budget: <= 60 s; bandwidth >= 4.0 TB/s and FP32 >= 60 TFLOP/s on an H200)"
t "$B" burnin --quick --data-dir "$work/data"; cat /tmp/gw.out | tail -40
echo "== burnin --quick --inject-fault (the memory test must catch the flipped word)"
t "$B" burnin --quick --inject-fault --data-dir "$work/data"; grep -A2 '^memory' /tmp/gw.out
"$B" nodes --data-dir "$work/data"
echo "== canary verifying 16 GiB"
t "$B" canary --no-frameworks --alloc 16; tail -12 /tmp/gw.out
echo "== nvidia-smi for comparison"
for i in 1 2 3; do t nvidia-smi --query-gpu=utilization.gpu,memory.used,power.draw,temperature.gpu --format=csv; done
