package test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestSubmitTaskRefusals covers SubmitTask's refusals on both stores (docs/scheduler.md):
// a task for an agent that is not registered is answered accepted=false with no_route — not
// Unavailable — and, since nothing was started, a retry of the same task_id gets the same
// answer rather than duplicate_detected, and is accepted once the agent has registered. A
// task for an agent that is shutting down, refused by the task workflow itself, is answered
// accepted=false with agent_shutdown.
func TestSubmitTaskRefusals(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			sc := schedulerpb.NewSchedulerServiceClient(dialRaw(t, sys))
			late, task := uniq(t, "late"), uniq(t, "task")
			req := func(agentID, taskID string) *schedulerpb.SubmitTaskRequest {
				return &schedulerpb.SubmitTaskRequest{AgentId: agentID, TaskId: taskID, Scope: "resource:" + taskID,
					Params: []byte(`{"task":"` + taskID + `"}`), ContentType: "application/json"}
			}

			for attempt := 1; attempt <= 2; attempt++ {
				res, err := sc.SubmitTask(ctx, req(late, task))
				require.NoError(t, err, "attempt %d: a refusal, not a failure of the server", attempt)
				assert.False(t, res.GetAccepted(), "attempt %d", attempt)
				assert.Regexp(t, `^no_route: agent "`+late+`" is not registered`, res.GetReason(), "attempt %d", attempt)
			}

			// Nothing was started: the agent registers and the same task_id is taken.
			a, err := sdk.Dial(sys.app.GRPCAddr(), late)
			require.NoError(t, err)
			t.Cleanup(func() { _ = a.Close() })
			require.NoError(t, a.Register(ctx, &registrypb.AgentDescriptor{Name: "late", Description: "registers after its first task",
				CommunicationClass: commonpb.CommunicationClass_STANDARD}))
			require.NoError(t, a.Heartbeat(ctx, commonpb.AgentState_RUNNABLE, nil))
			waitState(t, sys, late, commonpb.AgentState_RUNNABLE)
			res, err := sc.SubmitTask(ctx, req(late, task))
			require.NoError(t, err)
			assert.True(t, res.GetAccepted(), res.GetReason())

			// An agent shutting down accepts no tasks (§8.1): the task workflow refuses it.
			_, err = sc.ShutdownAgent(ctx, &schedulerpb.ShutdownAgentRequest{AgentId: late, GracePeriod: durationpb.New(time.Minute)})
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				rec, err := sys.app.Store().Registry().GetAgent(ctx, late)
				return err == nil && rec.State == commonpb.AgentState_SHUTTING_DOWN
			}, 10*time.Second, 20*time.Millisecond)
			refused := uniq(t, "refused")
			res, err = sc.SubmitTask(ctx, req(late, refused))
			require.NoError(t, err, "a refusal, not a failure of the server")
			assert.False(t, res.GetAccepted())
			assert.Regexp(t, `^agent_shutdown: `, res.GetReason())
			st := waitTask(t, sys, refused, workflows.TaskRejected)
			assert.Equal(t, commonpb.ErrorCode_AGENT_SHUTDOWN, st.ErrorCode)
			require.NoError(t, a.Deregister(ctx, "test over"))
		})
	}
}
