#!/bin/sh
# What `aws ec2 run-instances` prints when the account's vCPU quota for the
# instance family is too small: EC2 error code VcpuLimitExceeded (new
# accounts start at 0 for the P family).
[ -n "$GW_MARKER" ] && echo "$GPUWARDEN_TARGET" >> "$GW_MARKER"
echo >&2
echo "An error occurred (VcpuLimitExceeded) when calling the RunInstances operation: You have requested more vCPU capacity than your current vCPU limit of 0 allows for the instance bucket that the specified instance type belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit." >&2
exit 254
