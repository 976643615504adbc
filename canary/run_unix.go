//go:build unix

package canary

import (
	"os/exec"
	"syscall"
)

// killGroupOnCancel starts the child in its own process group and kills the
// group when the context ends: a framework import may start helpers that
// would otherwise keep running after the probe gave up.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
