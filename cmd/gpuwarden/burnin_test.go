package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

func TestBurnin(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	burn := func(spec string, extra ...string) result {
		return gw(t, dir, append([]string{"burnin", "--quick", "--simulate", spec, "--data-dir", data, "--disk-bytes", "8388608"}, extra...)...)
	}
	tests := []struct {
		spec  string
		extra []string
		code  int
		want  string
	}{
		{"1xH100", nil, 0, "PASS"},
		{"1xH100,fault=badmem", nil, 1, "0x1f4000"},
		{"1xH100,fault=throttle", nil, 1, "thermal"},
		{"1xH100,fault=throttle", []string{"--fail-on", "fail"}, 0, "WARN"},
		// Under MIG the whole-device checks cannot run: not a PASS.
		{"1xH100,mig=2", nil, 1, "6 skipped: not proven"},
		{"1xH100,mig=2", []string{"--fail-on", "fail"}, 0, "verdict: WARN"},
		{"1xH100", []string{"--inject-fault"}, 1, "FAIL"},
	}
	for _, tt := range tests {
		t.Run(tt.spec+strings.Join(tt.extra, ""), func(t *testing.T) {
			r := burn(tt.spec, tt.extra...)
			if r.code != tt.code || !strings.Contains(r.stdout, tt.want) {
				t.Errorf("exit %d, want %d with %q:\n%s%s", r.code, tt.code, tt.want, r.stdout, r.stderr)
			}
		})
	}
	r := gw(t, dir, "nodes", "--data-dir", data, "-o", "json")
	var got struct {
		Nodes []struct {
			Runs, Fail, Warn int
			MemErrors        uint64 `json:"mem_errors"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("nodes: %v\n%s%s", err, r.stdout, r.stderr)
	}
	if len(got.Nodes) != 1 || got.Nodes[0].Runs != len(tests) || got.Nodes[0].Fail != 2 || got.Nodes[0].MemErrors == 0 {
		t.Errorf("nodes = %+v, want one node with %d runs, 2 failures and memory errors", got.Nodes, len(tests))
	}
	if r := gw(t, dir, "nodes", "--data-dir", data); r.code != 0 || !strings.Contains(r.stdout, "H100-SXM") {
		t.Errorf("nodes table: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
