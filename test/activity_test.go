package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// pollActivity calls PollActivityBuffer as any gRPC client would, with the filter metadata
// kv, and returns the entries' task_ids and the response header.
func pollActivity(t *testing.T, sc schedulerpb.SchedulerServiceClient, agentID string, kv ...string) ([]string, metadata.MD) {
	t.Helper()
	var header metadata.MD
	ctx := metadata.AppendToOutgoingContext(context.Background(), kv...)
	resp, err := sc.PollActivityBuffer(ctx, &schedulerpb.PollActivityBufferRequest{AgentId: agentID}, grpc.Header(&header))
	require.NoError(t, err)
	var tasks []string
	for _, e := range resp.GetEntries() {
		tasks = append(tasks, e.GetTaskId())
	}
	return tasks, header
}

// TestActivityBufferReadsAndFullBuffer covers §10 and §10.1 over gRPC on both stores: a full
// activity buffer refuses the task's entry with activity_buffer_full, audited, but not the
// task, which runs (§10: the buffer MUST NOT block scheduling); PollActivityBuffer serves
// the filtered reads by repo, worktree and task and the short history through its documented
// metadata, and names a waiting task's waiting_on in its response header.
func TestActivityBufferReadsAndFullBuffer(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			a := dialAgent(t, sys, "worker")
			serve(t, a, func(_ context.Context, run *sdk.TaskRun) ([]byte, error) { return []byte("done " + run.Task().ID), nil })
			waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)
			sc := schedulerpb.NewSchedulerServiceClient(dialRaw(t, sys))

			// The agent's share of the buffer (100 active entries, §10.1) is taken.
			ab := sys.app.Store().ActivityBuffer()
			for i := range store.DefaultActivityMaxPerAgent {
				repo, wt := "shop", "wt-a"
				if i%2 == 1 {
					repo, wt = "docs", "wt-b"
				}
				_, err := ab.Put(ctx, store.ActivityEntry{AgentID: a.ID(), TaskID: fmt.Sprintf("held-%03d", i), RepoID: repo, WorktreeID: wt}, store.ActivityLimits{})
				require.NoError(t, err)
			}
			full := uniq(t, "full")
			res := submit(t, sc, a.ID(), full, 0, "repo:shop path:src/**")
			require.True(t, res.GetAccepted(), "a full activity buffer does not block scheduling (§10): %s", res.GetReason())
			assert.Contains(t, res.GetReason(), "activity_buffer_full")
			assert.Equal(t, "done "+full, waitTask(t, sys, full, workflows.TaskCompleted).Result, "the task ran")
			require.Eventually(t, func() bool {
				evs, err := sys.app.Store().Audit().List(ctx, store.AuditFilter{AgentID: a.ID(), TypePrefix: "activity.buffer_full"})
				return err == nil && len(evs) == 1
			}, 10*time.Second, 50*time.Millisecond, "the refused registration is audited (§10.1: never silent)")
			tasks, _ := pollActivity(t, sc, "", wire.ActivityTaskKey, full)
			assert.Empty(t, tasks, "the task had no entry")
			tasks, _ = pollActivity(t, sc, "", wire.ActivityTaskKey, full, wire.ActivityHistoryKey, "true")
			assert.Empty(t, tasks)

			// Filtered reads (§10: by agent, repo, worktree or task).
			tasks, _ = pollActivity(t, sc, a.ID(), wire.ActivityRepoKey, "docs")
			require.Len(t, tasks, 50)
			assert.Equal(t, "held-001", tasks[0])
			tasks, _ = pollActivity(t, sc, "", wire.ActivityWorktreeKey, "wt-a", wire.ActivityTaskKey, "held-004")
			assert.Equal(t, []string{"held-004"}, tasks)
			tasks, _ = pollActivity(t, sc, "", wire.ActivityWorktreeKey, "wt-b", wire.ActivityTaskKey, "held-004")
			assert.Empty(t, tasks)

			// waiting_on (004 §6) comes back in the response header.
			_, err := ab.SetWaitingOn(ctx, a.ID(), "held-002", "request-42")
			require.NoError(t, err)
			tasks, header := pollActivity(t, sc, a.ID(), wire.ActivityRepoKey, "shop")
			require.Len(t, tasks, 50)
			assert.Equal(t, []string{"held-002=request-42"}, header.Get(wire.ActivityWaitingOnHeader))

			// The short history (§10), with the same filters; a freed slot takes entries again.
			_, err = ab.Complete(ctx, a.ID(), "held-003", store.ActivityFailed)
			require.NoError(t, err)
			next := uniq(t, "next")
			res = submit(t, sc, a.ID(), next, 0, "repo:docs path:guide/**")
			require.True(t, res.GetAccepted())
			assert.Equal(t, "queued", res.GetReason(), "a slot was free: the entry was created")
			waitTask(t, sys, next, workflows.TaskCompleted)
			require.Eventually(t, func() bool {
				tasks, _ := pollActivity(t, sc, a.ID(), wire.ActivityHistoryKey, "true")
				return len(tasks) == 2
			}, 10*time.Second, 50*time.Millisecond)
			tasks, _ = pollActivity(t, sc, a.ID(), wire.ActivityHistoryKey, "true")
			assert.Equal(t, []string{next, "held-003"}, tasks, "most recently completed first")
			tasks, _ = pollActivity(t, sc, "", wire.ActivityHistoryKey, "true", wire.ActivityRepoKey, "docs")
			assert.Equal(t, []string{next, "held-003"}, tasks)
			tasks, _ = pollActivity(t, sc, "", wire.ActivityHistoryKey, "true", wire.ActivityTaskKey, next)
			assert.Equal(t, []string{next}, tasks)
		})
	}
}
