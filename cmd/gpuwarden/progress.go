package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/catalog"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/gpuwarden/gpuwarden/sqlite"
	"github.com/spf13/cobra"
)

// unitPattern is compiled when progress runs, not when every other
// command, the agent too, starts (issue #19).
var unitPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`) })

func (a *app) progressCommand() *cobra.Command {
	var (
		dataDir string
		gpu     string
		gpus    float64
	)
	c := &cobra.Command{
		Use:   "progress UNIT [COUNT]",
		Short: "Record that a job finished COUNT units of work (an epoch, requests) for cost per result",
		Long: `progress records, in this box's ledger, that a job finished COUNT (default 1)
units of work: an epoch, a batch of requests, any word. The agent ships it to
the fleet server, whose cost report divides what the box cost over the span
of the progress by the units done: the cost of one epoch, or of 1,000
requests. Call it from the training loop or a serving hook.

With --gpu and --gpus, the progress also measures the box's speed: a job
that reports the tokens (or frames) it finished, every few minutes, gives
` + "`gpuwarden plan`" + ` a measured throughput for that card and count, which
replaces the model's estimate there and scales the others (docs/sizing.md).

` + exitCodes("0  recorded", "2  bad input or usage", "4  internal error: the ledger could not be written"),
		Example: `  gpuwarden progress epoch
  gpuwarden progress requests 5000
  gpuwarden progress tokens 4194304 --gpu H100-SXM --gpus 8`,
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
			data := map[string]string{"unit": unit, "count": count}
			if gpu != "" || gpus != 0 {
				if gpu == "" || gpus <= 0 || gpus > 1024 {
					return gpuwarden.Errorf(gpuwarden.EInvalid, "--gpu and --gpus go together: the card's model and how many of them ran the job")
				}
				data["gpu"], data["gpus"] = catalog.CanonicalGPU(gpu, 0), strconv.FormatFloat(gpus, 'f', -1, 64)
			}
			l, err := sqlite.Open(cmd.Context(), filepath.Join(dataDir, "ledger.db"))
			if err != nil {
				return err
			}
			defer l.Close()
			_, err = l.RecordEvent(cmd.Context(), gpuwarden.Event{Time: a.now().UTC(), Kind: report.KindProgress, Severity: gpuwarden.SeverityInfo,
				Message: fmt.Sprintf("%s %s done", count, unit), Data: data})
			return err
		},
	}
	c.Flags().StringVar(&dataDir, "data-dir", defaultDataDir(), "the agent's data directory")
	c.Flags().StringVar(&gpu, "gpu", "", "the GPU `MODEL` the job ran on (H100-SXM), to measure its speed for plan")
	c.Flags().Float64Var(&gpus, "gpus", 0, "how many of --gpu the job ran on")
	return c
}
