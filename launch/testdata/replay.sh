#!/bin/sh
# Replays a real CLI's captured failure (testdata/cli/NAME.txt): its stderr
# and its exit status, as if the CLI had just printed them.
[ -n "$GW_MARKER" ] && echo "$GPUWARDEN_TARGET" >> "$GW_MARKER"
code=$(sed -n '3s/^# exit: //p' "$1")
sed '1,3d' "$1" >&2
exit "$code"
