#!/usr/bin/env bash
# Makes every release artifact of one commit in dist/ (docs/packaging.md):
#
#   scripts/package.sh [VERSION]
#
#   gpuwarden_V_linux_{amd64,arm64}.tar.gz   binary, units, config, examples, README
#   gpuwarden_V_{amd64,arm64}.deb, gpuwarden-V-1.{x86_64,aarch64}.rpm   (nfpm)
#   gpuwarden_V_sbom.cdx.json                CycloneDX SBOM of the Go modules
#   gpuwarden_V_image.oci.tar, oci/          the container image, an OCI layout
#   gpuwarden-V.tgz                          the Helm chart (when helm is on PATH)
#   install.sh                               scripts/install.sh, for a box
#   checksums.txt                            SHA-256 of all of the above
#
# VERSION defaults to gpuwarden.Version in gpuwarden.go; a leading v is
# dropped. The same commit gives the same bytes: -trimpath, no VCS stamp,
# the commit's time (SOURCE_DATE_EPOCH) as every timestamp, sorted archive
# entries owned by 0:0, gzip without name or time.
#
# Environment: DIST (output folder, default dist), GPUWARDEN_ARCHES (default
# "amd64 arm64"; arm64 needs Debian's gcc-aarch64-linux-gnu), HELM (the helm
# binary; default: helm on PATH, else the peers cache of
# scripts/install-peers.sh), SOURCE_DATE_EPOCH (default: the commit's time).
set -euo pipefail
# The whole script is one function, read before it runs: editing this file
# while a build runs cannot change what that build does.
main() {
cd "$(dirname "$0")/.."
root=$PWD
export PATH="/usr/local/go/bin:$PATH"
started=$(date +%s)
step() { printf '== %s (%ss)\n' "$*" "$(($(date +%s) - started))"; }

version=${1:-$(sed -n 's/^var Version = "\(.*\)"$/\1/p' gpuwarden.go)}
version=${version#v}
if [ -z "$version" ]; then
	echo "package.sh: no VERSION given and none found in gpuwarden.go" >&2
	exit 2
fi
if ! [[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
	echo "package.sh: VERSION $version: want SemVer such as 1.2.3 or 1.2.3-rc.1 (the chart and the packages need it)" >&2
	exit 2
fi
if git rev-parse --verify -q HEAD >/dev/null 2>&1; then
	commit=$(git rev-parse HEAD)
	: "${SOURCE_DATE_EPOCH:=$(git log -1 --format=%ct)}"
	if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
		echo "package.sh: warning: the work tree has uncommitted changes: the artifacts are not those of $commit" >&2
	fi
else
	commit=unknown
	: "${SOURCE_DATE_EPOCH:=0}"
fi
export SOURCE_DATE_EPOCH
date=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
dist=${DIST:-dist}
arches=${GPUWARDEN_ARCHES:-amd64 arm64}
case "$dist" in "" | / | . | ..)
	echo "package.sh: DIST=$dist: refusing to empty it" >&2
	exit 2
	;;
esac
rm -rf "$dist"
mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "package.sh: gpuwarden $version, commit $commit, date $date, into $dist"

step "tools (packaging/tools: nfpm, cyclonedx-gomod, gwpack)"
(cd packaging/tools && go build -trimpath -o "$work/bin/" \
	github.com/goreleaser/nfpm/v2/cmd/nfpm github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod ./gwpack)

# -buildvcs=false: the commit and its date come in through -X, and a VCS
# stamp would differ between a clean CI clone and a developer's edited tree
# (vcs.modified) for the same commit. cgo stays on: nvml/ needs it.
ldflags="-s -w -X github.com/gpuwarden/gpuwarden.Version=$version -X github.com/gpuwarden/gpuwarden.Commit=$commit -X main.buildDate=$date"
for arch in $arches; do
	step "build linux/$arch"
	case $arch in
	amd64) cc=${CC_AMD64:-gcc} ;;
	arm64) cc=${CC_ARM64:-aarch64-linux-gnu-gcc} ;;
	*)
		echo "package.sh: architecture $arch: want amd64 or arm64" >&2
		exit 2
		;;
	esac
	if ! command -v "$cc" >/dev/null; then
		echo "package.sh: $cc not found: linux/$arch is a cgo build (apt-get install gcc-aarch64-linux-gnu for arm64), or set GPUWARDEN_ARCHES" >&2
		exit 3
	fi
	mkdir -p "$work/linux_$arch"
	CGO_ENABLED=1 GOOS=linux GOARCH=$arch CC=$cc go build -trimpath -buildvcs=false -ldflags "$ldflags" \
		-o "$work/linux_$arch/gpuwarden" ./cmd/gpuwarden
