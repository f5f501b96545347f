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
	if pidNamespaces() {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWPID
		ownUserNamespace(cmd.SysProcAttr)
	}
}

// ownUserNamespace adds the user namespace a server that is not root needs to create other
// namespaces; its user and group are mapped to themselves, so the process gains no
// privilege (as tools/builtin does for process.run).
func ownUserNamespace(attr *syscall.SysProcAttr) {
	if os.Geteuid() == 0 || attr.Cloneflags&syscall.CLONE_NEWUSER != 0 {
		return
	}
	attr.Cloneflags |= syscall.CLONE_NEWUSER
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
	attr.GidMappingsEnableSetgroups = false
}

// pidNamespaces reports, once per process, whether the host lets this server start a
// process in a new PID namespace: a trial run of `true` in one.
var pidNamespaces = sync.OnceValue(func() bool {
	path, err := exec.LookPath("true")
	if err != nil {
		return false
	}
	cmd := exec.Command(path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	ownUserNamespace(cmd.SysProcAttr)
	return cmd.Run() == nil
})
