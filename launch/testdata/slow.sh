#!/bin/sh
# A launcher that hangs, with a helper in the background, as cloud CLIs
# leave behind: the timeout must kill both. The helper's PID goes to
# $GW_PIDFILE so the test can check it is gone.
[ -n "$GW_MARKER" ] && echo "$GPUWARDEN_TARGET" >> "$GW_MARKER"
sleep 30 &
[ -n "$GW_PIDFILE" ] && echo $! > "$GW_PIDFILE"
echo "waiting for the instance to start..."
sleep 30
