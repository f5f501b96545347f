//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// runDirs are the directories where the host's daemons keep their named UNIX sockets
// (PostgreSQL's, Docker's, D-Bus's). Landlock does not govern connect(2) on a named socket,
// so a confined process would reach them; the init hides them under an empty tmpfs in a
// mount namespace of its own (hideRunDirs).
var runDirs = []string{"/run", "/var/run"}

// privateMounts makes cmd start in a mount namespace of its own, owned by a user namespace
// of its own (MappedUserNamespace): the mounts the init makes there are the namespace's
// alone, and the kernel makes every mount it copied from the host a slave, so that nothing
// propagates back. It fails when the host refuses the namespaces (MountNamespaces), and
// the process is then not started.
func privateMounts(cmd *exec.Cmd) error {
	if !MountNamespaces() {
		return errors.New("the host refuses a mount namespace (with a user namespace of its own), which hides the host's UNIX sockets in /run from the process; the deployment must allow user namespaces")
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWNS
	MappedUserNamespace(cmd.SysProcAttr)
	return nil
}

// MountNamespaces reports, once per process, whether the host lets this server start a
// process in a new mount namespace owned by a new user namespace: a trial run of `true`.
var MountNamespaces = sync.OnceValue(func() bool {
	path, err := exec.LookPath("true")
	if err != nil {
		return false
	}
	cmd := exec.Command(path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	MappedUserNamespace(cmd.SysProcAttr)
	return cmd.Run() == nil
})

// hideRunDirs is the init's side of privateMounts: in its own mount namespace it mounts an
// empty tmpfs over /run (and over /var/run where that is not a symlink to it), so that no
// host daemon's socket is there to connect to. A path of the spec under them — a worktree
// or temporary directory the deployment keeps in /run — is bound back in its place.
// Nothing a process needs by default lives there (DefaultReadPaths holds none of it).
func hideRunDirs(spec Spec) error {
	// Slave first: a mount made here must not reach the host's namespace even where the
	// kernel left a copied mount shared.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("making the mounts private: %w", err)
	}
	type keep struct {
		fd     *os.File
		target string
		dir    bool
	}
	var kept []keep
	defer func() {
		for _, k := range kept {
			_ = k.fd.Close()
		}
	}()
	for _, p := range append(append([]string(nil), spec.ReadWrite...), spec.ReadOnly...) {
		if !underRunDirs(p) {
			continue
		}
		// Held open by descriptor, since the tmpfs hides the path itself.
		fd, err := os.OpenFile(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // missing: nothing to bind back
		}
		fi, err := fd.Stat()
		if err != nil {
			_ = fd.Close()
			continue
		}
		kept = append(kept, keep{fd: fd, target: p, dir: fi.IsDir()})
	}
	for _, d := range runDirs {
		fi, err := os.Lstat(d)
		if err != nil || !fi.IsDir() {
			continue // absent, or a symlink to /run
		}
		if err := syscall.Mount("tmpfs", d, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "mode=0755,size=1m"); err != nil {
			return fmt.Errorf("hiding %s: %w", d, err)
		}
	}
	for _, k := range kept {
		if k.dir {
			if err := os.MkdirAll(k.target, 0o755); err != nil {
				return fmt.Errorf("binding %s back: %w", k.target, err)
			}
		} else {
			if err := os.MkdirAll(filepath.Dir(k.target), 0o755); err != nil {
				return fmt.Errorf("binding %s back: %w", k.target, err)
			}
			if f, err := os.OpenFile(k.target, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				_ = f.Close()
			}
		}
		src := fmt.Sprintf("/proc/self/fd/%d", k.fd.Fd())
		if err := syscall.Mount(src, k.target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("binding %s back: %w", k.target, err)
		}
	}
	return nil
}

// underRunDirs reports whether p is one of runDirs or below one.
func underRunDirs(p string) bool {
	p = filepath.Clean(p)
	for _, d := range runDirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// privateRun makes cmd start in a mount namespace of its own (privateMounts) and reports
// that the init is to hide /run there.
func privateRun(cmd *exec.Cmd) (bool, error) {
	if err := privateMounts(cmd); err != nil {
		return false, err
	}
	return true, nil
}
