package suggest

import (
	"strings"
	"testing"
)

func TestDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"h100", "h100", 0},
		{"h1oo", "h100", 2},
		{"regoin", "region", 2},
		{"", "abc", 3},
		{strings.Repeat("x", 1000), "x", 63}, // cut to 64 bytes first
	}
	for _, tt := range tests {
		if got := Distance(tt.a, tt.b); got != tt.want {
			t.Errorf("Distance(%.10q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
