package preempt

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	tests := []struct {
		every    time.Duration
		failures int
		want     time.Duration
	}{
		{time.Second, 0, time.Second},
		{time.Second, 1, 2 * time.Second},
		{time.Second, 2, 4 * time.Second},
		{time.Second, 3, MaxBackoff},
		{time.Second, 1000, MaxBackoff},
		{10 * time.Second, 3, 10 * time.Second}, // never faster than asked
		{100 * time.Millisecond, 3, 800 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := backoff(tt.every, tt.failures, MaxBackoff); got != tt.want {
			t.Errorf("backoff(%v, %d) = %v, want %v", tt.every, tt.failures, got, tt.want)
		}
	}
}
