package test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/sw4rm/sw4rm-temporal/examples/tools/coder"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/tools/mcp"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// mcpServerBin returns the path of an npm MCP server's program installed by `make
// mcp-servers`; the test is skipped when it is missing, or fails under CI=true.
func mcpServerBin(t *testing.T, program string) string {
	t.Helper()
	path, err := mcp.InstalledServer(program)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return path
}

// TestToolsExample: on both stores, the tools example (examples/tools, `make
// example-tools`) does what its README says against a server configured as `make dev`
// configures it — the seeded repository greet and the npm filesystem server rooted in each
// caller's worktree: the seeded test fails through builtin/process.run (TOOL_FAILED, its
// output streamed), the fix made through fs/edit_file makes it pass, both providers refuse
// /etc/passwd with PERMISSION_DENIED, and the worktree's diff is the one fixed file. It runs
// twice on the same server, as a new agent in a new worktree each time, and cleans up after
// each run, and after a run cancelled midway: the agent is deregistered and its lifecycle and
// binding workflows have ended, the binding is UNBOUND, and the filesystem server started for
// its worktree has exited.
func TestToolsExample(t *testing.T) {
	fsBin := mcpServerBin(t, "mcp-server-filesystem")
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			repo := filepath.Join(t.TempDir(), "greet")
			require.NoError(t, coder.Seed(repo))
			cfg := newConfig(t, kind)
			cfg.Repos = coder.RepoID + "=" + repo
			cfg.MCPServers = coder.FSProvider + "[network=DENY_ALL]=stdio:" + fsBin + " {worktree}"
			// The example's go test shares the machine's build cache, as `sw4rm dev` lets it.
			cfg.ToolWritePaths = goEnv(t, "GOCACHE")
			sys := start(t, cfg)
			// The server imports the filesystem server's tools in the background.
			require.Eventually(t, func() bool {
				rs, err := sys.app.Store().ToolProviders().ListTools(t.Context(), coder.FSProvider)
				return err == nil && len(rs) > 0
			}, 60*time.Second, 100*time.Millisecond, "the filesystem server's tools are imported")

			var agents []string
			for run := 1; run <= 2; run++ {
				// The deadline is what would end a run that hangs.
				ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
				out := &watchedOutput{}
				rep, err := coder.Run(ctx, sys.app.GRPCAddr(), coder.Options{Out: out, Timeout: 3 * time.Minute})
				cancel()
				require.NoError(t, err, "run %d; example output:\n%s", run, out)
				t.Logf("run %d, example output:\n%s", run, out)
				assert.Equal(t, "TOOL_FAILED", rep.FirstRun, "output:\n%s", out)
				assert.Contains(t, rep.TestOutput, `want "Hello, Ada!"`, "the failing test's output was streamed")
				assert.Empty(t, rep.SecondRun, "the fixed test passes; output:\n%s", out)
				assert.Contains(t, rep.Fixed, `"Hello, " + name + "!"`)
				assert.Equal(t, map[string]string{coder.FSProvider: "PERMISSION_DENIED", coder.Builtin: "PERMISSION_DENIED"}, rep.Refused)
				assert.Contains(t, rep.Diff, "greet.go")
				assert.Contains(t, rep.Diff, "1 file changed")
				assert.NotContains(t, agents, rep.Agent, "each run is a new agent")
				agents = append(agents, rep.Agent)
				assert.Equal(t, "sw4rm/fix-"+rep.Agent, rep.Branch, "each run is a new worktree")
				assertToolsExampleCleanedUp(t, sys, rep, out)
				// The worktree and its branch stay, with the fix (docs/worktrees.md, "Unbind").
				b, err := os.ReadFile(filepath.Join(rep.Worktree, "greet.go"))
				require.NoError(t, err)
				assert.Contains(t, string(b), `"Hello, " + name + "!"`)
			}

			// A run cancelled midway — once the filesystem server has been started for its
			// worktree — cleans up as well.
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			out := &watchedOutput{after: "--- greet.go, read through", do: cancel}
			rep, err := coder.Run(ctx, sys.app.GRPCAddr(), coder.Options{Out: out, Timeout: 3 * time.Minute})
			require.ErrorIs(t, err, context.Canceled, "output:\n%s", out)
			assert.NotContains(t, agents, rep.Agent)
			assertToolsExampleCleanedUp(t, sys, rep, out)
		})
	}
}

