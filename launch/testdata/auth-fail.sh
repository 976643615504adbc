#!/bin/sh
# What `aws ec2 run-instances` prints when IAM denies the launch
# (UnauthorizedOperation).
[ -n "$GW_MARKER" ] && echo "$GPUWARDEN_TARGET" >> "$GW_MARKER"
echo >&2
echo "An error occurred (UnauthorizedOperation) when calling the RunInstances operation: You are not authorized to perform this operation. User: arn:aws:iam::123456789012:user/ci is not authorized to perform: ec2:RunInstances on resource: arn:aws:ec2:us-east-1:123456789012:instance/* because no identity-based policy allows the ec2:RunInstances action. Encoded authorization failure message: 4Nq2b0" >&2
exit 254
