package mcp

import (
	"errors"
	"os"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sw4rm/sw4rm-temporal/confine"
	"github.com/sw4rm/sw4rm-temporal/confine/sandbox"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
)

// confineServer makes a stdio server's command start through the sandbox (package
// sandbox: Landlock, dropped capabilities, resource limits, applied by the server
// executable's init before it starts the program) when s.Sandbox is set: the server may
// write its worktree and a private temporary directory, and read the system paths and its
// own installation (the directory holding the node_modules it was found in, and its
// interpreter's prefix). A command with no environment of its own gets a minimal one —
// PATH, HOME (the worktree, else the temporary directory), LANG — rather than the server's,
// which holds its credentials. The returned cleanup removes the temporary directory and
// cgroup once the server has ended. A host that cannot confine the server refuses to start
// it, PERMISSION_DENIED.
func (s Server) confineServer(t sdk.Transport) (func(), error) {
	ct, ok := t.(*sdk.CommandTransport)
	if !ok || s.Sandbox == nil {
		return func() {}, nil
	}
	cmd := ct.Command
	run, err := s.Sandbox.Prepare(sandbox.Request{Worktree: s.Worktree, Program: cmd.Path})
	if errors.Is(err, sandbox.ErrUnavailable) {
		return nil, tool.Errorf(tool.CodePermissionDenied, "the MCP server %q was not started: it runs confined to its worktree, and %v", cmd.Path, err)
	}
	if err != nil {
		return nil, tool.Errorf(tool.CodeInternal, "confining the MCP server %q: %v", cmd.Path, err)
	}
	home := s.Worktree
	if home == "" {
		home = run.TempDir
	}
	if cmd.Env == nil {
		path := os.Getenv("PATH")
		if path == "" {
			path = confine.DefaultPath
		}
		cmd.Env = []string{"PATH=" + path, "HOME=" + home, "LANG=C.UTF-8"}
	}
	if cmd.Dir == "" {
		cmd.Dir = home
	}
	if err := run.Wrap(cmd); err != nil {
		run.Cleanup()
		return nil, tool.Errorf(tool.CodePermissionDenied, "the MCP server %q was not started: it runs confined to its worktree, and %v", cmd.Path, err)
	}
	return run.Cleanup, nil
}
