//go:build !linux

package builtin

import (
	"context"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// runProcess refuses: the network namespace of DENY_ALL and the CPU watch of budget_cpu_ms
// are Linux's, and a process is not run without the confinement its policy asks for.
func (p *Provider) runProcess(_ context.Context, req tools.Request, a processArgs, _ *netPlan, _ tools.Emit) (tools.Result, error) {
	return tools.Result{}, tool.Errorf(tool.CodePermissionDenied, "tool %q: %q was not started: process confinement needs Linux", req.ToolName, a.Argv[0])
}

// close does nothing: no process is started here.
func (n *netPlan) close() {}
