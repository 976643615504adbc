package stopper

import "testing"

// TestEnvFrom reads a NUL-separated block the way LookupEnv reads PID 1's
// /proc/1/environ, where container clouds put the pod ID and key.
func TestEnvFrom(t *testing.T) {
	block := []byte("PATH=/usr/bin\x00RUNPOD_POD_ID=xedezhzb9la3ye\x00EMPTY=\x00CONTAINER_API_KEY=a=b")
	tests := []struct{ name, want string }{
		{"RUNPOD_POD_ID", "xedezhzb9la3ye"},
		{"CONTAINER_API_KEY", "a=b"},
		{"EMPTY", ""},
		{"RUNPOD", ""},
		{"MISSING", ""},
	}
	for _, tt := range tests {
		if got := envFrom(block, tt.name); got != tt.want {
			t.Errorf("envFrom(%s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}
