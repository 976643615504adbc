#!/bin/sh
# Installs gpuwarden on a Linux box from a release archive (docs/packaging.md):
#
#   curl -fsSL https://github.com/gpuwarden/gpuwarden/releases/latest/download/install.sh | sudo sh
#   sh install.sh [--from URL] [--version V] [--prefix DIR] [--root DIR] [--arch ARCH] [--no-unit]
#
# It downloads checksums.txt and gpuwarden_V_linux_ARCH.tar.gz from --from
# into a temporary folder, checks the archive's SHA-256 against
# checksums.txt, and only then unpacks it and installs
#   PREFIX/bin/gpuwarden                          (PREFIX: /usr/local)
#   /etc/systemd/system/gpuwarden.service          (ExecStart: that binary)
#   /etc/gpuwarden/gpuwarden.yaml, /etc/default/gpuwarden (only when absent)
# all under --root (default /). Nothing it downloaded runs before the check:
# a mismatch stops it with nothing written outside the temporary folder,
# which is removed on every exit. It enables nothing: it prints the next
# step. POSIX sh; needs curl or wget, tar, gzip and sha256sum (or shasum).
set -eu

from=https://github.com/gpuwarden/gpuwarden/releases/latest/download
version=
prefix=/usr/local
root=/
arch=
unit=yes

die() {
	echo "install.sh: $*" >&2
	exit 1
}
usage() {
	echo "install.sh: $*" >&2
	echo "usage: install.sh [--from URL] [--version V] [--prefix DIR] [--root DIR] [--arch amd64|arm64] [--no-unit]" >&2
	exit 2
}

while [ $# -gt 0 ]; do
	case $1 in
	--from | --version | --prefix | --root | --arch)
		[ $# -ge 2 ] || usage "$1 needs a value"
		case $1 in
		--from) from=$2 ;;
		--version) version=${2#v} ;;
		--prefix) prefix=$2 ;;
		--root) root=$2 ;;
		--arch) arch=$2 ;;
		esac
		shift 2
		;;
	--from=* | --version=* | --prefix=* | --root=* | --arch=*)
		v=${1#*=}
		case $1 in
		--from=*) from=$v ;;
		--version=*) version=${v#v} ;;
		--prefix=*) prefix=$v ;;
		--root=*) root=$v ;;
		--arch=*) arch=$v ;;
		esac
		shift
		;;
	--no-unit)
		unit=no
		shift
		;;
	-h | --help)
		sed -n '2,16s/^# \{0,1\}//p' "$0" 2>/dev/null || true
		exit 0
		;;
	*) usage "unknown argument $1" ;;
	esac
