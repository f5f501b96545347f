package mcp

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sync/semaphore"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
	"github.com/sw4rm/sw4rm-temporal/tools/cpuwatch"
)

// CPUPollInterval is how often a call with budget_cpu_ms samples the CPU time of its
// server's processes.
const CPUPollInterval = 50 * time.Millisecond

// exclusiveWeight is what a call with budget_cpu_ms takes of its session's use: all of it,
// so that no other call runs on the server while the budgeted one is measured. A call
// without a budget takes 1.
const exclusiveWeight = 1 << 30

// errCPUBudget ends a call whose server used more CPU time than budget_cpu_ms.
var errCPUBudget = errors.New("the CPU budget is exhausted")

// newUse is a session's use: shared by calls without budget_cpu_ms, taken whole by one with
// it. semaphore.Weighted serves waiters in order, so a budgeted call waiting for the calls in
// flight holds back those that come after it and is not starved.
func newUse() *semaphore.Weighted { return semaphore.NewWeighted(exclusiveWeight) }

// watchServer readies the CPU watch of a stdio server about to start (nil for a transport
// that starts no process, or when neither a cgroup nor /proc can measure one).
func watchServer(t sdk.Transport) *cpuwatch.Watch {
	ct, ok := t.(*sdk.CommandTransport)
	if !ok {
		return nil
	}
	w, err := cpuwatch.Prepare(ct.Command)
	if err != nil {
		return nil
	}
	return w
}

// serverStarted records the started server's process in w; w is closed and nil returned when
// no process was started.
func serverStarted(t sdk.Transport, w *cpuwatch.Watch) *cpuwatch.Watch {
	ct, ok := t.(*sdk.CommandTransport)
	if w == nil || !ok || ct.Command.Process == nil {
		w.Close()
		return nil
	}
	w.Started(ct.Command.Process.Pid, 0)
	return w
}

// checkCPUBudget refuses a call with budget_cpu_ms that cannot be measured on srv: a server
// reached over HTTP runs elsewhere, its CPU time out of SW4RM's sight.
func (e *Executor) checkCPUBudget(req tools.Request, srv Server) error {
	if req.Policy.BudgetCPU <= 0 || srv.URL == "" {
		return nil
	}
	return tool.Errorf(tool.CodePermissionDenied,
		"budget_cpu_ms %d cannot be enforced by MCP provider %q: its server is reached over HTTP and runs where SW4RM cannot measure its CPU time; call it without budget_cpu_ms (budget_wall_ms bounds its time), or configure a stdio server (docs/tools.md, \"CPU budget\")",
		req.Policy.BudgetCPU.Milliseconds(), e.p.ID)
}

// callBudgeted runs a call with budget_cpu_ms on the session s, which it holds alone (the
// session's use, taken whole), so the CPU time its server's processes use meanwhile is the
// call's. Past the budget the call is stopped, every process of the server killed and the
// session ended — the server may be mid-work, so the next call starts a new one — and the
// call ends CPU_BUDGET_EXCEEDED. A call that returned while over an exact (cgroup) measure is
// CPU_BUDGET_EXCEEDED too, its server left running, as it is between calls.
func (e *Executor) callBudgeted(ctx context.Context, s *session, c *Client, req tools.Request, emit tools.Emit) (tools.Result, error) {
	budget := req.Policy.BudgetCPU
	w := c.cpu
	if w == nil {
		return tools.Result{}, tool.Errorf(tool.CodePermissionDenied,
			"budget_cpu_ms %d cannot be enforced by MCP provider %q: neither a cgroup nor /proc can measure its server's processes here", budget.Milliseconds(), e.p.ID)
	}
	baseline := w.Used() // the server's start and earlier calls are not this call's
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	watched := make(chan struct{})
	var seen atomic.Int64
	go func() {
		defer close(watched)
		if w.Exceeded(cctx, stop, e.cpuPoll, baseline, budget, &seen) {
			cancel(errCPUBudget)
		}
	}()
	res, err := call(cctx, c, req, emit)
	close(stop)
	<-watched
	if errors.Is(context.Cause(cctx), errCPUBudget) {
		// Killed first, so that ending the session does not wait for a busy server.
		w.Kill()
		s.mu.Lock()
		if s.client == c { // held alone (the session's use), so nothing replaced it meanwhile
			s.end()
		}
		s.mu.Unlock()
		return tools.Result{}, tool.Errorf(tool.CodeCPUBudgetExceeded,
			"tool %q: MCP provider %q's server used %d ms of CPU time during the call, more than budget_cpu_ms %d; the server was stopped, and the next call starts a new one",
			req.ToolName, e.p.ID, seen.Load(), budget.Milliseconds())
	}
	if err == nil && w.Exact() {
		if used := w.Used() - baseline; used > budget {
			return tools.Result{}, tool.Errorf(tool.CodeCPUBudgetExceeded,
				"tool %q: MCP provider %q's server used %d ms of CPU time during the call, more than budget_cpu_ms %d",
				req.ToolName, e.p.ID, used.Milliseconds(), budget.Milliseconds())
		}
	}
	return res, err
}
