package cuda

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/gpuwarden/gpuwarden"
)

// UUID is a device's 16-byte identifier, a CUuuid. NVML prints the same
// bytes as "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" for a whole GPU and
// "MIG-…" for a MIG instance, which is how the two APIs are matched: their
// ordinals need not agree (CUDA_DEVICE_ORDER, CUDA_VISIBLE_DEVICES), the
// UUID always does.
type UUID [16]byte

// String is the hex form with dashes, without a prefix.
func (u UUID) String() string {
	h := hex.EncodeToString(u[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// ParseUUID reads NVML's form: "GPU-" or "MIG-" and 32 hex digits in the
// 8-4-4-4-12 grouping. The pre-R470 MIG form "MIG-GPU-…/gi/ci" names an
// instance by its parent and indexes and has no 16 bytes of its own, so it
// is refused.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	rest, ok := strings.CutPrefix(s, "GPU-")
	if !ok {
		rest, ok = strings.CutPrefix(s, "MIG-")
	}
	if !ok {
		return u, fmt.Errorf("uuid %q: want GPU-… or MIG-… as NVML prints it", s)
	}
	groups := strings.Split(rest, "-")
	if len(groups) != 5 || len(groups[0]) != 8 || len(groups[1]) != 4 || len(groups[2]) != 4 ||
		len(groups[3]) != 4 || len(groups[4]) != 12 {
		return u, fmt.Errorf("uuid %q: want 8-4-4-4-12 hex digits after the prefix", s)
	}
	if _, err := hex.Decode(u[:], []byte(strings.Join(groups, ""))); err != nil {
		return u, fmt.Errorf("uuid %q: %w", s, err)
	}
	return u, nil
}

// matchUUID is the CUDA ordinal whose UUID is want; -1 when none is.
func matchUUID(want UUID, ordinals []UUID) int {
	for i, u := range ordinals {
		if u == want {
			return i
		}
	}
	return -1
}

// uuids reads the UUID of every device CUDA numbers, in ordinal order.
// cuDeviceGetUuid_v2 is preferred: under MIG it gives the instance's own
// UUID where the first version gives the parent's.
func (d *Driver) uuids() ([]UUID, error) {
	if err := d.init(); err != nil {
		return nil, err
	}
	var n int32
	if err := d.check("cuDeviceGetCount", d.api.cuDeviceGetCount(&n)); err != nil {
		return nil, err
	}
	out := make([]UUID, n)
	for i := range out {
		var dev int32
		if err := d.check("cuDeviceGet", d.api.cuDeviceGet(&dev, int32(i))); err != nil {
			return nil, err
		}
		if err := d.check("cuDeviceGetUuid_v2", d.api.cuDeviceGetUuid(&out[i], dev)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Ordinal is the CUDA ordinal of the GPU that NVML calls uuid (and numbers
// index, which only names it in errors). An empty uuid means the caller
// has no NVML inventory, and index is taken as the CUDA ordinal itself.
func (d *Driver) Ordinal(index int, uuid string) (int, error) {
	if uuid == "" {
		return index, nil
	}
	want, err := ParseUUID(uuid)
	if err != nil {
		return 0, gpuwarden.Errorf(gpuwarden.EInvalid, "gpu %d: %v", index, err)
	}
	have, err := d.uuids()
	if err != nil {
		return 0, err
	}
	if i := matchUUID(want, have); i >= 0 {
		return i, nil
	}
	seen := make([]string, len(have))
	for i, u := range have {
		seen[i] = u.String()
	}
	return 0, gpuwarden.Errorf(gpuwarden.EEnvironment, "gpu %d (%s) is not among the %d device(s) CUDA sees [%s]",
		index, uuid, len(have), strings.Join(seen, " ")).
		WithHint("CUDA_VISIBLE_DEVICES or a container's device list hides it, or it is in MIG mode (CUDA then sees its MIG instances only)")
}
