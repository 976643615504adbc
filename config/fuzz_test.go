package config

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// fuzzMessage is the one shape every Parse error has: the file name, a
// position and a single line of text.
var fuzzMessage = regexp.MustCompile(`^fuzz\.yaml:[1-9][0-9]*:[1-9][0-9]*: [^\n\r]+$`)

// FuzzParse feeds Parse arbitrary bytes: it must never panic, every error
// must be an EInvalid *gpuwarden.Error in the file:line:col format, and every
// plan it accepts must be complete enough for the planner.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, doc := range []string{"", base, base + "---\n" + base, "a: &a [*a]\n", "workload: {kind: inference, params_b: 7}\n",
		"budget:\n  monthly_limit: 1.5\ncurrency_rates: {EUR: 1.08}\n",
		// The work as an amount, which stands in for work_hours.
		"workload: {kind: pretrain, params_b: 7, tokens_b: 20, mfu: 0.4}\ndeadline: 3d\n",
		"workload: {kind: finetune-lora, params_b: 7, epochs: 2, dataset_tokens_b: 0.1}\n",
		"workload: {kind: inference, params_b: 7, requests_per_second: 2, prompt_tokens: 100, output_tokens: 50, p95_latency_s: 9}\n",
		"workload: {kind: render, frames: 100, seconds_per_frame: 30, reference_gpu: L4}\ndeadline: 2w\n",
		// The hostile plans that ran `gpuwarden plan` out of memory, at full
		// size; testdata/fuzz/FuzzParse keeps small ones.
		strings.Repeat("[", 100_000), strings.Repeat("[", 20_000), base + "labels: " + strings.Repeat("{a: ", 20_000)} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The fuzzer has no per-input time limit, and a parser stuck in a
		// loop only shows as a stalled exec count; failing here records the
		// input in testdata/fuzz instead.
		type result struct {
			p   *gpuwarden.Plan
			err error
		}
		done := make(chan result, 1)
		go func() {
			p, err := Parse("fuzz.yaml", data)
			done <- result{p, err}
		}()
		var (
			p   *gpuwarden.Plan
			err error
		)
		select {
		case r := <-done:
			p, err = r.p, r.err
		case <-time.After(5 * time.Second):
			t.Fatalf("Parse did not return within 5s on %q", data)
		}
		if err != nil {
			var e *gpuwarden.Error
			if !errors.As(err, &e) {
				t.Fatalf("error is %T, not *gpuwarden.Error: %v", err, err)
			}
			if e.Code != gpuwarden.EInvalid {
				t.Fatalf("Code = %q, want invalid: %s", e.Code, e.Message)
			}
			if !fuzzMessage.MatchString(e.Message) {
				t.Fatalf("Message not in NAME:LINE:COL: form: %q", e.Message)
			}
			if e.Hint == "" {
				t.Fatalf("no hint for %q", e.Message)
			}
			return
		}
		if p == nil {
			t.Fatal("nil plan without an error")
		}
		amount := p.Workload.HasAmount()
		if !p.Workload.Kind.Valid() || (p.WorkHours <= 0 && !amount) || p.WorkHours < 0 || p.WorkHours > p.HoursPerMonth || p.Budget.Currency == "" ||
			p.Data.StorageKind == "" || p.Interruptions.Tolerance == "" || p.Workload.Precision == "" {
			t.Fatalf("accepted an incomplete plan: %+v", p)
		}
		if p.Deadline != "" {
			if _, err := gpuwarden.ParseDeadline(p.Deadline); err != nil || !amount {
				t.Fatalf("accepted deadline %q (amount %v): %v", p.Deadline, amount, err)
			}
		}
		if m := p.Workload.MFU; m < 0 || m > MaxMFU {
			t.Fatalf("accepted mfu %v", m)
		}
		if strings.ContainsAny(p.Name, "\r\n") {
			t.Fatalf("accepted a multi-line name %q", p.Name)
		}
	})
}
