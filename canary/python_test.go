package canary

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

func TestParsePythonReport(t *testing.T) {
	tests := []struct {
		name      string
		out       string
		want      gpuwarden.Facts
		wantNotes []string
		wantErr   string
	}{
		{"bare interpreter", `{"errors": [], "frameworks": {}, "python": "3.11.7"}`,
			gpuwarden.Facts{"python.p.version": "3.11.7"}, nil, ""},
		{"every framework", `{"errors": ["tensorflow: sees_gpu: RuntimeError: no CUDA"], "python": "3.10.12", "frameworks": {
			"torch": {"version": "2.3.1+cu121", "cuda": "12.1", "cudnn": 8902, "sees_gpu": false},
			"jax": {"version": "0.4.30", "cuda": 12030, "cudnn": 90100, "sees_gpu": true},
			"tensorflow": {"version": "2.16.1", "cuda": "12.3", "cudnn": "8"}}}`,
			gpuwarden.Facts{"python.p.version": "3.10.12",
				"python.p.torch.version": "2.3.1+cu121", "python.p.torch.cuda": "12.1", "python.p.torch.cudnn": "8.9.2",
				"python.p.torch.sees_gpu": "false",
				"python.p.jax.version":    "0.4.30", "python.p.jax.cuda": "12.3", "python.p.jax.cudnn": "9.1.0",
				"python.p.jax.sees_gpu":       "true",
				"python.p.tensorflow.version": "2.16.1", "python.p.tensorflow.cuda": "12.3", "python.p.tensorflow.cudnn": "8"},
			[]string{"tensorflow: sees_gpu: RuntimeError: no CUDA"}, ""},
		{"CPU builds", `{"python": "3.12.3", "frameworks": {"torch": {"version": "2.4.0+cpu", "cuda": null, "cudnn": null, "sees_gpu": false}}}`,
			gpuwarden.Facts{"python.p.version": "3.12.3", "python.p.torch.version": "2.4.0+cpu", "python.p.torch.cuda": "none",
				"python.p.torch.cudnn": "none", "python.p.torch.sees_gpu": "false"}, nil, ""},
		{"a sitecustomize printed first", "hello from sitecustomize\n{\"python\": \"3.8.10\", \"frameworks\": {}}\n",
			gpuwarden.Facts{"python.p.version": "3.8.10"}, nil, ""},
		{"odd field", `{"python": "3.12.3", "frameworks": {"torch": {"version": ["2"], "sees_gpu": true}}}`,
			gpuwarden.Facts{"python.p.version": "3.12.3", "python.p.torch.sees_gpu": "true"},
			[]string{`torch: version: unexpected ["2"]`}, ""},
		{"no report", "Traceback (most recent call last):\n", nil, nil, `no report in the output "Traceback (most recent call last):"`},
		{"broken report", `{"python": `, nil, nil, "read report: unexpected end of JSON input"},
		{"no version", `{"frameworks": {}}`, nil, nil, "report has no python version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The script prints one line; the cases wrap theirs for reading.
			out := strings.ReplaceAll(tt.out, "\n\t\t\t", " ")
			got, notes, err := parsePythonReport([]byte(out), "python.p.")
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			diffFacts(t, got, tt.want)
			if !slices.Equal(notes, tt.wantNotes) {
				t.Errorf("notes = %q, want %q", notes, tt.wantNotes)
			}
		})
	}
}

func TestVersionIntegers(t *testing.T) {
	for n, want := range map[uint64]string{8902: "8.9.2", 8600: "8.6.0", 7605: "7.6.5", 90100: "9.1.0", 91002: "9.10.2"} {
		if got := cudnnVersion(n); got != want {
			t.Errorf("cudnnVersion(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[uint64]string{12030: "12.3", 12080: "12.8", 13000: "13.0", 11080: "11.8"} {
		if got := cudaVersion(n); got != want {
			t.Errorf("cudaVersion(%d) = %q, want %q", n, got, want)
		}
	}
}

func needPython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 on this machine")
	}
}

