#!/bin/sh
# What `aws ec2 run-instances` (AWS CLI v2) prints when the zone has no
# capacity: EC2 error code InsufficientInstanceCapacity; the CLI exits 254
# when the service returned an error.
[ -n "$GW_MARKER" ] && echo "$GPUWARDEN_TARGET" >> "$GW_MARKER"
echo >&2
echo "An error occurred (InsufficientInstanceCapacity) when calling the RunInstances operation: We currently do not have sufficient p5.48xlarge capacity in the Availability Zone you requested (us-east-1a). Our system will be working on provisioning additional capacity. You can currently get p5.48xlarge capacity by not specifying an Availability Zone in your request or choosing us-east-1b, us-east-1c." >&2
exit 254
