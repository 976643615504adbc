#!/bin/sh
# What `gcloud compute instances create` prints when the zone has no
# capacity (ZONE_RESOURCE_POOL_EXHAUSTED).
[ -n "$GW_MARKER" ] && echo "$GPUWARDEN_TARGET" >> "$GW_MARKER"
cat >&2 <<'MSG'
ERROR: (gcloud.compute.instances.create) Could not fetch resource:
 - The zone 'projects/acme-train/zones/us-central1-a' does not have enough resources available to fulfill the request.  Try a different zone, or try again later.
MSG
exit 1
