package test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestAgentLifecycleContinuesAsNew: with SW4RM_AGENT_HISTORY_LIMIT low, an agent's lifecycle
// on a real Temporal server continues as new once its history passes it, while the agent
// keeps taking tasks: every task submitted before and after completes, the agent stays
// RUNNABLE through the boundary, and the first run ends CONTINUED_AS_NEW. Its history is the
// one recorded for the replay test (agent_history_limit_<store>).
func TestAgentLifecycleContinuesAsNew(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			cfg := newConfig(t, kind)
			cfg.AgentHistoryLimit = 60
			sys := start(t, cfg)
			agent := dialAgent(t, sys, "history")
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan struct{})
			go func() {
				defer close(served)
				_ = agent.Serve(ctx, func(context.Context, *sdk.TaskRun) ([]byte, error) { return []byte("done"), nil }, nil)
			}()
			defer func() { cancel(); <-served }()
			waitState(t, sys, agent.ID(), commonpb.AgentState_RUNNABLE)

			tc := sys.app.Temporal()
			wfID := workflows.AgentWorkflowID(agent.ID())
			runOf := func() string {
				d, err := tc.DescribeWorkflowExecution(ctx, wfID, "")
				require.NoError(t, err)
				return d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
			}
			first := runOf()
			sc := schedulerpb.NewSchedulerServiceClient(agent.Conn())
			runTask := func(i int) {
				t.Helper()
				id := "history-" + uuid.NewString()[:8] + "-" + strconv.Itoa(i)
				res, err := sc.SubmitTask(ctx, &schedulerpb.SubmitTaskRequest{AgentId: agent.ID(), TaskId: id, Scope: "repo:history path:t" + strconv.Itoa(i) + "/**"})
				require.NoError(t, err)
				require.True(t, res.GetAccepted(), "%v", res)
				var st workflows.TaskStatus
				require.NoError(t, tc.GetWorkflow(ctx, workflows.TaskWorkflowID(id), "").Get(ctx, &st))
				require.Equal(t, workflows.TaskCompleted, st.State, "task %d", i)
			}
			i := 0
			for ; i < 40 && runOf() == first; i++ {
				runTask(i)
			}
			require.NotEqual(t, first, runOf(), "the lifecycle continued as new after %d tasks", i)
			t.Logf("continued as new after %d tasks", i)
			d, err := tc.DescribeWorkflowExecution(ctx, wfID, first)
			require.NoError(t, err)
			require.Equal(t, enums.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW, d.GetWorkflowExecutionInfo().GetStatus())
			require.LessOrEqual(t, d.GetWorkflowExecutionInfo().GetHistoryLength(), int64(cfg.AgentHistoryLimit)+40,
				"the run ended soon after passing the limit")

			// The next run took the agent's state and serves its tasks.
			waitState(t, sys, agent.ID(), commonpb.AgentState_RUNNABLE)
			for j := range 3 {
				runTask(i + j)
			}
			recordRunHistory(t, tc, wfID, first, "agent_history_limit_"+kind)
			waitCtx, stop := context.WithTimeout(ctx, 30*time.Second)
			defer stop()
			require.NoError(t, agent.Deregister(waitCtx, "test over"))
			require.NoError(t, tc.GetWorkflow(waitCtx, wfID, "").Get(waitCtx, nil))
		})
	}
}
