#!/bin/sh
# Removal keeps the config (/etc/gpuwarden, /etc/default/gpuwarden: dpkg
# keeps conffiles) and the data (the ledgers in /var/lib/gpuwarden and
# /var/lib/gpuwarden-server); a purge (dpkg -P, deb only: rpm has none)
# deletes them. The gpuwarden user stays (preinstall.sh says why).
set -e
case "$1" in
purge)
	rm -rf /etc/gpuwarden /var/lib/gpuwarden /var/lib/gpuwarden-server
	;;
esac
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
