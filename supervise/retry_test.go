package supervise

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

func TestPolicyNext(t *testing.T) {
	half := func() float64 { return 0.5 }
	tests := []struct {
		name     string
		policy   Policy
		class    string
		byClass  map[string]int
		total    int
		retry    bool
		wait     time.Duration
		whyMatch string
	}{
		{"ok never restarts", Policy{}, gpuwarden.ExitOK, nil, 0, false, 0, "finished"},
		{"preempted waits a fixed second", Policy{Rand: half}, gpuwarden.ExitPreempted, map[string]int{gpuwarden.ExitPreempted: 7}, 7, true, time.Second, "restart 8 of 100"},
		{"gpu fault first backoff", Policy{Rand: half}, gpuwarden.ExitGPUFault, nil, 0, true, time.Second, "restart 1 of 3"},
		{"gpu fault doubles per restart", Policy{Rand: half}, gpuwarden.ExitGPUFault, map[string]int{gpuwarden.ExitGPUFault: 2}, 2, true, 4 * time.Second, "restart 3 of 3"},
		{"gpu fault budget spent", Policy{Rand: half}, gpuwarden.ExitGPUFault, map[string]int{gpuwarden.ExitGPUFault: 3}, 3, false, 0, "used its 3"},
		{"cuda oom gets one", Policy{Rand: half}, gpuwarden.ExitCUDAOOM, map[string]int{gpuwarden.ExitCUDAOOM: 1}, 1, false, 0, "used its 1"},
		{"user error off by default", Policy{}, gpuwarden.ExitUser, nil, 0, false, 0, "--retry-on"},
		{"overall cap", Policy{MaxRestarts: 5}, gpuwarden.ExitPreempted, map[string]int{gpuwarden.ExitPreempted: 5}, 5, false, 0, "cap of 5"},
		{"backoff capped at max", Policy{Base: time.Second, Max: 10 * time.Second, Rand: func() float64 { return 0.999 }, Budgets: map[string]int{gpuwarden.ExitSignal: 50}},
			gpuwarden.ExitSignal, map[string]int{gpuwarden.ExitSignal: 12}, 12, true, 9990 * time.Millisecond, "restart 13 of 50"},
		{"full jitter reaches zero", Policy{Rand: func() float64 { return 0 }}, gpuwarden.ExitHostOOM, nil, 0, true, 0, "host-oom"},
		{"a budget overrides the default", Policy{Budgets: map[string]int{gpuwarden.ExitUser: 2}, Rand: half}, gpuwarden.ExitUser, map[string]int{gpuwarden.ExitUser: 1}, 1, true, 2 * time.Second, "restart 2 of 2"},
		{"unknown class", Policy{}, "weird", nil, 0, false, 0, "not a retryable class"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			retry, wait, why := tt.policy.Next(tt.class, tt.byClass, tt.total)
			if retry != tt.retry || wait != tt.wait || !strings.Contains(why, tt.whyMatch) {
				t.Errorf("Next = %v, %s, %q; want %v, %s, containing %q", retry, wait, why, tt.retry, tt.wait, tt.whyMatch)
			}
		})
	}
}

func TestParseRetryOn(t *testing.T) {
	got, err := ParseRetryOn("preempted, gpu-fault,user-error")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		gpuwarden.ExitPreempted: 100, gpuwarden.ExitGPUFault: 3, gpuwarden.ExitUser: 3,
		gpuwarden.ExitHostOOM: 0, gpuwarden.ExitCUDAOOM: 0, gpuwarden.ExitSignal: 0,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("budgets = %v, want %v", got, want)
	}
	if got, _ := ParseRetryOn(""); !reflect.DeepEqual(got, DefaultBudgets()) {
		t.Errorf("empty = %v, want the defaults", got)
	}
	if got, _ := ParseRetryOn("none"); got[gpuwarden.ExitPreempted] != 0 {
		t.Errorf("none = %v, want nothing retried", got)
	}
	_, err = ParseRetryOn("preempted,oom")
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || !strings.Contains(err.Error(), `"oom"`) ||
		!strings.Contains(gpuwarden.ErrorHint(err), "cuda-oom") {
		t.Errorf("err = %v (hint %q), want invalid naming the class and listing the choices", err, gpuwarden.ErrorHint(err))
	}
	if _, err := ParseRetryOn("ok"); err == nil {
		t.Error("ok is not a retry class")
	}
}
