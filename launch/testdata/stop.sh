#!/bin/sh
# A stop command that works: it writes its arguments to $GW_MARKER.
[ -n "$GW_MARKER" ] && echo "stop $*" >> "$GW_MARKER"
exit 0
