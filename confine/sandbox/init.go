package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"sync/atomic"
)

// hooked records that this executable runs the init when started with InitArg.
var hooked atomic.Bool

// SetHooked records that this executable runs the init process when started with InitArg
// (tools/builtin's RunInitIfAsked calls it); until then Wrap cannot confine anything.
func SetHooked() { hooked.Store(true) }

// Hooked reports whether SetHooked was called.
func Hooked() bool { return hooked.Load() }

// ErrNoInit is Wrap's error when this executable does not run the init process.
var ErrNoInit = errors.New("this executable does not run the sandbox's init (tools/builtin.RunInitIfAsked is not called first in main)")

// Wrap makes cmd start through this executable's init process (InitArg), which applies r's
// confinement and then starts cmd's program, and adds r's environment. A command already
// rewritten to start through the init (tools/builtin does it for the PID namespace) only
// gains the environment. Either way cmd starts in a mount namespace of its own, in which
// the init hides the host's /run (Spec.PrivateRun). cmd.Env must be set (a nil Env would
// give the program the server's whole environment).
func (r *Run) Wrap(cmd *exec.Cmd) error {
	// A mount namespace of its own, where the init hides /run's sockets (mountns_linux.go).
	private, err := privateRun(cmd)
	if err != nil {
		return err
	}
	r.Spec.PrivateRun = private
	env, err := r.Env()
	if err != nil {
		return err
	}
	if len(cmd.Args) < 2 || cmd.Args[1] != InitArg {
		if !Hooked() {
			return ErrNoInit
		}
		self, err := os.Executable()
		if err != nil {
			return err
		}
		cmd.Args = append([]string{self, InitArg, cmd.Path}, cmd.Args...)
		cmd.Path = self
		wrapPlatform(cmd)
	}
	cmd.Env = append(cmd.Env, env...)
	return nil
}
