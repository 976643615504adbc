// Command trainer is a tiny stand-in for a training job that follows
// gpuwarden's checkpoint convention, for the README tour and the end-to-end
// tests of `gpuwarden run`:
//
//   - it writes each checkpoint into its own directory under
//     $GPUWARDEN_CHECKPOINT_DIR, named with the step (step-000120), and marks
//     it complete with an empty .complete file once every byte is written;
//   - it resumes from $GPUWARDEN_RESUME_FROM when set;
//   - SIGUSR1 asks for a checkpoint now (a preemption notice), SIGTERM stops it.
//
// Its "training" is a hash chain, so a run that was interrupted and resumed
// ends with exactly the same state as one that was not.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

type state struct {
	Step int    `json:"step"`
	Hash string `json:"hash"`
}

func main() {
	steps := flag.Int("steps", 200, "steps to train")
	every := flag.Int("every", 20, "checkpoint every this many steps")
	stepTime := flag.Duration("step-time", 20*time.Millisecond, "time one step takes")
	out := flag.String("out", "", "write the final state to this file")
	ignoreResume := flag.Bool("ignore-resume", false, "start over even when told to resume (a broken job, for the drill)")
	flag.Parse()
	if err := run(*steps, *every, *stepTime, *out, *ignoreResume); err != nil {
		fmt.Fprintln(os.Stderr, "trainer:", err)
		os.Exit(1)
	}
}

func run(steps, every int, stepTime time.Duration, out string, ignoreResume bool) error {
	dir := os.Getenv("GPUWARDEN_CHECKPOINT_DIR")
	if dir == "" {
		dir = filepath.Join("checkpoints", "incoming")
	}
	s := state{Hash: hex.EncodeToString(make([]byte, 32))}
	if from := os.Getenv("GPUWARDEN_RESUME_FROM"); from != "" && !ignoreResume {
		b, err := os.ReadFile(filepath.Join(from, "state.json"))
		if err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		fmt.Printf("resumed from %s at step %d\n", from, s.Step)
	}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	for s.Step < steps {
		select {
		case <-term:
			fmt.Printf("stopped at step %d\n", s.Step)
			os.Exit(143)
		case <-usr1:
			fmt.Printf("checkpoint asked for at step %d\n", s.Step)
			if err := checkpoint(dir, s); err != nil {
				return err
			}
		default:
		}
		time.Sleep(stepTime)
		sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", s.Hash, s.Step)))
		s.Hash, s.Step = hex.EncodeToString(sum[:]), s.Step+1
		if s.Step%every == 0 {
			if err := checkpoint(dir, s); err != nil {
				return err
			}
		}
	}
	fmt.Printf("done: step %d hash %s\n", s.Step, s.Hash)
	if out != "" {
		b, _ := json.Marshal(s)
		return os.WriteFile(out, b, 0o644)
	}
	return nil
}

// checkpoint writes the state, then the marker: a checkpoint without its
// marker is torn and gpuwarden never resumes from it.
func checkpoint(dir string, s state) error {
	d := filepath.Join(dir, fmt.Sprintf("step-%06d", s.Step))
	if _, err := os.Stat(d); err == nil {
		return nil // already written at this step
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	b, _ := json.Marshal(s)
	if err := os.WriteFile(filepath.Join(d, "state.json"), b, 0o644); err != nil {
		return err
	}
	// A little bulk, like weights, so that sync and verification have work.
	if err := os.WriteFile(filepath.Join(d, "weights.bin"), make([]byte, 256<<10), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(d, ".complete"), nil, 0o644)
}
