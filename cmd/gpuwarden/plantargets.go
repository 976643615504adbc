package main

import (
	"fmt"
	"io"
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
	var targets []gpuwarden.Target
	seen := map[string]bool{}
	for _, c := range r.Ranked() {
		o := c.Offer
		key := o.Provider + "/" + o.Region + "/" + o.Instance
		if seen[key] {
			continue // the spot and on-demand rows of one offer launch the same way
		}
		seen[key] = true
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
		"# paste this block into the plan file and run `gpuwarden launch`.\n%s", file, strings.TrimLeft(string(b), "\n"))
	return err
}
