package mcp

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools/cpuwatch"
)

// burnServerEnv makes the test binary run as an MCP stdio server whose tools use CPU time.
const burnServerEnv = "SW4RM_TEST_MCP_BURN_SERVER"

// runBurnServer serves over stdio:
//   - "burn": a busy loop in the server's own process until the call is cancelled;
//   - "orphan_burn": a busy loop in a process that double-forks with setsid — another
//     session, and an orphan adopted outside the server's tree — then waits to be cancelled;
//   - "nap": sleeps {"ms"} without using CPU;
//   - "pid": the server's process id.
func runBurnServer() int {
	s := sdk.NewServer(&sdk.Implementation{Name: "burn", Version: "1"}, nil)
	obj := json.RawMessage(`{"type":"object"}`)
	s.AddTool(&sdk.Tool{Name: "burn", InputSchema: obj}, func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		for n := 0; ctx.Err() == nil; n++ {
			if n%1_000_000 == 0 {
				runtime.Gosched()
			}
		}
		return nil, ctx.Err()
	})
	s.AddTool(&sdk.Tool{Name: "orphan_burn", InputSchema: obj}, func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		if err := exec.Command("setsid", "sh", "-c", `sh -c "while :; do :; done" & exit 0`).Run(); err != nil {
			return nil, err
		}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	s.AddTool(&sdk.Tool{Name: "nap", InputSchema: obj}, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		var in struct {
			MS int `json:"ms"`
		}
		_ = json.Unmarshal(req.Params.Arguments, &in)
		select {
		case <-time.After(time.Duration(in.MS) * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "rested"}}}, nil
	})
	s.AddTool(&sdk.Tool{Name: "pid", InputSchema: obj}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strconv.Itoa(os.Getpid())}}}, nil
	})
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		return 1
	}
	return 0
}

// burnExecutor is an Executor of a stdio provider running the burn server.
func burnExecutor(t *testing.T) *Executor {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("CPU time is measured only on Linux")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	ps, err := ParseProviders("burn[network=DENY_ALL]=stdio:" + exe + " -test.run=^$")
	require.NoError(t, err)
	p := ps[0]
	p.Server.Env = append(os.Environ(), burnServerEnv+"=1")
	p.Server.StopTimeout = time.Second
	e := NewExecutor(p)
	e.cpuPoll = 20 * time.Millisecond
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// withMechanisms runs f with a cgroup per server where the host allows one, and with the
// /proc fallback.
func withMechanisms(t *testing.T, f func(t *testing.T, m cpuwatch.Mechanism)) {
	for _, m := range []cpuwatch.Mechanism{cpuwatch.MechanismCgroup, cpuwatch.MechanismProc} {
		t.Run(string(m), func(t *testing.T) {
			switch {
			case m == cpuwatch.MechanismCgroup && !cpuwatch.CgroupAvailable():
				t.Skip("no writable cgroup v2 hierarchy here")
			case m == cpuwatch.MechanismProc:
				t.Cleanup(cpuwatch.ForceProc())
			}
			f(t, m)
		})
	}
}

// serverPID asks the server its pid.
func serverPID(t *testing.T, e *Executor, p tool.Policy) string {
	t.Helper()
	r, err := e.Call(context.Background(), request("pid", `{}`, p, ""), noFrames)
	require.NoError(t, err)
	return string(r.Data)
}

// TestExecutorCPUBudget: a call whose stdio server uses more CPU time than budget_cpu_ms
// ends CPU_BUDGET_EXCEEDED and the server is replaced for the next call; a call under its
// budget runs as usual.
func TestExecutorCPUBudget(t *testing.T) {
	withMechanisms(t, func(t *testing.T, m cpuwatch.Mechanism) {
		e := burnExecutor(t)
		budget := tool.Policy{BudgetCPU: 200 * time.Millisecond}
		before := serverPID(t, e, budget) // under its budget: the call runs
		assert.Equal(t, m, e.sessions[""].client.cpu.Mechanism())

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		began := time.Now()
		_, err := e.Call(ctx, request("burn", `{}`, budget, ""), noFrames)
		require.Equal(t, tool.CodeCPUBudgetExceeded, tool.CodeOf(err), "%v", err)
		assert.Contains(t, err.Error(), "budget_cpu_ms 200")
		assert.Contains(t, err.Error(), "the server was stopped")
		assert.Less(t, time.Since(began), 20*time.Second)

		after := serverPID(t, e, tool.Policy{})
		assert.NotEqual(t, before, after, "the server that went over the budget was replaced")
	})
}

// TestExecutorCPUBudgetCountsOrphans: with a cgroup per server, a process the server
// double-forks with setsid is counted, and killed with the server.
func TestExecutorCPUBudgetCountsOrphans(t *testing.T) {
	if !cpuwatch.CgroupAvailable() {
		t.Skip("no writable cgroup v2 hierarchy here: /proc does not find an orphan outside a PID namespace (docs/tools.md)")
	}
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid is not installed")
	}
	e := burnExecutor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := e.Call(ctx, request("orphan_burn", `{}`, tool.Policy{BudgetCPU: 200 * time.Millisecond}, ""), noFrames)
	require.Equal(t, tool.CodeCPUBudgetExceeded, tool.CodeOf(err), "%v", err)
}

// TestExecutorCPUBudgetRunsAlone: a call with budget_cpu_ms waits for the calls in flight on
// its server and holds back those after it, so the CPU time it measures is its own; one that
// cannot wait within its deadline ends TOOL_TIMEOUT.
func TestExecutorCPUBudgetRunsAlone(t *testing.T) {
	e := burnExecutor(t)
	serverPID(t, e, tool.Policy{})
	napDone := make(chan time.Time, 1)
	go func() {
		_, err := e.Call(context.Background(), request("nap", `{"ms":600}`, tool.Policy{}, ""), noFrames)
		assert.NoError(t, err)
		napDone <- time.Now()
	}()
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.sessions[""].inFlight == 1
	}, 5*time.Second, 5*time.Millisecond)
	time.Sleep(50 * time.Millisecond) // the nap has the session's use

	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := e.Call(short, request("pid", `{}`, tool.Policy{BudgetCPU: time.Second}, ""), noFrames)
	assert.Equal(t, tool.CodeToolTimeout, tool.CodeOf(err), "%v", err)

	_, err = e.Call(context.Background(), request("pid", `{}`, tool.Policy{BudgetCPU: time.Second}, ""), noFrames)
	require.NoError(t, err)
	finished := time.Now()
	select {
	case napped := <-napDone:
		assert.False(t, finished.Before(napped), "the budgeted call ran while the nap was in flight")
	default:
		t.Fatal("the budgeted call ended before the call in flight")
	}
}

// TestExecutorCPUBudgetRefusedOverHTTP: an HTTP server's CPU time cannot be measured, so a
// call with budget_cpu_ms is refused before the server is reached.
func TestExecutorCPUBudgetRefusedOverHTTP(t *testing.T) {
	e, f := newTestExecutor(t, "remote[network=DENY_ALL]=http://127.0.0.1:9/mcp")
	_, err := e.Call(context.Background(), request("where", `{}`, tool.Policy{BudgetCPU: time.Second}, ""), noFrames)
	require.Equal(t, tool.CodePermissionDenied, tool.CodeOf(err), "%v", err)
	assert.Contains(t, err.Error(), "reached over HTTP")
	assert.Empty(t, f.dialed(), "no server is reached")
	_, err = e.Call(context.Background(), request("where", `{}`, tool.Policy{}, ""), noFrames)
	require.NoError(t, err, "without a budget the call runs")
}
