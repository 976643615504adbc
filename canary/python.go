package canary

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/gpuwarden/gpuwarden"
)

// pythonScript is the program each interpreter runs (`P -c pythonScript`);
// it prints one JSON object with the interpreter's version and, for torch,
// jax and tensorflow, what each was built for and whether it sees a GPU.
//
//go:embed probe.py
var pythonScript string

// frameworks are the ones pythonScript probes, in the order notes name them.
var frameworks = []string{"torch", "jax", "tensorflow"}

// pythonProbes makes one probe per interpreter, named by its base name. Two
// interpreters with one base name would write the same keys, so the later
// one is skipped with a note rather than silently overwriting the first.
func (o Options) pythonProbes() []probe {
	var ps []probe
	seen := map[string]string{}
	for _, py := range o.Pythons {
		name := filepath.Base(py)
		if first, dup := seen[name]; dup {
			ps = append(ps, probe{name, func(context.Context) (gpuwarden.Facts, []string, error) {
				return nil, nil, fmt.Errorf("skipped %s: its facts would overwrite those of %s", py, first)
			}})
			continue
		}
		seen[name] = py
		ps = append(ps, probe{name, func(ctx context.Context) (gpuwarden.Facts, []string, error) {
			return o.probePython(ctx, py, name)
		}})
	}
	return ps
}

// probePython runs pythonScript with the interpreter py and turns its report
// into python.NAME.* facts.
func (o Options) probePython(ctx context.Context, py, name string) (gpuwarden.Facts, []string, error) {
	out, err := o.Run(ctx, py, "-c", pythonScript)
	if err != nil {
		return nil, nil, err
	}
	return parsePythonReport(out, "python."+name+".")
}

// pythonReport is what pythonScript prints. Framework fields stay raw
// because they arrive as text, numbers or null depending on the framework.
type pythonReport struct {
	Python     string                                `json:"python"`
	Frameworks map[string]map[string]json.RawMessage `json:"frameworks"`
	Errors     []string                              `json:"errors"`
}

// parsePythonReport reads the last line of out that holds a JSON object: the
// script keeps stdout to itself, but a sitecustomize.py may print before it.
func parsePythonReport(out []byte, prefix string) (gpuwarden.Facts, []string, error) {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	var line []byte
	for i := len(lines) - 1; i >= 0; i-- {
		if l := bytes.TrimSpace(lines[i]); bytes.HasPrefix(l, []byte("{")) {
			line = l
			break
		}
	}
	if line == nil {
		return nil, nil, fmt.Errorf("no report in the output %q", clip(string(bytes.TrimSpace(out))))
	}
	var r pythonReport
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, nil, fmt.Errorf("read report: %w", err)
	}
	if r.Python == "" {
		return nil, nil, errors.New("report has no python version")
	}
	f := gpuwarden.Facts{prefix + "version": r.Python}
	notes := r.Errors
	for _, fw := range frameworks {
		fields, ok := r.Frameworks[fw]
		if !ok {
			continue
		}
		for _, key := range []string{"version", "cuda", "cudnn", "sees_gpu"} {
			raw, ok := fields[key]
			if !ok {
				continue // the script could not tell; its errors say why
			}
			v, err := frameworkValue(key, raw)
			if err != nil {
				notes = append(notes, fmt.Sprintf("%s: %s: %v", fw, key, err))
				continue
			}
			f[prefix+fw+"."+key] = v
		}
	}
	return f, notes, nil
}

// frameworkValue turns one reported field into fact text: null is "none"
// (built without it), booleans are "true"/"false", and the integer versions
// torch and jax report (cuDNN 90100, CUDA 12080) become dotted versions, so
// that they read like cudnn.version and compare with the same rules.
func frameworkValue(key string, raw json.RawMessage) (string, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("read %s: %w", raw, err)
	}
	switch x := v.(type) {
	case nil:
		return "none", nil
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case json.Number:
		n, err := strconv.ParseUint(x.String(), 10, 32)
		if err != nil {
			return x.String(), nil
		}
		switch key {
		case "cudnn":
			return cudnnVersion(n), nil
		case "cuda":
			return cudaVersion(n), nil
		}
		return x.String(), nil
	}
	return "", fmt.Errorf("unexpected %s", clip(string(raw)))
}

// cudnnVersion decodes CUDNN_VERSION: MAJOR*1000+MINOR*100+PATCH before
// cuDNN 9 (8902 is 8.9.2), MAJOR*10000+MINOR*100+PATCH from 9 (90100).
func cudnnVersion(n uint64) string {
	if n >= 10000 {
		return fmt.Sprintf("%d.%d.%d", n/10000, n%10000/100, n%100)
	}
	return fmt.Sprintf("%d.%d.%d", n/1000, n%1000/100, n%100)
}

// cudaVersion decodes CUDA_VERSION, MAJOR*1000+MINOR*10 (12080 is 12.8).
func cudaVersion(n uint64) string {
	return fmt.Sprintf("%d.%d", n/1000, n%1000/10)
}

// clip shortens text quoted in a note so that one note stays one line.
func clip(s string) string {
	if r := []rune(s); len(r) > 80 {
		return string(r[:77]) + "..."
	}
	return s
}
