#!/usr/bin/env bash
# The benchmarks behind docs/benchmarks.md. Prints the machine, then each
# benchmark's raw output.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(go version)"
go test ./plan -run '^$' -bench BenchmarkRank100k -benchmem -count 5
go test ./catalog -run '^$' -bench BenchmarkImportSkyPilot50k -benchmem -count 5
go test ./kubelet -run '^$' -bench BenchmarkAttribution -benchmem -count 5
