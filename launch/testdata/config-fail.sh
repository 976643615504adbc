#!/bin/sh
# What `aws ec2 run-instances` prints for an image ID that does not exist
# in the region (InvalidAMIID.NotFound).
[ -n "$GW_MARKER" ] && echo "$GPUWARDEN_TARGET" >> "$GW_MARKER"
echo >&2
echo "An error occurred (InvalidAMIID.NotFound) when calling the RunInstances operation: The image id '[ami-0123456789abcdef0]' does not exist" >&2
exit 254