done
from=${from%/}
case $prefix in /*) ;; *) usage "--prefix $prefix: want an absolute path" ;; esac
case $root in /*) ;; *) usage "--root $root: want an absolute path" ;; esac
root=${root%/}

if [ -z "$arch" ]; then
	[ "$(uname -s)" = Linux ] || die "$(uname -s): only Linux builds are released (docs/packaging.md)"
	case $(uname -m) in
	x86_64 | amd64) arch=amd64 ;;
	aarch64 | arm64) arch=arm64 ;;
	*) die "$(uname -m): no release for this architecture (amd64 and arm64 only)" ;;
	esac
fi
case $arch in amd64 | arm64) ;; *) usage "--arch $arch: want amd64 or arm64" ;; esac

if command -v curl >/dev/null 2>&1; then
	fetch() { curl -fsSL --proto '=https,http,file' -o "$2" "$1"; }
elif command -v wget >/dev/null 2>&1; then
	fetch() { wget -q -O "$2" "$1"; }
else
	die "neither curl nor wget found"
fi
if command -v sha256sum >/dev/null 2>&1; then
	sha256() { sha256sum "$1" | cut -d' ' -f1; }
elif command -v shasum >/dev/null 2>&1; then
	sha256() { shasum -a 256 "$1" | cut -d' ' -f1; }
else
	die "neither sha256sum nor shasum found: cannot check the download"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpuwarden-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

echo "install.sh: fetching $from/checksums.txt"
fetch "$from/checksums.txt" "$tmp/checksums.txt" || die "cannot download $from/checksums.txt"
if [ -n "$version" ]; then
	name=gpuwarden_${version}_linux_$arch.tar.gz
else
	# The release's checksums name its one archive per architecture, and so
	# its version.
	name=$(awk -v a="$arch" '$2 ~ "^gpuwarden_[0-9][^_]*_linux_" a "\\.tar\\.gz$" { print $2 }' "$tmp/checksums.txt")
	[ -n "$name" ] || die "checksums.txt at $from names no archive for linux/$arch"
	[ "$(printf '%s\n' "$name" | wc -l)" -eq 1 ] || die "checksums.txt at $from names several archives for linux/$arch: give --version"
fi
want=$(awk -v n="$name" '$2 == n || $2 == "*" n { print $1 }' "$tmp/checksums.txt")
[ -n "$want" ] || die "checksums.txt at $from has no line for $name"

echo "install.sh: fetching $from/$name"
fetch "$from/$name" "$tmp/$name" || die "cannot download $from/$name"
got=$(sha256 "$tmp/$name")
if [ "$got" != "$want" ]; then
	die "$name: SHA-256 $got, but checksums.txt says $want: refusing to install it"
fi
echo "install.sh: $name: SHA-256 matches checksums.txt"

# Verified: now it may be unpacked. The archive holds one folder named after
# it; anything else is refused before a byte is copied out.
dir=${name%.tar.gz}
mkdir "$tmp/x"
tar -xzf "$tmp/$name" -C "$tmp/x" --no-same-owner
for f in "$tmp"/x/* "$tmp"/x/.[!.]*; do
	[ -e "$f" ] || continue
	[ "$f" = "$tmp/x/$dir" ] || die "$name holds $(basename "$f") besides $dir/: refusing to install it"
done
src=$tmp/x/$dir
[ -f "$src/gpuwarden" ] || die "$name has no $dir/gpuwarden"

bin=$prefix/bin/gpuwarden
if ! mkdir -p "$root$prefix/bin" 2>/dev/null || ! [ -w "$root$prefix/bin" ]; then
	die "cannot write $root$prefix/bin: run as root (sudo sh install.sh), or give --prefix"
fi
# A new file renamed over the old one: a running agent keeps its binary.
cp "$src/gpuwarden" "$root$bin.new"
chmod 0755 "$root$bin.new"
mv -f "$root$bin.new" "$root$bin"
echo "install.sh: installed $root$bin"

install_once() { # SRC DEST MODE: config the admin may have edited is kept
	if [ -e "$2" ]; then
		echo "install.sh: kept $2 (it exists)"
	else
		mkdir -p "$(dirname "$2")"
		cp "$1" "$2"
		chmod "$3" "$2"
		echo "install.sh: installed $2"
	fi
}
install_once "$src/gpuwarden.yaml" "$root/etc/gpuwarden/gpuwarden.yaml" 0640
install_once "$src/gpuwarden.default" "$root/etc/default/gpuwarden" 0640
if [ "$unit" = yes ]; then
	mkdir -p "$root/etc/systemd/system"
	# The unit names the packages' /usr/bin/gpuwarden: point it at this one.
	sed "s|/usr/bin/gpuwarden|$bin|g" "$src/gpuwarden.service" >"$root/etc/systemd/system/gpuwarden.service.new"
	chmod 0644 "$root/etc/systemd/system/gpuwarden.service.new"
	mv -f "$root/etc/systemd/system/gpuwarden.service.new" "$root/etc/systemd/system/gpuwarden.service"
	echo "install.sh: installed $root/etc/systemd/system/gpuwarden.service"
	if [ -z "$root" ] && [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
	fi
fi

"$root$bin" version || true
cat <<EOF
Nothing was enabled or started. Next: set the idle window and budget in
/etc/gpuwarden/gpuwarden.yaml and the options in /etc/default/gpuwarden, then
  sudo systemctl enable --now gpuwarden
EOF
