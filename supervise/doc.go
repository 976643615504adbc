// Package supervise is the engine of `gpuwarden run -- CMD`: it runs a job in
// its own process group, commits the checkpoints the job writes, stops the job
// gracefully on a preemption notice, classifies how each attempt ended and
// restarts it from the newest valid checkpoint within per-class budgets.
//
// Checkpoint layout under a checkpoint directory D:
//
//	D/incoming/NAME/        the job writes here ($GPUWARDEN_CHECKPOINT_DIR/NAME)
//	D/incoming/NAME/.complete   the job's "done writing" marker
//	D/committed/NNNNNN-NAME/    committed: files + manifest.json (sha256 of each)
//	D/.lock                 serialises commits and prunes across processes
//
// A checkpoint is resumable only once committed and only while every file
// still matches its manifest; anything else is torn and never chosen.
package supervise
