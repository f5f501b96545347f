//go:build linux

package mcp

import (
	"os"
	"os/exec"
	"syscall"
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
	attr := cmd.SysProcAttr
	attr.Cloneflags |= syscall.CLONE_NEWNET | syscall.CLONE_NEWUSER
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
	// Writing a gid map unprivileged requires setgroups to be denied.
	attr.GidMappingsEnableSetgroups = false
	return nil
}
