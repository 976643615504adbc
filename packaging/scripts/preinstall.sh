#!/bin/sh
# The server runs as the `gpuwarden` system user (gpuwarden-server.service);
# the agent stays root (gpuwarden.service says why). Made before the files
# are unpacked, kept on removal and purge so that no later user inherits
# files it owned.
set -e
if ! getent group gpuwarden >/dev/null 2>&1; then
	groupadd --system gpuwarden
fi
if ! getent passwd gpuwarden >/dev/null 2>&1; then
	useradd --system --gid gpuwarden --home-dir /var/lib/gpuwarden-server --no-create-home \
		--shell /usr/sbin/nologin --comment "gpuwarden fleet server" gpuwarden
fi
