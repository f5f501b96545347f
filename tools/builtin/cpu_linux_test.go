//go:build linux

package builtin

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
	"github.com/sw4rm/sw4rm-temporal/tools/cpuwatch"
)

// TestProcessRunCPUBudgetCountsSetsid: a process that double-forks with setsid — its busy
// loop in another session and process group, an orphan whose parent exited — is stopped at
// budget_cpu_ms with CPU_BUDGET_EXCEEDED, while the program itself sleeps and uses no CPU.
// With a cgroup of the call's own (where the host allows one) and with the /proc fallback,
// which finds the orphan under the call's init.
func TestProcessRunCPUBudgetCountsSetsid(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid is not installed")
	}
	budget := func(r *tools.Request) { r.Policy.BudgetCPU = 200 * time.Millisecond }
	script := `setsid sh -c 'sh -c "while :; do :; done" & exit 0'; sleep 60`
	for _, mech := range []cpuwatch.Mechanism{cpuwatch.MechanismCgroup, cpuwatch.MechanismProc} {
		t.Run(string(mech), func(t *testing.T) {
			switch {
			case mech == cpuwatch.MechanismCgroup && !cpuwatch.CgroupAvailable():
				t.Skip("no writable cgroup v2 hierarchy here")
			case mech == cpuwatch.MechanismProc && !pidNamespaces():
				t.Skip("without PID namespaces an orphan that left the group is not found under /proc (docs/tools.md)")
			case mech == cpuwatch.MechanismProc:
				t.Cleanup(cpuwatch.ForceProc())
			}
			// The deadline only keeps a broken watch from hanging the test: it would end
			// the call with TOOL_TIMEOUT, not CPU_BUDGET_EXCEEDED.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			began := time.Now()
			_, err := run(ctx, New(Options{}), t.TempDir(), nil, budget, "sh", "-c", script)
			wantCode(t, err, tool.CodeCPUBudgetExceeded, "budget_cpu_ms 200")
			if took := time.Since(began); took > 20*time.Second {
				t.Errorf("stopped after %s", took)
			}
		})
	}
}
