#!/bin/sh
# A launcher that got as far as asking for the box, then lost the
# connection: nothing says whether the box exists.
[ -n "$GW_MARKER" ] && echo "$GPUWARDEN_TARGET" >> "$GW_MARKER"
echo '    "InstanceId": "i-0fedcba9876543210",'
echo "Error: read tcp 10.0.0.2:51234->52.94.0.1:443: read: connection reset by peer" >&2
exit 1
