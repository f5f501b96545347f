package app

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	sdkworker "go.temporal.io/sdk/worker"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/confine/sandbox"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/tools"
	"github.com/sw4rm/sw4rm-temporal/tools/builtin"
	"github.com/sw4rm/sw4rm-temporal/tools/mcp"
	"github.com/sw4rm/sw4rm-temporal/worker"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// startToolWorkers starts one Temporal worker per provider this process can run, each
// polling its provider's task queue (workflows.ToolTaskQueue), so tool workers scale per
// provider and a slow provider never starves another's calls (§18).
func (a *App) startToolWorkers() error {
	execs, log := a.toolExecutors, a.log
	ids := make([]string, 0, len(execs))
	for id := range execs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		q := workflows.ToolTaskQueue(a.cfg.TaskQueue, id)
		opts := worker.ToolWorkerOptions()
		opts.WorkerStopTimeout = a.cfg.WorkerStopTimeout
		w := sdkworker.New(a.temporal, q, opts)
		worker.RegisterToolRunner(w, &activities.ToolRunner{ProviderID: id, Executor: execs[id], Store: a.store, Sink: a.sink, Log: log})
		if err := w.Start(); err != nil {
			return fmt.Errorf("start the tool worker of provider %s: %w", id, err)
		}
		a.toolWorkers = append(a.toolWorkers, w)
		log.Info("tool worker polling", "provider_id", id, "task_queue", q)
	}
	return nil
}

// RegisterBuiltinTools registers the descriptors of the providers that describe themselves
// (the built-in provider) under their provider ids, kind "builtin", by the scheduler.
func RegisterBuiltinTools(ctx context.Context, execs map[string]tools.Executor, st store.ToolProviders) error {
	for id, e := range execs {
		d, ok := e.(tools.Describer)
		if !ok {
			continue
		}
		if err := st.RegisterProvider(ctx, id, tool.ProviderKindBuiltin, d.Descriptors(), protocol.SchedulerID); err != nil {
			return fmt.Errorf("register the tools of provider %s: %w", id, err)
		}
	}
	return nil
}

// toolExecutors builds the executors this process runs, by provider id: the built-in
// provider, each configured MCP server, and those the configuration adds. The returned
// close ends their sessions and processes.
func toolExecutors(cfg Config, mcpProviders []mcp.Provider, log *slog.Logger) (map[string]tools.Executor, func()) {
	// Resolve refused a malformed allowlist before anything started.
	egress, _ := builtin.ParseEgressAllow(cfg.ToolEgressAllow)
	sb, _ := cfg.toolSandbox() // refused by Resolve when malformed
	execs := map[string]tools.Executor{tools.BuiltinProviderID: builtin.New(builtin.Options{EgressAllow: egress, Sandbox: sb})}
	var closers []func()
	for _, p := range mcpProviders {
		e := mcp.NewExecutor(p)
		execs[p.ID] = e
		closers = append(closers, func() {
			if err := e.Close(); err != nil {
				log.Warn("closing an MCP provider's sessions", "provider_id", p.ID, "err", err)
			}
		})
	}
	for id, e := range cfg.ToolExecutors {
		execs[id] = e
	}
	return execs, func() {
		for _, c := range closers {
			c()
		}
	}
}

// MCPWorktreeSweepInterval is how often a worker ends the sessions of per-worktree MCP
// servers whose worktree is no longer bound (mcp.Executor.EndUnbound). A binding that ends
// on this process's worker ends them at once (activities.Activities.WorktreeUnbound); the
// interval catches the bindings that end on another worker.
const MCPWorktreeSweepInterval = 30 * time.Second

// worktreeSessionSweep ends the per-worktree MCP servers of the worktrees no longer bound:
// a worktree's server is a resource of its binding, released when the binding ends.
type worktreeSessionSweep struct {
	execs []*mcp.Executor
	st    store.Worktrees
	log   *slog.Logger
	// nudge asks for a sweep now; capacity 1, so nudges while one is due are one sweep.
	nudge chan struct{}
	stop  context.CancelFunc
	done  chan struct{}
}

// newWorktreeSessionSweep is the sweep of the per-worktree MCP executors among execs, or nil
// when there is none.
func newWorktreeSessionSweep(execs map[string]tools.Executor, st store.Worktrees, log *slog.Logger) *worktreeSessionSweep {
	s := &worktreeSessionSweep{st: st, log: log, nudge: make(chan struct{}, 1)}
	for _, e := range execs {
		if m, ok := e.(*mcp.Executor); ok && m.Provider().PerWorktree() {
			s.execs = append(s.execs, m)
		}
	}
	if len(s.execs) == 0 {
		return nil
	}
	return s
}

// Nudge asks for a sweep now, without waiting for it.
func (s *worktreeSessionSweep) Nudge() {
	select {
	case s.nudge <- struct{}{}:
	default:
	}
}

// start runs the sweep every interval and on each nudge, until Stop.
func (s *worktreeSessionSweep) start(interval time.Duration) {
	ctx, stop := context.WithCancel(context.Background())
	s.stop, s.done = stop, make(chan struct{})
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-s.nudge:
			}
			s.sweep(ctx)
		}
	}()
}

// Stop ends the sweep and waits for it.
func (s *worktreeSessionSweep) Stop() {
	if s.stop != nil {
		s.stop()
		<-s.done
	}
}

// sweep ends the sessions of every per-worktree executor whose worktree no binding holds.
func (s *worktreeSessionSweep) sweep(ctx context.Context) {
	for _, e := range s.execs {
		ended, err := e.EndUnbound(ctx, s.boundPaths)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("MCP servers of unbound worktrees not ended: cannot read the bindings; the next sweep tries again", "provider_id", e.Provider().ID, "err", err)
			}
			continue
		}
		for _, wt := range ended {
			s.log.Info("MCP server of an unbound worktree ended", "provider_id", e.Provider().ID, "worktree", wt)
		}
	}
}

// boundPaths are the directories of the worktrees bound now (worktree.Bound), read from the
// store's projection, which is what tool calls read their caller's worktree from.
func (s *worktreeSessionSweep) boundPaths(ctx context.Context) ([]string, error) {
	var paths []string
	for _, st := range []worktree.State{worktree.StateBoundHome, worktree.StateSwitchPending, worktree.StateBoundNonHome} {
		bs, err := s.st.ListBindings(ctx, store.WorktreeFilter{State: st.String()})
		if err != nil {
			return nil, err
		}
		for _, b := range bs {
			if b.Path != "" {
				paths = append(paths, b.Path)
			}
		}
	}
	return paths, nil
}

// toolSandbox is the confinement of process.run's processes the settings describe
// (SW4RM_TOOL_READ_PATHS, SW4RM_TOOL_WRITE_PATHS, SW4RM_TOOL_MAX_*; docs/tools.md). Its error
// names the setting at fault.
func (c Config) toolSandbox() (*sandbox.Policy, error) {
	read, err := sandbox.ParsePaths(c.ToolReadPaths)
	if err != nil {
		return nil, settingError("SW4RM_TOOL_READ_PATHS", err)
	}
	write, err := sandbox.ParsePaths(c.ToolWritePaths)
	if err != nil {
		return nil, settingError("SW4RM_TOOL_WRITE_PATHS", err)
	}
	return &sandbox.Policy{ReadPaths: read, WritePaths: write, Limits: sandbox.Limits{
		Procs: c.ToolMaxProcs, FileBytes: int64(c.ToolMaxFileBytes), MemoryBytes: int64(c.ToolMaxMemoryBytes), OpenFiles: c.ToolMaxOpenFiles,
	}}, nil
}
