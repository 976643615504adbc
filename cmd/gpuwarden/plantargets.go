package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/launch"
	"github.com/gpuwarden/gpuwarden/plan"
)

// writeTargets prints the launch plan the ranking suggests, as a targets:
// block for the plan file: plan A, plan B, then the next candidates in
// another place, up to n, each with its provider's template to adapt.
func writeTargets(w io.Writer, r *plan.Report, file string, n int) error {
	if n <= 0 {
		n = 3
	}
	var (
		targets []gpuwarden.Target
		skipped []string
	)
	seen := map[string]bool{}
	for _, c := range r.Ranked() {
		o := c.Offer
		key := o.Provider + "/" + o.Region + "/" + o.Instance
		if seen[key] {
			continue // the spot and on-demand rows of one offer launch the same way
		}
		seen[key] = true
		// The block is pasted into a plan file and its values reach a
		// shell: only values that are one shell word as they stand are
		// written, whatever the renderer would escape ("British
		// Columbia" is a real region, but no launch command takes it).
		if bad := notPlain(o.Provider, o.Region, o.Instance); bad != "" {
			if len(skipped) < n {
				skipped = append(skipped, fmt.Sprintf("# skipped %s %s %s: %q is not a plain word a launch command takes\n",
					o.Provider, strconv.Quote(o.Region), o.Instance, bad))
			}
			continue
		}
		t := launch.Template(o.Provider)
		t.Name = fmt.Sprintf("plan-%c", 'a'+len(targets))
		t.Provider, t.Region, t.Offer = o.Provider, o.Region, o.Instance
		targets = append(targets, t)
		if len(targets) == n {
			break
		}
	}
	if len(targets) == 0 {
		return gpuwarden.Errorf(gpuwarden.EFinding, "nothing fits: no targets to write")
	}
	b, err := yaml.MarshalWithOptions(struct {
		Targets []gpuwarden.Target `yaml:"targets"`
	}{targets}, yaml.IndentSequence(true), yaml.UseLiteralStyleIfMultiline(true))
	if err != nil {
		return fmt.Errorf("write targets: %w", err)
	}
	_, err = fmt.Fprintf(w, "# Launch targets from the ranking of %s: plan A first. Adapt each launch\n"+
		"# command (set the $VARIABLES, add a zone where the provider needs one), then\n"+
		"# paste this block into the plan file and run `gpuwarden launch`.\n%s%s", file, strings.Join(skipped, ""), strings.TrimLeft(string(b), "\n"))
	return err
}

// notPlain returns the first of values that is not one shell word as it
// stands, or "".
func notPlain(values ...string) string {
	for _, v := range values {
		if v != "" && !launch.PlainWord(v) {
			return v
		}
	}
	return ""
}
