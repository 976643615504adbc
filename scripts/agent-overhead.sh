#!/usr/bin/env bash
# Measures `gpuwarden up` at its 1 Hz default: CPU time per second of wall
# time and peak RSS, for 1 and 8 simulated GPUs (or the real ones with
# REAL=1 on a GPU host), over DURATION seconds (default 60).
# Usage: scripts/agent-overhead.sh [DURATION]
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-60}
bin=${GPUWARDEN:-bin/gpuwarden}
[ -x "$bin" ] || go build -o "$bin" ./cmd/gpuwarden
hz=$(getconf CLK_TCK)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); ${dur}s per run"
read -r -a specs <<<"${SPECS:-1xH100 8xH100}" # SPECS="8xH100,mig=7" measures others
[ "${REAL:-0}" = 1 ] && specs=("real")
for spec in "${specs[@]}"; do
  dir=$(mktemp -d)
  args=(up --cloud none --listen "" --data-dir "$dir" --no-idle-stop)
  [ "$spec" != real ] && args+=(--simulate "$spec,load=50")
  "$bin" "${args[@]}" 2>"$dir/log" &
  pid=$!
  sleep 3 # start-up is not steady state
  read -r u0 s0 < <(awk '{print $14, $15}' /proc/$pid/stat)
  sleep "$dur"
  read -r u1 s1 < <(awk '{print $14, $15}' /proc/$pid/stat)
  rss=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
  kill $pid; wait $pid 2>/dev/null || true
  awk -v u=$((u1-u0)) -v s=$((s1-s0)) -v hz="$hz" -v d="$dur" -v spec="$spec" -v rss="$rss" \
    'BEGIN { printf "%-8s cpu %.3f%% of one core (user %.2fs, sys %.2fs over %ds), peak RSS %.1f MB\n", spec, 100*(u+s)/hz/d, u/hz, s/hz, d, rss/1024 }'
  rm -rf "$dir"
done
