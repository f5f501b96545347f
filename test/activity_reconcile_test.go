package test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/app"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/reconcile"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// unclosedStore shares a store with a second process of the test, whose Stop must not close
// it under the first.
type unclosedStore struct{ store.Store }

func (unclosedStore) Close() {}

// TestOrphanedActivityEntriesAreReconciled covers the Scheduler's reconciliation of the
// activity buffer (§10: "MUST reconcile and purge entries for tasks in COMPLETED, FAILED, or
// unknown states") over gRPC on both stores. A running task's workflow is terminated behind
// the system's back, so nothing closes its entry, and an entry is left whose task Temporal
// has never heard of: within a few sweep intervals both leave the active buffer for the
// history — the terminated one failed, the unknown one unknown — each audited once as
// activity.reconciled although two workers sweep the same store, while the entry of a task
// whose workflow still runs stays until that task completes.
func TestOrphanedActivityEntriesAreReconciled(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := newConfig(t, kind)
			cfg.ActivityReconcileInterval = 200 * time.Millisecond
			cfg.ActivityReconcileGrace = 500 * time.Millisecond
			sys := start(t, cfg)
			ctx := context.Background()
			// A second worker on the same store and task queue sweeps too.
			wcfg := cfg
			wcfg.GRPCAddr, wcfg.HTTPAddr = "", ""
			second, err := app.StartWithStore(ctx, wcfg, app.Roles{Worker: true}, testLogger(), unclosedStore{sys.app.Store()})
			require.NoError(t, err)
			t.Cleanup(second.Stop)

			a := dialAgent(t, sys, "worker")
			release := make(chan struct{})
			serve(t, a, func(ctx context.Context, run *sdk.TaskRun) ([]byte, error) {
				select {
				case <-release:
				case <-ctx.Done():
				}
				return []byte("done " + run.Task().ID), nil
			})
			waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)
			sc := schedulerpb.NewSchedulerServiceClient(dialRaw(t, sys))

			killed, kept, ghost := uniq(t, "killed"), uniq(t, "kept"), uniq(t, "ghost")
			require.True(t, submit(t, sc, a.ID(), killed, 0, "repo:shop path:a/**").GetAccepted())
			waitTask(t, sys, killed, workflows.TaskRunning)
			require.True(t, submit(t, sc, a.ID(), kept, 0, "repo:shop path:b/**").GetAccepted())
			waitTask(t, sys, kept, workflows.TaskQueued) // behind killed, its workflow running
			// An entry no task workflow stands behind.
			_, err = sys.app.Store().ActivityBuffer().Put(ctx, store.ActivityEntry{AgentID: a.ID(), TaskID: ghost, Description: "left behind"}, store.ActivityLimits{})
			require.NoError(t, err)
			tasks, _ := pollActivity(t, sc, a.ID())
			require.ElementsMatch(t, []string{killed, kept, ghost}, tasks)

			require.NoError(t, sys.app.Temporal().TerminateWorkflow(ctx, workflows.TaskWorkflowID(killed), "", "terminated behind the scheduler's back"))

			// reconciled returns the activity.reconciled events of the agent's tasks by task_id,
			// and the task_ids audited more than once.
			reconciled := func() (map[string]map[string]any, []string) {
				evs, err := sys.app.Store().Audit().List(ctx, store.AuditFilter{AgentID: a.ID(), TypePrefix: reconcile.AuditType})
				if err != nil {
					return nil, nil
				}
				out, again := map[string]map[string]any{}, []string(nil)
				for _, ev := range evs {
					var d map[string]any
					if json.Unmarshal(ev.Details, &d) != nil {
						continue
					}
					id, _ := d["task_id"].(string)
					if _, ok := out[id]; ok {
						again = append(again, id)
					}
					out[id] = d
				}
				return out, again
			}
			require.Eventually(t, func() bool {
				tasks, _ := pollActivity(t, sc, a.ID())
				evs, _ := reconciled()
				return len(tasks) == 1 && len(evs) == 2
			}, 20*time.Second, 50*time.Millisecond, "the orphaned entries are reconciled within a few sweeps")
			tasks, _ = pollActivity(t, sc, a.ID())
			assert.Equal(t, []string{kept}, tasks, "a task whose workflow runs keeps its entry")
			tasks, _ = pollActivity(t, sc, a.ID(), wire.ActivityHistoryKey, "true")
			assert.ElementsMatch(t, []string{killed, ghost}, tasks, "the reconciled entries are in the short history")

			hist, err := sys.app.Store().ActivityBuffer().History(ctx, store.ActivityFilter{AgentID: a.ID()})
			require.NoError(t, err)
			status := map[string]store.ActivityStatus{}
			for _, e := range hist {
				status[e.TaskID] = e.Status
			}
			assert.Equal(t, map[string]store.ActivityStatus{killed: store.ActivityFailed, ghost: store.ActivityUnknown}, status)

			evs, again := reconciled()
			assert.Empty(t, again, "each entry is audited once, though two workers sweep")
			assert.Equal(t, "Terminated", evs[killed]["workflow_status"])
			assert.Equal(t, "active", evs[killed]["before"])
			assert.Equal(t, "failed", evs[killed]["after"])
			assert.NotEmpty(t, evs[killed]["run_id"])
			assert.Contains(t, evs[killed]["reason"], "terminated")
			assert.Equal(t, "NotFound", evs[ghost]["workflow_status"])
			assert.Equal(t, "unknown", evs[ghost]["after"])

			// Further sweeps of both workers audit nothing again; the task that kept its entry
			// runs once the agent is free, and its own workflow closes the entry.
			close(release)
			waitTask(t, sys, kept, workflows.TaskCompleted)
			time.Sleep(5 * cfg.ActivityReconcileInterval)
			evs, again = reconciled()
			assert.Len(t, evs, 2)
			assert.Empty(t, again)
			hist, err = sys.app.Store().ActivityBuffer().History(ctx, store.ActivityFilter{AgentID: a.ID(), TaskID: kept})
			require.NoError(t, err)
			require.Len(t, hist, 1)
			assert.Equal(t, store.ActivityCompleted, hist[0].Status)
		})
	}
}
