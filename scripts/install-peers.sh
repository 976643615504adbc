#!/usr/bin/env bash
# Installs the real outside software the end-to-end tests drive, into a cache
# that survives between runs (MinIO takes about 11 minutes to build on two
# cores, so it is built once per version):
#   - AWS's amazon-ec2-metadata-mock (IMDS notices)
#   - MinIO (a real S3 server)
#   - helm (the chart's lint and render tests)
#   - Debian's python3-torch (the PyTorch example, on the CPU)
#   - Debian's prometheus (promtool and the server: rules and dashboard tests)
# Prints the cache's bin folder last; put it on PATH:
#   export PATH="$(scripts/install-peers.sh | tail -1):$PATH"
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH"
AEMM_VERSION=v1.13.0
# helm lints and renders charts/gpuwarden in deploy/chart_test.go.
HELM_VERSION=v3.22.0
# MinIO publishes no module versions; this is the pseudo-version @latest
# resolved to when the tests were written, pinned so CI builds the same server.
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
cache="${GPUWARDEN_PEERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuwarden-peers}"
mkdir -p "$cache/bin"

install_go() { # name module version
  local name=$1 module=$2 version=$3 stamp="$cache/bin/.$1.version"
  if [ -x "$cache/bin/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
    return
  fi
  echo "== building $name $version (cached in $cache/bin)" >&2
  GOBIN="$cache/bin" go install "$module@$version" >&2
  echo "$version" >"$stamp"
}

install_go ec2-metadata-mock github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock "$AEMM_VERSION"
install_go minio github.com/minio/minio "$MINIO_VERSION"
install_go helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION"

# Debian's prometheus package: promtool tests the alerting rules, the server
# scrapes real agents for the Grafana dashboard test.
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  echo "== installing prometheus" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

if ! /usr/bin/python3 -c 'import torch' >/dev/null 2>&1; then
  echo "== installing python3-torch" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 && apt-get install -y -qq python3-torch >/dev/null
fi
echo "$cache/bin"
