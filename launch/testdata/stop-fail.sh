#!/bin/sh
# A stop command that fails, as `aws ec2 terminate-instances` does for an ID
# that is not there.
[ -n "$GW_MARKER" ] && echo "stop-fail $*" >> "$GW_MARKER"
echo "An error occurred (InvalidInstanceID.NotFound) when calling the TerminateInstances operation: The instance ID '$1' does not exist" >&2
exit 254
