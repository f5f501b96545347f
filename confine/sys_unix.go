//go:build unix

package confine

import (
	"os/exec"
	"syscall"
)

// openGuardFlags make an open harmless should the path turn out to be a FIFO or a device:
// no blocking for a FIFO's other end, no terminal becoming the process's controlling one.
const openGuardFlags = syscall.O_NONBLOCK | syscall.O_NOCTTY

// errNotDir is the error of a path that goes through a file as if it were a directory.
var errNotDir error = syscall.ENOTDIR

// ownProcessGroup starts the command in a process group of its own and makes cancellation
// kill the whole group, so that whatever the command spawned in turn does not outlive it.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// The negative pid names the group, which Setpgid made equal to the child's pid.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
