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
# gs:// and az:// checkpoint stores (objstore/cloudstores_test.go and the
# run tests): fake-gcs-server, the GCS emulator, built like the Go peers
# above; Azurite, Microsoft's storage emulator, from npm into the cache
# (tests start its blob service with --disableTelemetry).
FAKE_GCS_VERSION=v1.56.1
AZURITE_VERSION=3.35.0
install_go fake-gcs-server github.com/fsouza/fake-gcs-server "$FAKE_GCS_VERSION"
if [ ! -x "$cache/bin/azurite-blob" ] || [ "$(cat "$cache/bin/.azurite.version" 2>/dev/null)" != "$AZURITE_VERSION" ]; then
  echo "== installing azurite $AZURITE_VERSION (cached in $cache/azurite)" >&2
  npm install --silent --no-fund --no-audit -g --prefix "$cache/azurite" "azurite@$AZURITE_VERSION" >&2
  ln -sf ../azurite/bin/azurite-blob "$cache/bin/azurite-blob"
  echo "$AZURITE_VERSION" >"$cache/bin/.azurite.version"
fi

# launch's rules and stops (launch/capture_test.go, launch/moto_test.go and
# cmd/gpuwarden's launch tests) run the real CLIs: aws v1 and moto come with
# the image's Python (pyenv); Debian's awscli is v2 and installs /usr/bin/aws,
# which the pyenv shim shadows on PATH, so both stay usable side by side
# (`aws` is v1, /usr/bin/aws is v2; the tests tell them apart by --version).
# az is Debian's azure-cli; gcloud is in the image.
AWSCLI_V1_VERSION=1.45.11
MOTO_VERSION=5.2.1
AWSCLI_V2_DEB_VERSION=2.9.19-1
AZURE_CLI_DEB_VERSION=2.45.0-1
if ! /usr/bin/aws --version 2>/dev/null | grep -q '^aws-cli/2\.' || ! command -v az >/dev/null 2>&1; then
  echo "== installing awscli $AWSCLI_V2_DEB_VERSION (v2) and azure-cli $AZURE_CLI_DEB_VERSION" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends \
    "awscli=$AWSCLI_V2_DEB_VERSION" "azure-cli=$AZURE_CLI_DEB_VERSION" >/dev/null
fi
if ! python3 -c "import moto, sys; sys.exit(moto.__version__ != '$MOTO_VERSION')" 2>/dev/null ||
  ! aws --version 2>&1 | grep -q "^aws-cli/$AWSCLI_V1_VERSION "; then
  echo "== installing moto[server] $MOTO_VERSION and awscli $AWSCLI_V1_VERSION into the image's Python" >&2
  python3 -m pip install --quiet "moto[server]==$MOTO_VERSION" "awscli==$AWSCLI_V1_VERSION" >&2
  if command -v pyenv >/dev/null 2>&1; then pyenv rehash; fi
fi
command -v gcloud >/dev/null 2>&1 ||
  echo "== gcloud is missing (the image should have it): launch's GCP tests fail under GPUWARDEN_PEER_TESTS=1" >&2

echo "$cache/bin"