// TestPythonScriptRealInterpreter runs the embedded script with this
// machine's python3 through the default runner. Where no framework is
// installed (CI) that yields the version alone; where one is, its facts
// must be well formed.
func TestPythonScriptRealInterpreter(t *testing.T) {
	needPython(t)
	o := Options{Root: t.TempDir(), Pythons: []string{"python3"}, Timeout: 20 * time.Second}
	facts, notes, err := Collect(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range notes {
		if strings.HasPrefix(n, "python3:") {
			t.Errorf("note %q", n)
		}
	}
	if v := facts["python.python3.version"]; !regexp.MustCompile(`^3\.[0-9]+\.[0-9]+$`).MatchString(v) {
		t.Errorf("python.python3.version = %q", v)
	}
	known := regexp.MustCompile(`^python\.python3\.(version|(torch|jax|tensorflow)\.(version|cuda|cudnn|sees_gpu))$`)
	for k, v := range facts {
		if strings.HasPrefix(k, "python.") {
			if !known.MatchString(k) || v == "" {
				t.Errorf("fact %s = %q", k, v)
			}
			t.Logf("%s = %s", k, v)
		}
	}
}

// fakeFrameworks are stand-in packages that exercise the script's paths: a
// torch built for CUDA that prints on import (from Python and from the
// process's stdout), a CPU-only jax, and a tensorflow that fails to import.
var fakeFrameworks = map[string]string{
	"torch/__init__.py": `import os, sys
print("torch says hello on stdout")
os.write(1, b"and so does its C library\n")
__version__ = "2.11.0+cu130"
class version:
    cuda = "13.0"
class backends:
    class cudnn:
        @staticmethod
        def version():
            return 91002
class cuda:
    @staticmethod
    def is_available():
        raise RuntimeError("CUDA driver initialization failed\nsecond line")
`,
	"jax/__init__.py": `__version__ = "0.4.30"
class _Device:
    platform = "cpu"
def devices():
    return [_Device()]
`,
	"jax/_src/__init__.py":     "",
	"jax/_src/lib/__init__.py": "cuda_versions = None\n",
	"tensorflow/__init__.py":   `raise RuntimeError("DLL load failed")` + "\n",
}

func TestPythonScriptFakeFrameworks(t *testing.T) {
	needPython(t)
	dir := writeRoot(t, fakeFrameworks)
	o := Options{Root: t.TempDir(), Pythons: []string{"python3"}, Timeout: 20 * time.Second,
		Run: func(ctx context.Context, name string, args ...string) ([]byte, error) {
			cmd := exec.CommandContext(ctx, name, args...)
			cmd.Env = append(os.Environ(), "PYTHONPATH="+dir)
			out, err := cmd.Output()
			// What the fake torch printed went to stderr: stdout is the report alone.
			if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "{") {
				t.Errorf("stdout is not one JSON line: %q", out)
			}
			return out, err
		}}
	facts, notes, err := Collect(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	got := gpuwarden.Facts{}
	for k, v := range facts {
		if strings.HasPrefix(k, "python.") && k != "python.python3.version" {
			got[k] = v
		}
	}
	diffFacts(t, got, gpuwarden.Facts{
		"python.python3.torch.version": "2.11.0+cu130", "python.python3.torch.cuda": "13.0",
		"python.python3.torch.cudnn": "9.10.2",
		"python.python3.jax.version": "0.4.30", "python.python3.jax.cuda": "none", "python.python3.jax.cudnn": "none",
		"python.python3.jax.sees_gpu": "false",
	})
	wantNotes := []string{
		"python3: torch: sees_gpu: RuntimeError: CUDA driver initialization failed",
		"python3: tensorflow: import: RuntimeError: DLL load failed",
	}
	var pyNotes []string
	for _, n := range notes {
		if strings.HasPrefix(n, "python3:") {
			pyNotes = append(pyNotes, n)
		}
	}
	if !slices.Equal(pyNotes, wantNotes) {
		t.Errorf("notes = %q, want %q", pyNotes, wantNotes)
	}
}

// TestPythonScriptIgnoresWorkingDirectory runs the script where a broken
// torch/ sits in the working directory: "python -c" would import it first,
// but what a job gets is what is installed.
func TestPythonScriptIgnoresWorkingDirectory(t *testing.T) {
	needPython(t)
	dir := writeRoot(t, map[string]string{"torch/__init__.py": "raise RuntimeError('shadow')\n"})
	o := Options{Root: t.TempDir(), Pythons: []string{"python3"}, Timeout: 20 * time.Second,
		Run: func(ctx context.Context, name string, args ...string) ([]byte, error) {
			cmd := exec.CommandContext(ctx, name, args...)
			cmd.Dir = dir
			return cmd.Output()
		}}
	_, notes, err := Collect(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range notes {
		if strings.Contains(n, "shadow") {
			t.Errorf("note %q: the working directory's torch was imported", n)
		}
	}
}

// TestPythonScriptIsPython38 parses the script with Python 3.8's grammar,
// the oldest interpreter it must run on.
func TestPythonScriptIsPython38(t *testing.T) {
	needPython(t)
	check := "import ast, sys; ast.parse(sys.stdin.read(), feature_version=(3, 8))"
	cmd := exec.Command("python3", "-c", check)
	cmd.Stdin = strings.NewReader(pythonScript)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}

func TestExecRun(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	out, err := execRun(context.Background(), "sh", "-c", "echo out; echo first >&2; echo boom >&2; exit 3")
	if string(out) != "out\n" || err == nil || err.Error() != "exit status 3: boom" {
		t.Errorf("out = %q, err = %v; want the output and the last stderr line", out, err)
	}

	// A child that leaves a grandchild holding the pipes is still given up
	// on at the deadline: the whole group is killed.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = execRun(ctx, "sh", "-c", "sleep 30 & sleep 30; wait")
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("execRun returned after %v, want soon after the 100ms deadline", elapsed)
	}
	if err == nil || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("err = %v, want the child killed", err)
	}
}

// TestPythonProbeTimesOut runs a real interpreter that hangs: the note comes
// at the timeout, not when the interpreter would have finished.
func TestPythonProbeTimesOut(t *testing.T) {
	needPython(t)
	dir := writeRoot(t, map[string]string{"torch/__init__.py": "import time\ntime.sleep(30)\n"})
	t.Setenv("PYTHONPATH", dir)
	o := Options{Root: t.TempDir(), Pythons: []string{"python3"}, Timeout: 500 * time.Millisecond}
	start := time.Now()
	facts, notes, err := Collect(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("Collect took %v with a 500ms timeout", elapsed)
	}
	if !slices.Contains(notes, "python3: timed out after 500ms") {
		t.Errorf("notes = %q", notes)
	}
	if _, ok := facts["python.python3.version"]; ok {
		t.Error("a timed-out probe left facts behind")
	}
	if facts["container.runtime"] != "none" {
		t.Errorf("container.runtime = %q, want the other probes' facts", facts["container.runtime"])
	}
}
