#!/bin/sh
# A stop command that fails until its third call, as a terminate does while
# the API throttles: calls are counted in $GW_STATE.
n=$(cat "$GW_STATE" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" > "$GW_STATE"
[ -n "$GW_MARKER" ] && echo "flaky-stop $n" >> "$GW_MARKER"
if [ "$n" -ge 3 ]; then
	echo "no instance named $GPUWARDEN_NAME is left"
	exit 0
fi
echo "An error occurred (RequestLimitExceeded) when calling the TerminateInstances operation (reached max retries: 4): Request limit exceeded." >&2
exit 254
