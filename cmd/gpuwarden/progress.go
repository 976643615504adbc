package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/sqlite"
	"github.com/spf13/cobra"
)

// unitPattern is compiled when progress runs, not when every other
// command, the agent too, starts (issue #19).
var unitPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`) })

func (a *app) progressCommand() *cobra.Command {
	var dataDir string
	c := &cobra.Command{
		Use:   "progress UNIT [COUNT]",
		Short: "Record that a job finished COUNT units of work (an epoch, requests) for cost per result",
		Long: `progress records, in this box's ledger, that a job finished COUNT (default 1)
units of work: an epoch, a batch of requests, any word. The agent ships it to
the fleet server, whose cost report divides what the box cost over the span
of the progress by the units done: the cost of one epoch, or of 1,000
requests. Call it from the training loop or a serving hook.

` + exitCodes("0  recorded", "2  bad input or usage", "4  internal error: the ledger could not be written"),
		Example: `  gpuwarden progress epoch
  gpuwarden progress requests 5000`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			unit, count := args[0], "1"
			if len(args) == 2 {
				count = args[1]
			}
			if !unitPattern().MatchString(unit) {
				return gpuwarden.Errorf(gpuwarden.EInvalid, "unit %q: use a lowercase word such as epoch or requests", unit)
			}
			if n, err := strconv.ParseFloat(count, 64); err != nil || n < 0 || n > 1e15 {
				return gpuwarden.Errorf(gpuwarden.EInvalid, "count %q is not a number of units", count)
			}
			if _, err := gpuwarden.ParseMicros(count); err != nil {
				return gpuwarden.Errorf(gpuwarden.EInvalid, "count %q has more than six decimals", count)
			}
			l, err := sqlite.Open(cmd.Context(), filepath.Join(dataDir, "ledger.db"))
			if err != nil {
				return err
			}
			defer l.Close()
			_, err = l.RecordEvent(cmd.Context(), gpuwarden.Event{Time: a.now().UTC(), Kind: "progress", Severity: gpuwarden.SeverityInfo,
				Message: fmt.Sprintf("%s %s done", count, unit), Data: map[string]string{"unit": unit, "count": count}})
			return err
		},
	}
	c.Flags().StringVar(&dataDir, "data-dir", defaultDataDir(), "the agent's data directory")
	return c
}
