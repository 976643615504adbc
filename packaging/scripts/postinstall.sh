#!/bin/sh
# Enables and starts nothing: the agent stops boxes, so turning it on is the
# admin's decision, made after reading the plan file. Says what comes next.
# deb: $1 is "configure"; rpm: $1 is 1 (install) or 2 (upgrade).
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
case "$1" in
configure | 1 | "")
	cat <<'MSG'
gpuwarden is installed; nothing was enabled or started.
Next: set the idle window and budget in /etc/gpuwarden/gpuwarden.yaml and the
options (webhooks, --dry-run for a first day) in /etc/default/gpuwarden, then
  sudo systemctl enable --now gpuwarden          # the agent, on a GPU box
  sudo systemctl enable --now gpuwarden-server   # the fleet server, on one machine
Try it first: gpuwarden plan /usr/share/doc/gpuwarden/examples/qlora-7b.yaml
MSG
	;;
esac
