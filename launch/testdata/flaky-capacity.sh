#!/bin/sh
# Out of capacity on the first call, launched on the next: capacity that
# comes back between rounds. Calls are counted in $GW_STATE.
[ -n "$GW_MARKER" ] && echo "$GPUWARDEN_TARGET" >> "$GW_MARKER"
n=$(cat "$GW_STATE" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" > "$GW_STATE"
if [ "$n" -ge 2 ]; then
	echo '      "InstanceId": "i-0aaaabbbbccccdddd",'
	exit 0
fi
echo "An error occurred (InsufficientInstanceCapacity) when calling the RunInstances operation: We currently do not have sufficient p5.48xlarge capacity in the Availability Zone you requested (us-east-1a)." >&2
exit 254
