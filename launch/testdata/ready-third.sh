#!/bin/sh
# A ready check that succeeds on its third call, as an SSH probe does once
# the box has booted. Calls are counted in $GW_STATE.
n=$(cat "$GW_STATE" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" > "$GW_STATE"
if [ "$n" -ge 3 ]; then
	echo "ready"
	exit 0
fi
echo "ssh: connect to host 203.0.113.7 port 22: Connection refused" >&2
exit 255
