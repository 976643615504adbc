#!/usr/bin/env bash
# The `gpuwarden run` figures in docs/benchmarks.md, in one run against the
# real peers (scripts/install-peers.sh installs them):
#   1. notice -> checkpoint signal: AWS's amazon-ec2-metadata-mock serves a
#      spot interruption from a trigger time; the latency is the supervisor's
#      "checkpointing and stopping" log line minus that time, with one raw
#      IMDSv2 poll (token + GET, curl) beside it as the floor;
#   2. upload and restore MB/s to a real MinIO, beside raw minio-go PUT/GET
#      of the same bytes (BenchmarkMinIOSync).
#   scripts/bench-run.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
rounds=${1:-5}
peers="$(scripts/install-peers.sh | tail -1)"
export PATH="$peers:$PATH"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(go version | cut -d' ' -f3)"
go build -o "$work/gpuwarden" ./cmd/gpuwarden
go build -o "$work/trainer" ./examples/trainer

echo "== notice -> checkpoint signal, against amazon-ec2-metadata-mock $(ec2-metadata-mock --version 2>&1 | tail -1)"
for i in $(seq "$rounds"); do
  port=$((18337 + i))
  trigger=$(date -u -d '+3 seconds' +%Y-%m-%dT%H:%M:%SZ)
  (cd "$work" && HOME="$work" exec ec2-metadata-mock -n 127.0.0.1 -p $port -I --mock-trigger-time "$trigger" \
    spot --rebalance-delay-sec 3600 -t "$(date -u -d '+60 seconds' +%Y-%m-%dT%H:%M:%SZ)" >/dev/null 2>&1) &
  aemm=$!
  rm -rf "$work/ckpt" "$work/data"
  "$work/gpuwarden" run --cloud aws --aws-metadata "http://127.0.0.1:$port" --grace 2s \
    --checkpoint-dir "$work/ckpt" --data-dir "$work/data" -o json -- \
    "$work/trainer" --steps 1000000 --every 1000000 --step-time 10ms >"$work/out.json" 2>"$work/err.log" &
  run=$!
  for _ in $(seq 200); do
    grep -q "checkpointing and stopping the job" "$work/err.log" 2>/dev/null && break
    sleep 0.05
  done
  kill -TERM $run 2>/dev/null || true
  wait $run 2>/dev/null || true
  signalled=$(grep -m1 "checkpointing and stopping the job" "$work/err.log" | sed -E 's/^time=([^ ]+).*/\1/')
  # One raw IMDSv2 poll, as the floor of what any poller pays.
  floor=$( { /usr/bin/time -f %e sh -c "t=\$(curl -s -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' http://127.0.0.1:$port/latest/api/token); curl -s -o /dev/null -H \"X-aws-ec2-metadata-token: \$t\" http://127.0.0.1:$port/latest/meta-data/spot/instance-action"; } 2>&1 )
  kill $aemm 2>/dev/null || true
  wait $aemm 2>/dev/null || true
  python3 - "$trigger" "$signalled" "$floor" <<'EOF'
import sys, datetime
t = datetime.datetime.fromisoformat(sys.argv[1].replace("Z", "+00:00"))
s = datetime.datetime.fromisoformat(sys.argv[2].replace("Z", "+00:00"))
print(f"round: trigger {sys.argv[1]}  signalled {sys.argv[2]}  latency {(s - t).total_seconds():.3f} s  (one raw poll {float(sys.argv[3]):.3f} s)")
EOF
done

echo "== upload and restore against MinIO $(minio --version 2>&1 | head -1)"
go test ./objstore -run '^$' -bench MinIOSync -benchtime 3x -count 3
