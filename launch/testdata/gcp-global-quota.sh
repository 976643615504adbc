#!/bin/sh
# What `gcloud compute instances create` prints when the project-wide GPU
# quota, GPUS_ALL_REGIONS, is used up (new projects have it at 0).
[ -n "$GW_MARKER" ] && echo "$GPUWARDEN_TARGET" >> "$GW_MARKER"
cat >&2 <<'MSG'
ERROR: (gcloud.compute.instances.create) Could not fetch resource:
 - Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally.
MSG
exit 1
