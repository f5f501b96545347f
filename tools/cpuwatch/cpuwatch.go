// Package cpuwatch measures the CPU time of a process and of everything it starts, for
// budget_cpu_ms (§18.5.1: "Implementations MUST terminate tool execution when this budget is
// exhausted"). It prefers a cgroup v2 per watched process — the kernel's exact sum over every
// process that ever ran in it, which a descendant cannot leave by calling setsid, and which
// cgroup.kill ends at once — and falls back to sampling /proc over the process's tree when
// no writable cgroup v2 hierarchy is available (docs/tools.md, "CPU budget").
package cpuwatch

import (
	"context"
	"sync/atomic"
	"time"
)

// Mechanism names how a Watch measures.
type Mechanism string

const (
	// MechanismCgroup is a cgroup v2 of the watched process's own: its cpu.stat usage_usec is
	// exact and counts processes that left the process group or the session, and cgroup.kill
	// ends them all.
	MechanismCgroup Mechanism = "cgroup"
	// MechanismProc samples /proc/<pid>/stat (utime, stime, cutime, cstime) over the watched
	// process, its descendants (by parent pid) and its process group. A process that calls
	// setsid stays a descendant; an orphan is adopted by the init of its PID namespace, so
	// when the watched process is such an init every process it started is counted. Without
	// a PID namespace an orphan that also left the process group is not.
	MechanismProc Mechanism = "proc"
)

// Exceeded samples w every interval until stop is closed or ctx ends (false), or until the
// CPU time used since baseline passes budget (true). An exact sample (cgroup) over the budget
// decides at once; a /proc sample is a sum over files read one after another, in which a
// child reaped between two reads may be counted twice, so two samples in a row must be over.
// seen, when not nil, keeps the most CPU time seen since baseline, in milliseconds.
func (w *Watch) Exceeded(ctx context.Context, stop <-chan struct{}, interval, baseline, budget time.Duration, seen *atomic.Int64) bool {
	t := time.NewTicker(interval)
	defer t.Stop()
	need := 2
	if w.Exact() {
		need = 1
	}
	over := 0
	for {
		select {
		case <-stop:
			return false
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		used := w.Used() - baseline
		if seen != nil {
			if ms := used.Milliseconds(); ms > seen.Load() {
				seen.Store(ms)
			}
		}
		if used <= budget {
			over = 0
			continue
		}
		if over++; over >= need {
			return true
		}
	}
}