done

# reptar DIR NAME...: a tar of DIR's NAMEs on stdout, the same bytes for the
# same files whatever their times, owners, the umask that made them and the
# order readdir gives.
reptar() {
	local dir=$1
	shift
	tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
		--mode='u+rwX,go+rX,go-w' --format=gnu -C "$dir" -cf - "$@"
}

for arch in $arches; do
	step "archive linux/$arch"
	name=gpuwarden_${version}_linux_$arch
	stage=$work/stage/$name
	mkdir -p "$stage/examples"
	install -m 0755 "$work/linux_$arch/gpuwarden" "$stage/gpuwarden"
	install -m 0644 README.md packaging/systemd/gpuwarden.service packaging/systemd/gpuwarden-server.service "$stage/"
	install -m 0644 packaging/etc/gpuwarden.yaml "$stage/gpuwarden.yaml"
	install -m 0644 packaging/etc/gpuwarden.default "$stage/gpuwarden.default"
	install -m 0644 examples/*.yaml examples/*.csv examples/*.py "$stage/examples/"
	if [ -f LICENSE ]; then
		install -m 0644 LICENSE "$stage/"
	fi
	chmod 0755 "$stage" "$stage/examples"
	reptar "$work/stage" "$name" | gzip -n -9 >"$dist/$name.tar.gz"
done

step "packages (.deb, .rpm)"
for arch in $arches; do
	rpm_arch=$(case $arch in amd64) echo x86_64 ;; arm64) echo aarch64 ;; esac)
	# Names of our own: nfpm's would carry its rewrite of a SemVer
	# pre-release (1.2.3~rc.1-1), which install docs and tests cannot guess.
	for target in "deb:gpuwarden_${version}_$arch.deb" "rpm:gpuwarden-$version-1.$rpm_arch.rpm"; do
		GPUWARDEN_VERSION=$version GPUWARDEN_ARCH=$arch GPUWARDEN_BIN=$work/linux_$arch/gpuwarden \
			"$work/bin/nfpm" package --config packaging/nfpm.yaml --packager "${target%%:*}" --target "$dist/${target#*:}" >/dev/null
	done
done

step "SBOM (CycloneDX, the Go modules of cmd/gpuwarden)"
# No serial number and no timestamp: both would change the bytes of every
# build; the version, the commit and checksums.txt identify it.
GOOS=linux GOARCH=amd64 CGO_ENABLED=1 "$work/bin/cyclonedx-gomod" app -json -noserial -notimestamp \
	-main cmd/gpuwarden -output "$dist/gpuwarden_${version}_sbom.cdx.json" "$root" 2>"$work/sbom.log" ||
	{
		cat "$work/sbom.log" >&2
		exit 1
	}

step "container image (OCI layout)"
bins=()
for arch in $arches; do
	bins+=(-bin "$arch=$work/linux_$arch/gpuwarden")
done
"$work/bin/gwpack" image -out "$dist/oci" -version "$version" -revision "$commit" -created "$date" "${bins[@]}" >/dev/null
# The layout at the tar's root: an oci-archive for skopeo, podman load.
reptar "$dist/oci" oci-layout index.json blobs >"$dist/gpuwarden_${version}_image.oci.tar"

helm=${HELM:-$(command -v helm || echo "$HOME/.cache/gpuwarden-peers/bin/helm")}
if [ -x "$helm" ]; then
	step "Helm chart"
	"$helm" package charts/gpuwarden --version "$version" --app-version "$version" -d "$dist" >/dev/null
	"$work/bin/gwpack" retime "$dist/gpuwarden-$version.tgz"
else
	echo "package.sh: warning: no helm (scripts/install-peers.sh builds it): the chart is not packaged" >&2
fi

# The box installer rides with the release, so the release's own
# checksums.txt covers it too.
install -m 0755 scripts/install.sh "$dist/install.sh"

step "checksums"
(cd "$dist" && find . -maxdepth 1 -type f ! -name checksums.txt -printf '%f\n' | LC_ALL=C sort | xargs sha256sum >checksums.txt)
ls -l "$dist"
step "done"
}

main "$@"; exit
