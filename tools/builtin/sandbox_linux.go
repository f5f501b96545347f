//go:build linux

package builtin

import (
	"errors"
	"os/exec"
	"strings"
	"syscall"

	"github.com/sw4rm/sw4rm-temporal/confine/sandbox"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// sandboxProcess confines the process cmd will start (package sandbox: Landlock and the
// resource limits, applied by the init before it starts the program). Its Run must be
// cleaned up once the process has ended. The privilege levels that ask for the server's
// full privileges, PRIVILEGED and FULL_ACCESS, which run only after an operator's approval
// or a pre-approval (§18.5.3), are not confined and get a nil Run. Every level below is:
// when the host cannot confine the process — no Landlock, or no init to apply it — the call
// is refused PERMISSION_DENIED and nothing is started, as DENY_ALL is refused without
// network namespaces. The init is the one dieWithWorker starts the program through.
func (p *Provider) sandboxProcess(req tools.Request, a processArgs, cmd *exec.Cmd) (*sandbox.Run, error) {
	if req.Policy.Privilege >= tool.PrivilegePrivileged || cmd.Err != nil {
		// Unconfined by policy; or a program that cannot be started (not found), whose
		// start fails TOOL_FAILED with nothing run.
		return nil, nil
	}
	if len(cmd.Args) < 2 || cmd.Args[1] != initArg {
		return nil, tool.Errorf(tool.CodePermissionDenied,
			"tool %q: %q was not started: privilege_level %s confines a process to its worktree, which needs the provider's init process (builtin.RunInitIfAsked first in main, and PID namespaces), and this server has none",
			req.ToolName, a.Argv[0], req.Policy.Privilege)
	}
	run, err := p.opts.Sandbox.Prepare(sandbox.Request{Worktree: req.Worktree})
	if errors.Is(err, sandbox.ErrUnavailable) {
		return nil, tool.Errorf(tool.CodePermissionDenied,
			"tool %q: %q was not started: privilege_level %s confines a process to its worktree, and %v; ask for privilege_level PRIVILEGED (an operator approves it) to run unconfined",
			req.ToolName, a.Argv[0], req.Policy.Privilege, err)
	}
	if err != nil {
		return nil, tool.Errorf(tool.CodeInternal, "tool %q: confining %q: %v", req.ToolName, a.Argv[0], err)
	}
	if err := run.Wrap(cmd); err != nil {
		run.Cleanup()
		return nil, tool.Errorf(tool.CodePermissionDenied,
			"tool %q: %q was not started: privilege_level %s confines a process to its worktree, and %v", req.ToolName, a.Argv[0], req.Policy.Privilege, err)
	}
	return run, nil
}

// sandboxRefusal is the error of a confined process that failed because it ran into its
// confinement or a resource limit (sandbox.Run.Refusal): PERMISSION_DENIED naming which,
// with the end of its stderr; nil when nothing says so, or when the process was not
// confined. what is how the process ended ("exited with code 1", "was killed by signal
// ...").
func sandboxRefusal(run *sandbox.Run, name, program, what, tail string) error {
	if run == nil {
		return nil
	}
	why := run.Refusal(strings.HasSuffix(what, syscall.SIGXFSZ.String()), tail)
	if why == "" {
		return nil
	}
	if tail == "" {
		tail = "(nothing)"
	}
	return tool.Errorf(tool.CodePermissionDenied, "tool %q: %q %s: %s; the end of its stderr: %s", name, program, what, why, tail)
}

// defaultSandbox is the confinement of a provider whose Options name none; tests widen it
// to read their own binary.
var defaultSandbox = sandbox.DefaultPolicy
