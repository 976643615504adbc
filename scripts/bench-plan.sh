#!/usr/bin/env bash
# bench-plan.sh: `gpuwarden plan` end to end on generated own-format price
# files of 100,000 and 1,000,000 rows, first read (no parsed-catalog cache)
# and again (cached), with wall time and peak RSS, beside the file size and
# an idle run of the same binary (`gpuwarden version`) as the floor.
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
read -r -a rows <<<"${rows[*]}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=${GPUWARDEN:-}
if [ -z "$bin" ]; then
  bin=$work/gpuwarden
  go build -o "$bin" ./cmd/gpuwarden
fi
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
uncache() { python3 -c 'import os,sys
fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1"; }
measure() { # label, then the command
  local label=$1; shift
  /usr/bin/time -f "%e %M" -o "$work/time" "$@" >"$work/out" 2>"$work/err" || {
    echo "$label: exit $?"; cat "$work/err"; exit 1; }
  read -r wall kb <"$work/time"
  printf '%-28s %6.2f s %8.1f MB peak RSS\n' "$label" "$wall" "$(echo "$kb/1024" | bc -l)"
}
if [ "${rows[0]}" = gen ]; then gen "${rows[1]}"; exit; fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin" version | head -1
uncache "$bin"
measure "idle (version)" "$bin" version
for n in "${rows[@]}"; do
  csv=$work/prices-$n.csv
  gen "$n" >"$csv"
  printf '%d rows, %.1f MB file\n' "$n" "$(echo "$(stat -c %s "$csv")/1048576" | bc -l)"
  data=$work/data-$n
  for run in first cached; do
    measure "  plan -o json ($run)" "$bin" plan examples/qlora-7b.yaml --data-dir "$data" --no-embedded --catalog "$csv" -o json
  done
  measure "  plan table (cached)" "$bin" plan examples/qlora-7b.yaml --data-dir "$data" --no-embedded --catalog "$csv"
done