// assertToolsExampleCleanedUp checks what a run of the tools example leaves once Run has
// returned: its agent deregistered (gone from the registry) with its lifecycle workflow
// ended, its binding UNBOUND with the binding's workflow ended, and no process — the
// filesystem server started for the worktree — whose command line names the worktree. That
// the server was running while the example read greet.go through it is checked too, so the
// last assertion cannot pass by looking in the wrong place.
func assertToolsExampleCleanedUp(t *testing.T, sys *system, rep coder.Report, out *watchedOutput) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), time.Minute)
	defer cancel()
	require.NotEmpty(t, rep.Agent)
	require.NotEmpty(t, rep.Worktree)
	assert.True(t, rep.Unbound, "the example unbound its agent")
	assert.True(t, rep.Deregistered, "the example deregistered its agent")
	assert.Positive(t, out.seenProcesses(rep.Worktree), "the filesystem server ran for the worktree while the example read greet.go")

	_, err := sys.app.Store().Registry().GetAgent(ctx, rep.Agent)
	assert.True(t, errors.Is(err, store.ErrNotFound), "%s is deregistered: %v", rep.Agent, err)
	for _, id := range []string{workflows.AgentWorkflowID(rep.Agent), workflows.WorktreeWorkflowID(rep.Agent)} {
		assert.NoError(t, sys.app.Temporal().GetWorkflow(ctx, id, "").Get(ctx, nil), "%s ended", id)
		d, err := sys.app.Temporal().DescribeWorkflowExecution(ctx, id, "")
		if assert.NoError(t, err) {
			assert.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, d.GetWorkflowExecutionInfo().GetStatus(), "%s completed", id)
		}
	}
	b, err := sys.app.Store().Worktrees().GetBinding(ctx, rep.Agent)
	require.NoError(t, err)
	assert.Equal(t, "UNBOUND", b.State, "the binding ended")

	// The server ends the worktree's filesystem server once the binding has ended.
	assert.Eventually(t, func() bool { return processesNaming(rep.Worktree) == 0 }, 30*time.Second, 100*time.Millisecond,
		"the filesystem server started for %s has exited", rep.Worktree)
}

// processesNaming counts this machine's processes whose command line holds s, read from
// /proc.
func processesNaming(s string) int {
	ms, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	n := 0
	for _, m := range ms {
		b, err := os.ReadFile(m)
		if err == nil && strings.Contains(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})), s) {
			n++
		}
	}
	return n
}

// watchedOutput is the example's output. Once it holds after (the example read greet.go
// through the filesystem server, so the worktree's server runs), it counts the processes
// naming the worktree, and calls do.
type watchedOutput struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	after string
	do    func()
	fired bool
	// procs is processesNaming(worktree) when after appeared, by worktree.
	procs int
}

func (w *watchedOutput) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	after := w.after
	if after == "" {
		after = "--- greet.go, read through"
	}
	if !w.fired && strings.Contains(w.buf.String(), after) {
		w.fired = true
		if wt := worktreeOf(w.buf.String()); wt != "" {
			w.procs = processesNaming(wt)
		}
		if w.do != nil {
			w.do()
		}
	}
	return n, err
}

// seenProcesses is the count of processes naming worktree taken when the example had read
// greet.go through the filesystem server.
func (w *watchedOutput) seenProcesses(worktree string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if worktreeOf(w.buf.String()) != worktree {
		return 0
	}
	return w.procs
}

func (w *watchedOutput) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// worktreeOf reads the worktree's path from the example's "bound to worktree" line.
func worktreeOf(out string) string {
	_, rest, ok := strings.Cut(out, " bound to worktree ")
	if !ok {
		return ""
	}
	path, _, _ := strings.Cut(rest, " (branch ")
	return path
}

// goEnv is `go env name`.
func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}
