//go:build linux

package mcp

import (
	"os/exec"
	"syscall"

	"github.com/sw4rm/sw4rm-temporal/confine/sandbox"
)

// isolateNetwork makes cmd start in a new network namespace, with a user namespace of its
// own in which the server's uid and gid — root's too — are mapped to themselves: the server
// gains no privilege, has no network, and holds no capability over the host's network
// namespace, so it cannot join it. If the host refuses the namespaces the server does not
// start, and its calls fail: it is never run with more network than declared.
func isolateNetwork(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWNET
	sandbox.MappedUserNamespace(cmd.SysProcAttr)
	return nil
}
