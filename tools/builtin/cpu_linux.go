//go:build linux

package builtin

import (
	"context"
	"os"
	"sync/atomic"
	"time"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
	"github.com/sw4rm/sw4rm-temporal/tools/cpuwatch"
)

// newCPUWatch readies the watch of budget_cpu_ms for a process.run call (§18.5.1): nil
// without a budget. The watch counts every process the call starts — in a cgroup of the
// call's own where the host has a writable cgroup v2 hierarchy, else over /proc from the
// call's init, which adopts every orphan of its PID namespace — so a descendant that calls
// setsid is counted too. When neither can be read the call is refused PERMISSION_DENIED
// rather than run unwatched.
func newCPUWatch(req tools.Request, program string) (*cpuwatch.Watch, error) {
	if req.Policy.BudgetCPU <= 0 {
		return nil, nil
	}
	w, err := cpuwatch.New()
	if err != nil {
		return nil, tool.Errorf(tool.CodePermissionDenied,
			"tool %q: budget_cpu_ms cannot be enforced (%v); %q was not started", req.ToolName, err, program)
	}
	return w, nil
}

// watchCPU samples the CPU time of the call's processes every CPUPollInterval until the
// process exits or runCtx ends, and ends the run with errCPUBudget when they used more than
// budget (§18.5.1: terminate when the budget is exhausted). A cgroup is killed at once, with
// every process in it; otherwise ending the run kills the init (and with it its PID
// namespace) and the process group.
func (p *Provider) watchCPU(runCtx context.Context, exited <-chan struct{}, w *cpuwatch.Watch, budget time.Duration, watched *atomic.Int64, stop context.CancelCauseFunc) {
	if !w.Exceeded(runCtx, exited, p.opts.CPUPollInterval, 0, budget, watched) {
		return
	}
	if w.Exact() {
		w.Kill()
	}
	stop(errCPUBudget)
}

// exactCPU is the CPU time the kernel counted for the run: the rusage of the process and
// the descendants it waited for, or, with a cgroup, every process that ran in it if that is
// more (orphans a PID namespace's end took with it, and any without a PID namespace).
func exactCPU(ps *os.ProcessState, w *cpuwatch.Watch) time.Duration {
	exact := ps.UserTime() + ps.SystemTime()
	if w.Exact() {
		exact = max(exact, w.Used())
	}
	return exact
}

// endCPUWatched kills what is left in the call's cgroup once its process exited; under
// /proc the process group was killed, and the PID namespace ended with its init.
func endCPUWatched(w *cpuwatch.Watch) {
	if w.Exact() {
		w.Kill()
	}
}
