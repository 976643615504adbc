#!/usr/bin/env bash
# bench-plan.sh: `gpuwarden plan` end to end on generated own-format price
# files of 100,000 and 1,000,000 rows, first read (no parsed-catalog cache)
# and again (cached), with wall time and peak RSS (REPS runs each, default
# 3, the range printed), beside the file size, an idle run of the same
# binary (`gpuwarden version`) and, as ceilings, wc -l and sha256sum on the
# file.
#
#   scripts/bench-plan.sh [ROWS...]      (default: 100000 1000000)
#   GPUWARDEN=path/to/gpuwarden scripts/bench-plan.sh
#   scripts/bench-plan.sh gen ROWS > prices.csv   (only write the file)
#
# Rows are shaped like the in-process benchmark's (BenchmarkPlanJSON100kBudget):
# five GPU models, six places, one to eight GPUs, half with a spot price, a
# tenth with a monthly one, dated, priced so that the example's $500 budget
# excludes most big boxes.
set -euo pipefail
cd "$(dirname "$0")/.."
rows=("${@:-100000 1000000}")
reps=${REPS:-3}
read -r -a rows <<<"${rows[*]}"
gen() {
  awk -v n="$1" 'BEGIN {
    srand(11)
    split("T4,16 L4,24 RTX-4090,24 A100-80GB,80 H100-SXM,80", g, " ")
    split("aws,us-east-1,US aws,eu-central-1,DE gcp,europe-west4,NL lambda,us-west-1,US runpod,EU-RO-1,RO vast,Germany,DE", p, " ")
    print "provider,region,country,instance,gpu,gpu_count,vram_gb_per_gpu,currency,on_demand_hourly,spot_hourly,monthly,as_of,source"
    for (i = 0; i < n; i++) {
      count = 2 ^ int(rand() * 4)
      od = count * (0.1 + rand() * 5.9)
      spot = ""; if (rand() < 0.5) spot = sprintf("%.4f", od * 0.4)
      monthly = ""; if (rand() < 0.1) monthly = sprintf("%.2f", od * 500)
      split(g[1 + int(rand() * 5)], gpu, ",")
      printf "%s,box-%d,%s,%d,%s,USD,%.4f,%s,%s,2026-11,bench\n", p[1 + int(rand() * 6)], i, gpu[1], count, gpu[2], od, spot, monthly
    }
  }'
}
if [ "${1:-}" = gen ]; then
  [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "usage: $0 gen ROWS" >&2; exit 2; }
  gen "$2"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=${GPUWARDEN:-}
if [ -z "$bin" ]; then
  bin=$work/gpuwarden
  go build -o "$bin" ./cmd/gpuwarden
fi
uncache() { python3 -c 'import os,sys
fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1"; }
measure() { # label, then the command; runs it $reps times, prints the range
  local label=$1; shift
  local walls=() kbs=()
  for _ in $(seq "$reps"); do
    local t0=$EPOCHREALTIME
    /usr/bin/time -f "%M" -o "$work/time" "$@" >"$work/out" 2>"$work/err" || {
      echo "$label: exit $?"; cat "$work/err"; exit 1; }
    local t1=$EPOCHREALTIME
    walls+=("$(echo "scale=3; ($t1 - $t0) / 1" | bc | sed 's/^\./0./')") kbs+=("$(tail -1 "$work/time")")
  done
  printf '%-30s %s s  peak RSS %s MB\n' "$label" "$(range "${walls[@]}")" \
    "$(range "$(for k in "${kbs[@]}"; do echo "scale=1; $k/1024" | bc; done)")"
}
range() { printf '%s\n' "$@" | sort -n | sed -n '1p;$p' | paste -sd- | sed 's/^\(.*\)-\1$/\1/'; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin" version | head -1
uncache "$bin"
measure "idle (version)" "$bin" version
for n in "${rows[@]}"; do
  csv=$work/prices-$n.csv
  gen "$n" >"$csv"
  printf '%d rows, %.1f MB file\n' "$n" "$(echo "$(stat -c %s "$csv")/1048576" | bc -l)"
  data=$work/data-$n
  # The ceilings in the same run: reading the file's bytes (wc -l) and
  # hashing them on one core (sha256sum; a cached run hashes the file in 1 MiB
  # pieces on every core before anything else).
  measure "  wc -l (read the file)" wc -l "$csv"
  measure "  sha256sum" sha256sum "$csv"
  # first: each run without the parsed-catalog cache (removed before it).
  measure "  plan -o json (first)" sh -c 'rm -rf "$1/cache"; shift; exec "$@"' _ "$data" \
    "$bin" plan examples/qlora-7b.yaml --data-dir "$data" --no-embedded --catalog "$csv" -o json
  measure "  plan -o json (cached)" "$bin" plan examples/qlora-7b.yaml --data-dir "$data" --no-embedded --catalog "$csv" -o json
  measure "  plan table (cached)" "$bin" plan examples/qlora-7b.yaml --data-dir "$data" --no-embedded --catalog "$csv"
  # As a user runs it: the embedded snapshot and the file.
  measure "  plan -o json, snapshot too" "$bin" plan examples/qlora-7b.yaml --data-dir "$data" --catalog "$csv" -o json
done
