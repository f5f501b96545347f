package app

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	sdkworker "go.temporal.io/sdk/worker"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
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
		w := sdkworker.New(a.temporal, q, worker.ToolWorkerOptions())
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
	execs := map[string]tools.Executor{tools.BuiltinProviderID: builtin.New(builtin.Options{})}
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
