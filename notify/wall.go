package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// DefaultWallTimeout bounds one wall run; wall itself gives up on a stuck
// terminal after 300 s, far longer than an alert path should wait.
const DefaultWallTimeout = 5 * time.Second

// Wall writes each event to the terminals of everyone logged in to the box,
// which is where a warning before an idle shutdown must land.
//
// The message goes to wall's standard input, not its arguments: busybox's
// wall reads only a file or stdin, util-linux's reads a lone argument that
// names an existing file as that file, and util-linux releases up to 2.40
// passed arguments to terminals unfiltered (CVE-2024-28085, "WallEscape")
// while they always filtered stdin. Control characters are replaced here as
// well.
type Wall struct {
	// Run runs name with args and stdin, returning its combined output;
	// nil means os/exec.
	Run func(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error)
	// LookPath finds wall; nil means exec.LookPath.
	LookPath func(file string) (string, error)
	// Timeout bounds one run; 0 means DefaultWallTimeout.
	Timeout time.Duration
	// Log gets the debug note when wall is missing; nil discards it.
	Log *slog.Logger
}

var _ gpuwarden.Notifier = (*Wall)(nil)

// Notify runs wall with the event's text; a box without wall (a slim
// container) is skipped without error, since it has no terminals to reach.
func (w *Wall) Notify(ctx context.Context, e gpuwarden.Event) error {
	lookPath := w.LookPath
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	path, err := lookPath("wall")
	if err != nil {
		if w.Log != nil {
			w.Log.Debug("wall not installed, skipping terminal broadcast", "kind", e.Kind, "err", err)
		}
		return nil
	}
	timeout := w.Timeout
	if timeout <= 0 {
		timeout = DefaultWallTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	run := w.Run
	if run == nil {
		run = runCommand
	}
	msg := "gpuwarden " + sanitizeTerminal(Text(e, "")) + "\n"
	out, err := run(ctx, []byte(msg), path)
	if err != nil {
		if detail := strings.TrimSpace(string(out)); detail != "" {
			return fmt.Errorf("wall: %w: %s", err, truncate(detail, bodySnippet))
		}
		return fmt.Errorf("wall: %w", err)
	}
	return nil
}

// runCommand is the real runner: the command with stdin, killed when ctx ends.
func runCommand(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	// Without WaitDelay a child that keeps the output pipe open would hold
	// CombinedOutput past the kill.
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if ctxErr := ctx.Err(); err != nil && ctxErr != nil {
		err = errors.Join(err, ctxErr)
	}
	return out, err
}

// sanitizeTerminal replaces control characters (ESC above all, and C1
// codes) with spaces, so that text which quotes process names or file paths
// cannot drive the terminals it is written to.
func sanitizeTerminal(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
			return ' '
		}
		return r
	}, s)
}
