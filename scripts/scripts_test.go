// Package scripts holds the checks of the project's shell scripts.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestScriptRunsTheFuzzersAfterAFailure runs scripts/test with a stand-in
// for go that records each call and fails the ones a case names: a failing
// test run (a port taken, say) must not skip the fuzzers, and the script
// must still exit non-zero and name what failed.
func TestScriptRunsTheFuzzersAfterAFailure(t *testing.T) {
	src, err := os.ReadFile("test")
	if err != nil {
		t.Fatal(err)
	}
	var fuzzers []string
	for _, m := range regexp.MustCompile(`(?m)^fuzz (\S+) (\S+) `).FindAllStringSubmatch(string(src), -1) {
		fuzzers = append(fuzzers, m[1]+" -run ^$ -fuzz ^"+m[2]+"$")
	}
	if len(fuzzers) < 10 {
		t.Fatalf("found %d fuzz lines in scripts/test", len(fuzzers))
	}
	tests := []struct {
		name   string
		fail   string // the calls of go that fail hold this
		code   int
		stderr string
	}{
		{"all pass", "nothing fails", 0, ""},
		{"the tests fail", "-race", 1, "1 step(s) failed:\n  go test -race -count=1 -timeout 20m ./..."},
		{"tests and a fuzzer fail", `-race|\^FuzzParse\$`, 1, "2 step(s) failed:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "calls")
			fake := "#!/bin/sh\necho \"$*\" >> " + log + "\necho \"$*\" | grep -Eq -- '" + tt.fail + "' && exit 1\nexit 0\n"
			if err := os.WriteFile(filepath.Join(dir, "go"), []byte(fake), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("bash", "test")
			cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code || !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("exit %d, want %d; stderr:\n%s\nwant %q in it", code, tt.code, stderr.String(), tt.stderr)
			}
			calls, _ := os.ReadFile(log)
			for _, f := range fuzzers {
				if !strings.Contains(string(calls), f) {
					t.Errorf("the fuzzer %q did not run; go was called with:\n%s", f, calls)
				}
			}
		})
	}
}
