// Command benchstop measures what proving the idle stop adds to `gpuwarden
// up`'s start (issue #27's budget: at most 1 s): it runs the agent on
// simulated GPUs REPS times with no provider and REPS times on Azure
// against stoppertest's fakes of IMDS and ARM, and prints, per run, the
// time from exec to "agent up" and to "idle stop proven", in ms.
//
//	go run ./scripts/benchstop -binary ./gpuwarden -reps 5
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden/stopper/stoppertest"
)

func main() {
	binary := flag.String("binary", "./gpuwarden", "the gpuwarden binary")
	reps := flag.Int("reps", 5, "runs of each case")
	flag.Parse()
	az := stoppertest.NewAzure()
	defer az.Close()
	cases := []struct {
		name  string
		args  []string
		proof bool
	}{
		{"no provider (--cloud none)", []string{"--cloud", "none"}, false},
		{"azure, proven against the fakes", []string{"--cloud", "azure", "--azure-metadata", az.IMDS.URL, "--azure-management", az.ARM.URL}, true},
	}
	for _, c := range cases {
		var up, proven []float64
		for range *reps {
			u, p, err := run(*binary, c.args, c.proof)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			up, proven = append(up, u), append(proven, p)
		}
		fmt.Printf("%-34s exec→agent up %s ms", c.name, spread(up))
		if c.proof {
			fmt.Printf(", exec→idle stop proven %s ms", spread(proven))
		}
		fmt.Println()
	}
}

// run starts the agent and times its log lines.
func run(binary string, args []string, proof bool) (up, proven float64, err error) {
	dir, err := os.MkdirTemp("", "benchstop")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	full := append([]string{"up", "--simulate", "1xH100,load=80", "--listen", "", "--data-dir", filepath.Join(dir, "data")}, args...)
	cmd := exec.Command(binary, full...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		ms := float64(time.Since(start).Microseconds()) / 1000
		switch line := sc.Text(); {
		case strings.Contains(line, `msg="agent up"`):
			up = ms
		case strings.Contains(line, `msg="idle stop proven"`):
			proven = ms
		}
		if up > 0 && (!proof || proven > 0) {
			return up, proven, nil
		}
	}
	return 0, 0, fmt.Errorf("the agent exited before its start was timed")
}

func spread(v []float64) string {
	sort.Float64s(v)
	return fmt.Sprintf("%.1f–%.1f (median %.1f)", v[0], v[len(v)-1], v[len(v)/2])
}
