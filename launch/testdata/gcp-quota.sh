#!/bin/sh
# What `gcloud compute instances create` prints when a regional quota is
# used up.
[ -n "$GW_MARKER" ] && echo "$GPUWARDEN_TARGET" >> "$GW_MARKER"
cat >&2 <<'MSG'
ERROR: (gcloud.compute.instances.create) Could not fetch resource:
 - Quota 'NVIDIA_H100_GPUS' exceeded.  Limit: 0.0 in region us-central1.
MSG
exit 1
