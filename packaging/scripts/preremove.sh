#!/bin/sh
# On removal (not on upgrade) stop and disable both services, so that no
# agent keeps running without its binary. deb: $1 is "remove" or "upgrade";
# rpm: $1 is 0 (erase) or 1 (upgrade).
set -e
case "$1" in
remove | 0)
	if [ -d /run/systemd/system ]; then
		systemctl stop gpuwarden.service gpuwarden-server.service >/dev/null 2>&1 || true
	fi
	if command -v systemctl >/dev/null 2>&1; then
		systemctl --no-reload disable gpuwarden.service gpuwarden-server.service >/dev/null 2>&1 || true
	fi
	;;
esac
