#!/usr/bin/env bash
# Measures the fleet server's ingest: `gpuwarden bench fleet` on SQLite, then
# on a throwaway PostgreSQL cluster started from the system binaries with
# its durable defaults (fsync and synchronous_commit on), the way a team
# would run it. Usage: scripts/bench-fleet.sh [AGENTS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
agents=${1:-1000}
secs=${2:-20}
bin=${GPUWARDEN:-bin/gpuwarden}
go build -o "$bin" ./cmd/gpuwarden
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"

echo "== SQLite"
"$bin" bench fleet --agents "$agents" --duration "${secs}s" || true

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
"$bin" bench fleet --agents "$agents" --duration "${secs}s" --db "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable" || true
