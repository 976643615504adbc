package main

import (
	"fmt"
	"path/filepath"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/supervise"
	"github.com/spf13/cobra"
)

func (a *app) checkpointCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "checkpoint",
		Short: "Work with checkpoints of a job supervised by gpuwarden run",
		Long: `checkpoint is for a job under gpuwarden run and for the person looking after
it: commit marks a checkpoint the job finished writing, list validates every
committed one against its manifest.

` + exitCodes("0  committed, or listed (torn ones included), or no subcommand was given (this help)",
			"2  bad usage; DIR missing, empty, holding a symlink or not directly under the root's incoming/; a symlinked incoming/ or committed/",
			"4  internal error"),
		Example: `  gpuwarden checkpoint commit "$GPUWARDEN_CHECKPOINT_DIR/step-000120"
  gpuwarden checkpoint list --checkpoint-dir ./checkpoints`,
	}
	var root, output string
	commit := &cobra.Command{
		Use:   "commit DIR",
		Short: "Commit a checkpoint the job has finished writing",
		Long: `commit is for the job itself: once every file of a checkpoint is written into
DIR (a directory under $GPUWARDEN_CHECKPOINT_DIR), it hashes the files into a
manifest and atomically moves DIR into the committed area, where gpuwarden run
syncs it and resumes from it. Creating an empty DIR/.complete file does the
same without calling gpuwarden.

` + exitCodes("0  committed", "2  DIR is missing, empty, holds a symlink, or is not directly under the root's incoming/",
			"4  internal error: a write or rename failed"),
		Example: `  gpuwarden checkpoint commit "$GPUWARDEN_CHECKPOINT_DIR/step-000120"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			base := root
			if base == "" {
				// DIR sits in CHECKPOINT_DIR/incoming: the root is two levels up.
				base = filepath.Dir(filepath.Dir(filepath.Clean(dir)))
			}
			cp, err := supervise.Commit(base, dir)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "committed %s: %d files, %s bytes\n", cp.Path, len(cp.Files), gpuwarden.GroupDigits(cp.Bytes))
			return nil
		},
	}
	commit.Flags().StringVar(&root, "checkpoint-dir", "", "the job's --checkpoint-dir (default: two levels above DIR)")
	list := &cobra.Command{
		Use:   "list",
		Short: "List committed checkpoints, valid and torn",
		Long: `list validates every committed checkpoint (every file against its manifest)
and lists the valid ones and the torn ones, with why.

` + exitCodes("0  listed (torn ones included)", "2  bad usage, or a symlinked incoming/ or committed/"),
		Example: "  gpuwarden checkpoint list --checkpoint-dir ./checkpoints",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFormat(output, "table", "json"); err != nil {
				return err
			}
			valid, torn, err := supervise.List(root)
			if err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(a.stdout, "checkpoints", map[string]any{"valid": nonNilCheckpoints(valid), "torn": torn})
			}
			t := newTable(a.stdout)
			t.row("NAME", "STEP", "FILES", "BYTES", "STATE")
			for _, cp := range valid {
				t.row(cp.Name, fmt.Sprint(cp.Step), fmt.Sprint(len(cp.Files)), gpuwarden.GroupDigits(cp.Bytes), "valid")
			}
			for _, tc := range torn {
				t.row(filepath.Base(tc.Path), "-", "-", "-", "torn: "+tc.Reason)
			}
			return t.flush()
		},
	}
	list.Flags().StringVar(&root, "checkpoint-dir", "checkpoints", "the job's checkpoint directory")
	list.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	c.AddCommand(commit, list)
	return c
}

func nonNilCheckpoints(c []gpuwarden.Checkpoint) []gpuwarden.Checkpoint {
	if c == nil {
		return []gpuwarden.Checkpoint{}
	}
	return c
}
