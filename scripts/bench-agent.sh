#!/usr/bin/env bash
# Measures the agent beside its peer in one run: `gpuwarden up` at its 1 Hz
# default on 1 and 8 simulated H100s, and Prometheus' node_exporter (Debian's
# prometheus-node-exporter) scraped once a second, all three at once for
# DURATION seconds (default 60). For each: CPU as % of one core (from
# /proc/PID/stat) and the memory the process owns, RssAnon of
# /proc/PID/status (heap, stacks, runtime), read every second: its highest
# and its last value. The budget is the agent's highest RssAnon against
# node_exporter's in the same run. Total RSS (VmRSS, and its peak VmHWM) is
# printed for information only: its file-backed part is clean pages of the
# binary, which the kernel shares between processes and drops under memory
# pressure, and which depends on how the page cache holds the binary (a
# file just written sits in large folios, which map whole); each binary's
# cached pages are dropped first, as after a reboot, so that runs compare.
# Usage: scripts/bench-agent.sh [DURATION]
#   GPUWARDEN=PATH  the binary to build and run (default bin/gpuwarden)
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-60}
bin=${GPUWARDEN:-bin/gpuwarden}
go build -o "$bin" ./cmd/gpuwarden
hz=$(getconf CLK_TCK)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r), $(go version | awk '{print $3}'), $(date -u +%Y-%m-%dT%H:%MZ); commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)'); ${dur}s per process, all at once"
uncache() {
  python3 -c 'import os,sys
fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1"
}
tmp=$(mktemp -d)
pids=() names=()
trap 'kill "${pids[@]}" ${scraper:-} 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
uncache "$bin"
for spec in 1xH100 8xH100; do
  mkdir -p "$tmp/$spec"
  "$bin" up --cloud none --listen "" --data-dir "$tmp/$spec" --no-idle-stop --simulate "$spec,load=50" 2>"$tmp/$spec.log" &
  pids+=($!) names+=("gpuwarden up $spec")
done
ne=$(command -v prometheus-node-exporter || command -v node_exporter || true)
if [ -n "$ne" ]; then
  uncache "$ne"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$ne" --web.listen-address="127.0.0.1:$port" 2>"$tmp/ne.log" &
  pids+=($!) names+=("node_exporter $("$ne" --version 2>&1 | awk 'NR==1{print $3}'), scraped 1/s")
  ( while sleep 1; do curl -s -o /dev/null "http://127.0.0.1:$port/metrics" || true; done ) &
  scraper=$!
else
  echo "node_exporter: not installed (apt-get install prometheus-node-exporter): no peer, no verdict"
fi
anon() { awk '/^RssAnon:/ {print $2}' "/proc/$1/status"; }
sleep 3 # start-up is not steady state
declare -A t0 maxanon
for p in "${pids[@]}"; do
  t0[$p]=$(awk '{print $14+$15}' /proc/$p/stat)
  maxanon[$p]=$(anon "$p")
done
for ((s = 0; s < dur; s++)); do
  sleep 1
  for p in "${pids[@]}"; do
    a=$(anon "$p")
    ((a > maxanon[$p])) && maxanon[$p]=$a
  done
done
ne_max=
for i in "${!pids[@]}"; do
  p=${pids[$i]}
  t1=$(awk '{print $14+$15}' /proc/$p/stat)
  read -r hwm rss anow file < <(awk '/^VmHWM:/{h=$2} /^VmRSS:/{r=$2} /^RssAnon:/{a=$2} /^RssFile:/{f=$2} END{print h, r, a, f}' /proc/$p/status)
  awk -v t=$((t1-t0[$p])) -v hz="$hz" -v d="$dur" -v n="${names[$i]}" -v m="${maxanon[$p]}" -v a="$anow" -v r="$rss" -v f="$file" -v h="$hwm" \
    'BEGIN { printf "%-36s cpu %.3f%% of one core; RssAnon max %.1f MB, now %.1f MB; for information: RSS now %.1f MB (file-backed %.1f), peak %.1f MB\n", n, 100*t/hz/d, m/1024, a/1024, r/1024, f/1024, h/1024 }'
  [[ ${names[$i]} == node_exporter* ]] && ne_max=${maxanon[$p]}
done
if [ -n "$ne_max" ]; then
  for i in "${!pids[@]}"; do
    [[ ${names[$i]} == gpuwarden* ]] || continue
    m=${maxanon[${pids[$i]}]}
    awk -v n="${names[$i]}" -v m="$m" -v ne="$ne_max" \
      'BEGIN { printf "%-36s RssAnon max %.2fx node_exporter'"'"'s: %s\n", n, m/ne, (m <= ne ? "within the budget" : "OVER the budget") }'
  done
fi
