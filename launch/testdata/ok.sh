#!/bin/sh
# A launch that works: the lines of `aws ec2 run-instances` output that
# name the instance, then the environment launch passed.
[ -n "$GW_MARKER" ] && echo "$GPUWARDEN_TARGET" >> "$GW_MARKER"
echo '{'
echo '  "Instances": ['
echo '    {'
echo '      "InstanceId": "i-0abc123def4567890",'
echo '      "InstanceType": "p5.48xlarge",'
echo '    }'
echo '  ]'
echo '}'
echo "env: launch=$GPUWARDEN_LAUNCH_ID target=$GPUWARDEN_TARGET name=$GPUWARDEN_NAME zone=$GPUWARDEN_ZONE"
exit 0
