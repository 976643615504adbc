#!/bin/sh
# What `az vm create` prints when the size is not available to the
# subscription in the location (SkuNotAvailable).
[ -n "$GW_MARKER" ] && echo "$GPUWARDEN_TARGET" >> "$GW_MARKER"
cat >&2 <<'MSG'
(SkuNotAvailable) The requested VM size for resource 'Following SKUs have failed for Capacity Restrictions: Standard_ND96isr_H100_v5' is currently not available in location 'eastus'. Please try another size or deploy to a different location or zones. See https://aka.ms/azureskunotavailable for details.
Code: SkuNotAvailable
MSG
exit 1
