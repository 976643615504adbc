//go:build !unix

package launch

import "os/exec"

// killGroupOnCancel leaves os/exec's default, killing the command alone:
// process groups are a Unix notion.
func killGroupOnCancel(cmd *exec.Cmd) {}
