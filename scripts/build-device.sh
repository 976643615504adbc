#!/usr/bin/env bash
# Builds, on a machine with Go, everything scripts/device-check.sh runs on a
# GPU host that has no Go: the binary and the gpu-tagged test binaries, in bin/
# (ignored by git; pass it to the device runner as a carried path).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin
go build -o bin/gpuwarden ./cmd/gpuwarden
go test -c -tags gpu -o bin/nvml.test ./nvml
go test -c -tags gpu -o bin/cuda.test ./cuda
ls -l bin
