package test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	wtsdk "github.com/sw4rm/sw4rm-temporal/sdk/worktree"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// submitNeedingWorktree submits a task marked as needing its agent's worktree.
func submitNeedingWorktree(t *testing.T, sc schedulerpb.SchedulerServiceClient, agentID, taskID, value string) (*schedulerpb.SubmitTaskResponse, error) {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(context.Background(), wire.NeedsWorktreeKey, value)
	return sc.SubmitTask(ctx, &schedulerpb.SubmitTaskRequest{AgentId: agentID, TaskId: taskID, Scope: "repo:app path:src/" + taskID + "/**",
		Params: []byte(`{"task":"` + taskID + `"}`), ContentType: "application/json"})
}

// TestWorktreeTaskHeldUntilBound: on both stores, a task that needs a worktree
// (sw4rm-needs-worktree: true) submitted for an UNBOUND agent is accepted but held WAITING,
// its reason naming the state (§16.3), while a task that needs none runs at once; the agent
// binds and the held task runs, its activity entry carrying the binding's repository,
// worktree and branch (§10). An agent whose bind failed (BIND_FAILED) holds such a task
// too, until an operator clears the failure and the agent binds. A bad marker is refused.
// The held task's history is recorded for the replay test.
func TestWorktreeTaskHeldUntilBound(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, _ := worktreeSystem(t, kind)
			ctx := context.Background()
			coder := dialBinder(t, sys, "coder")
			sc := schedulerpb.NewSchedulerServiceClient(coder.Conn())
			held, free := uniq(t, "held"), uniq(t, "free")
			var log runLog
			release := make(chan struct{})
			handler := func(ctx context.Context, run *sdk.TaskRun) ([]byte, error) {
				log.add(run.Task().ID)
				if run.Task().ID == held {
					select { // runs until the test has seen its activity entry
					case <-release:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
				return []byte("done " + run.Task().ID), nil
			}
			serve(t, coder.Agent, handler)
			waitState(t, sys, coder.ID(), commonpb.AgentState_RUNNABLE)

			res, err := submitNeedingWorktree(t, sc, coder.ID(), held, "true")
			require.NoError(t, err)
			assert.True(t, res.GetAccepted(), "a held task is accepted: it will run")
			assert.Equal(t, "waiting: agent "+coder.ID()+" is UNBOUND; a task that needs a worktree is dispatched once the agent is bound (§16.3)", res.GetReason())

			// A task that needs no worktree is not held, and runs while the other waits.
			res, err = submitNeedingWorktree(t, sc, coder.ID(), free, "false")
			require.NoError(t, err)
			require.True(t, res.GetAccepted(), res.GetReason())
			waitTask(t, sys, free, workflows.TaskCompleted)
			st, err := taskStatus(t, sys, held)
			require.NoError(t, err)
			assert.Equal(t, workflows.TaskWaiting, st.State, "still held after another task ran")
			assert.Contains(t, st.Reason, "is UNBOUND")
			assert.NotContains(t, log.get(), held, "a held task is not dispatched")

			_, err = coder.wt.Bind(ctx, "app", "home")
			require.NoError(t, err)
			waitTask(t, sys, held, workflows.TaskRunning)

			// Its activity entry carries the binding's repository, worktree and branch (§10),
			// found by the worktree filter; the scope named only the repository.
			poll := func(md ...string) []*schedulerpb.ActivityEntry {
				t.Helper()
				res, err := sc.PollActivityBuffer(metadata.AppendToOutgoingContext(ctx, md...), &schedulerpb.PollActivityBufferRequest{AgentId: coder.ID()})
				require.NoError(t, err)
				return res.GetEntries()
			}
			es := poll(wire.ActivityWorktreeKey, "home")
			require.Len(t, es, 1)
			assert.Equal(t, held, es[0].GetTaskId())
			assert.Equal(t, "app", es[0].GetRepoId())
			assert.Equal(t, "home", es[0].GetWorktreeId())
			assert.Equal(t, "sw4rm/home", es[0].GetBranch())
			close(release)
			done := waitTask(t, sys, held, workflows.TaskCompleted)
			hist := poll(wire.ActivityHistoryKey, "true", wire.ActivityTaskKey, held)
			require.Len(t, hist, 1)
			assert.Equal(t, []string{"app", "home", "sw4rm/home"}, []string{hist[0].GetRepoId(), hist[0].GetWorktreeId(), hist[0].GetBranch()})
			hist = poll(wire.ActivityHistoryKey, "true", wire.ActivityTaskKey, free)
			require.Len(t, hist, 1)
			assert.Equal(t, []string{"app", "", ""}, []string{hist[0].GetRepoId(), hist[0].GetWorktreeId(), hist[0].GetBranch()},
				"a task admitted while the agent was unbound keeps its scope's location")
			assert.Equal(t, "done "+held, done.Result)
			assert.Equal(t, []string{workflows.TaskAdmitting, workflows.TaskWaiting, workflows.TaskQueued, workflows.TaskScheduled,
				workflows.TaskRunning, workflows.TaskCompleted}, done.History)
			assert.Equal(t, []string{free, held}, log.get())
			recordHistory(t, sys.app.Temporal(), workflows.TaskWorkflowID(held), "task_held_for_worktree_"+kind)

			// BIND_FAILED holds it too, with the failure's reason.
			fixer := dialBinder(t, sys, "fixer")
			serve(t, fixer.Agent, handler)
			waitState(t, sys, fixer.ID(), commonpb.AgentState_RUNNABLE)
			_, err = fixer.wt.Bind(ctx, "missing", "w")
			var be *wtsdk.BindError
			require.ErrorAs(t, err, &be)
			fix := uniq(t, "fix")
			res, err = submitNeedingWorktree(t, sc, fixer.ID(), fix, "1")
			require.NoError(t, err)
			assert.True(t, res.GetAccepted())
			assert.True(t, strings.HasPrefix(res.GetReason(), "waiting: agent "+fixer.ID()+" is BIND_FAILED (worktree_not_found)"), res.GetReason())
			require.NoError(t, wtsdk.NewOperator(fixer.Conn()).Unbind(ctx, fixer.ID()))
			_, err = fixer.wt.Bind(ctx, "app", "fix")
			require.NoError(t, err)
			waitTask(t, sys, fix, workflows.TaskCompleted)
			assert.True(t, slices.Contains(log.get(), fix))

			// A marker that is neither true nor false is refused before anything starts.
			_, err = submitNeedingWorktree(t, sc, coder.ID(), uniq(t, "bad"), "maybe")
			assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), "validation_error: metadata sw4rm-needs-worktree")
		})
	}
}
