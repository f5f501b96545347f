//go:build linux

package sandbox

import (
	"os"
	"os/exec"
	"sync"
	"syscall"
)

// wrapPlatform gives an init that the provider did not start itself what it expects: a
// descriptor 3 for its signal report (here /dev/null: nobody reads it), and a PID namespace
// of its own where the host allows one, so that the kernel ends everything the program
// started when the init ends.
func wrapPlatform(cmd *exec.Cmd) {
	if devnull, err := os.Open(os.DevNull); err == nil {
		cmd.ExtraFiles = append([]*os.File{devnull}, cmd.ExtraFiles...)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if PIDNamespaces() {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWPID
		OwnUserNamespace(cmd.SysProcAttr)
	}
}

// OwnUserNamespace adds to attr the user namespace a server that is not root needs to create
// other namespaces; its user and group are mapped to themselves, so the process gains no
// privilege. A root server needs none, and attr is left as it is.
func OwnUserNamespace(attr *syscall.SysProcAttr) {
	if os.Geteuid() == 0 {
		return
	}
	MappedUserNamespace(attr)
}

// MappedUserNamespace adds to attr a user namespace of its own in which the server's user and
// group — root's too — are mapped to themselves: the process gains no privilege and holds no
// capability over the host's namespaces, so it cannot join them (setns through
// /proc/<pid>/ns/*). attr is left as it is when it already asks for a user namespace.
func MappedUserNamespace(attr *syscall.SysProcAttr) {
	if attr.Cloneflags&syscall.CLONE_NEWUSER != 0 {
		return
	}
	attr.Cloneflags |= syscall.CLONE_NEWUSER
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
	// Writing a gid map unprivileged requires setgroups to be denied.
	attr.GidMappingsEnableSetgroups = false
}

// PIDNamespaces reports, once per process, whether the host lets this server start a
// process in a new PID namespace: a trial run of `true` in one.
var PIDNamespaces = sync.OnceValue(func() bool {
	path, err := exec.LookPath("true")
	if err != nil {
		return false
	}
	cmd := exec.Command(path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	OwnUserNamespace(cmd.SysProcAttr)
	return cmd.Run() == nil
})
