package canary

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

func TestCompare(t *testing.T) {
	lock := &gpuwarden.Lock{Version: 1, Fields: map[string]gpuwarden.LockField{
		"gpu.model":      {Value: "H100-SXM", Match: gpuwarden.MatchExact},
		"gpu.count":      {Value: "2", Match: gpuwarden.MatchExact},
		"driver.version": {Value: "580.159.04", Match: gpuwarden.MatchMajor},
		"os.id":          {Value: "ubuntu", Match: gpuwarden.MatchExact},
		"os.kernel":      {Value: "6.8.0-49-generic", Match: gpuwarden.MatchIgnore},
	}}
	const noGPU = "no GPU on this box (--cpu-ok)"
	skipGPU := func(k string) string {
		if strings.HasPrefix(k, "gpu.") || strings.HasPrefix(k, "driver.") {
			return noGPU
		}
		return ""
	}
	h100 := gpuwarden.Facts{"gpu.model": "H100-SXM", "gpu.count": "2", "driver.version": "580.65.06", "os.id": "ubuntu", "os.kernel": "6.17"}
	hostOnly := gpuwarden.Facts{"os.id": "ubuntu", "os.kernel": "6.8.0-49-generic"}
	tests := []struct {
		name     string
		lock     *gpuwarden.Lock
		now      gpuwarden.Facts
		skip     func(string) string
		want     Comparison
		complete bool
	}{
		{"no lock", nil, h100, nil,
			Comparison{Compared: []string{}, Ignored: []string{}, Skipped: []Skipped{}, Drift: []gpuwarden.Drift{}}, true},
		{"all match", lock, h100, nil,
			Comparison{Compared: []string{"driver.version", "gpu.count", "gpu.model", "os.id"}, Ignored: []string{"os.kernel"},
				Skipped: []Skipped{}, Drift: []gpuwarden.Drift{}}, true},
		{"host only, nothing skipped: the GPU fields drift", lock, hostOnly, nil,
			Comparison{Compared: []string{"driver.version", "gpu.count", "gpu.model", "os.id"}, Ignored: []string{"os.kernel"},
				Skipped: []Skipped{}, Drift: []gpuwarden.Drift{
					{Field: "driver.version", Locked: "580.159.04", Match: gpuwarden.MatchMajor},
					{Field: "gpu.count", Locked: "2", Match: gpuwarden.MatchExact},
					{Field: "gpu.model", Locked: "H100-SXM", Match: gpuwarden.MatchExact},
				}}, true},
		{"host only, GPU skipped: only the host is compared", lock, hostOnly, skipGPU,
			Comparison{Compared: []string{"os.id"}, Ignored: []string{"os.kernel"},
				Skipped: []Skipped{{"driver.version", noGPU}, {"gpu.count", noGPU}, {"gpu.model", noGPU}}, Drift: []gpuwarden.Drift{}}, false},
		{"a skipped field's drift is not drift", lock, gpuwarden.Facts{"gpu.model": "H200", "os.id": "debian"}, skipGPU,
			Comparison{Compared: []string{"os.id"}, Ignored: []string{"os.kernel"},
				Skipped: []Skipped{{"driver.version", noGPU}, {"gpu.count", noGPU}, {"gpu.model", noGPU}},
				Drift:   []gpuwarden.Drift{{Field: "os.id", Locked: "ubuntu", Now: "debian", Match: gpuwarden.MatchExact}}}, false},
		{"ignore wins over skip", &gpuwarden.Lock{Fields: map[string]gpuwarden.LockField{"gpu.model": {Value: "H100-SXM", Match: gpuwarden.MatchIgnore}}},
			nil, skipGPU, Comparison{Compared: []string{}, Ignored: []string{"gpu.model"}, Skipped: []Skipped{}, Drift: []gpuwarden.Drift{}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Compare(tt.lock, tt.now, tt.skip)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Compare:\n got %+v\nwant %+v", got, tt.want)
			}
			if got.Complete() != tt.complete {
				t.Errorf("Complete() = %v, want %v", got.Complete(), tt.complete)
			}
		})
	}
}

// TestCompareAccountsForEveryField checks the invariant the canary's summary
// rests on: each locked field is compared, ignored or skipped, exactly once.
func TestCompareAccountsForEveryField(t *testing.T) {
	l := NewLock(rootFacts, "box", created)
	skip := func(k string) string {
		if strings.HasPrefix(k, "python.") {
			return "framework probes off (--no-frameworks)"
		}
		return ""
	}
	c := Compare(l, rootFacts, skip)
	seen := map[string]int{}
	for _, k := range c.Compared {
		seen[k]++
	}
	for _, k := range c.Ignored {
		seen[k]++
	}
	for _, s := range c.Skipped {
		seen[s.Field]++
	}
	for k := range l.Fields {
		if seen[k] != 1 {
			t.Errorf("%s is accounted for %d times, want once", k, seen[k])
		}
	}
	if got, want := len(seen), len(l.Fields); got != want {
		t.Errorf("accounted for %d fields, the lock has %d", got, want)
	}
	if len(c.Drift) != 0 {
		t.Errorf("drift = %+v, want none against the facts the lock was made from", c.Drift)
	}
}
