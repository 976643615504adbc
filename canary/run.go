package canary

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"time"
)

// execRun is the default Options.Run: it runs name as a child process and
// returns its standard output. When ctx ends the child is killed with its
// whole process group, and Wait gives up on pipes a grandchild still holds,
// so a hung probe cannot outlive its deadline by more than WaitDelay.
func execRun(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = 200 * time.Millisecond
	killGroupOnCancel(cmd)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if last := lastLine(ee.Stderr); last != "" {
			// The last line of a Python traceback is the exception itself.
			return out, fmt.Errorf("%w: %s", err, clip(last))
		}
	}
	return out, err
}

// lastLine is the last non-blank line of b.
func lastLine(b []byte) string {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return string(bytes.TrimSpace(lines[len(lines)-1]))
}
