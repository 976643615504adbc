#!/usr/bin/env bash
# Measures the fleet server's ingest with `gpuwarden bench fleet`: the real
# server on loopback, AGENTS agents on a fixed-rate schedule, latency timed
# from each request's intended send, and the database's own ceiling (the
# heartbeat UPDATE batched 100 per transaction, straight on the store)
# measured in the same run. It steps the offered rate through each list,
# first on SQLite, then on a throwaway PostgreSQL cluster started from the
# system binaries with its durable defaults (fsync and synchronous_commit
# on), the way a team would run it.
# Usage: scripts/bench-fleet.sh [AGENTS] [SECONDS] ["SQLITE RATES"] ["POSTGRES RATES"]
set -euo pipefail
cd "$(dirname "$0")/.."
agents=${1:-1000}
secs=${2:-10}
sqlite_rates=${3:-"3000 5000 10000"}
pg_rates=${4:-"2000 3500 5000"}
bin=${GPUWARDEN:-bin/gpuwarden}
go build -o "$bin" ./cmd/gpuwarden
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load average $(cut -d' ' -f1-3 /proc/loadavg)"
run() { # DB-FLAGS... -- TARGET RATE
  local target=$1 rate=$2; shift 2
  local per=$(awk -v r="$rate" -v a="$agents" 'BEGIN { printf "%.4f", r/a }')
  echo "-- offered $rate/s ($agents agents at $per/s each), budget ≥ $target/s, p99 ≤ 50 ms"
  "$bin" bench fleet --agents "$agents" --rate "$per" --duration "${secs}s" --ceiling --min-rate "$target" "$@" || true
}

echo "== SQLite"
for r in $sqlite_rates; do run 10000 "$r"; done

pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$pgbin" ]; then
  echo "== PostgreSQL: not installed (apt-get install postgresql)"; exit 0
fi
dir=$(mktemp -d)
chmod 755 "$dir"
as=()
if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; as=(runuser -u postgres --); fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"${as[@]}" "$pgbin/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --locale=C >/dev/null
"${as[@]}" "$pgbin/pg_ctl" -D "$dir/data" -l "$dir/log" -w start \
  -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200" >/dev/null
trap '"${as[@]}" "$pgbin/pg_ctl" -D "$dir/data" -m fast stop >/dev/null; rm -rf "$dir"' EXIT
echo "== PostgreSQL $("$pgbin/postgres" --version | awk '{print $3}') (fsync on, synchronous_commit on)"
for r in $pg_rates; do
  run 5000 "$r" --db "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
done
