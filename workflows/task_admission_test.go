package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/taskadmission"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestQueuedTaskThatHeardNothingAsksItsAgent: a task SubmitTask admitted (FrontendAdmits)
// whose task-admitted signal never came asks its agent's lifecycle after FrontendAdmitWait;
// when the agent holds it, it is QUEUED without a second admission and follows its agent's
// events; when the agent does not, it admits and queues itself.
func TestQueuedTaskThatHeardNothingAsksItsAgent(t *testing.T) {
	for _, held := range []bool{true, false} {
		t.Run(map[bool]string{true: "held", false: "not held"}[held], func(t *testing.T) {
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestWorkflowEnvironment()
			var acts *activities.Activities
			var asked, admitted, enqueued int
			env.OnActivity(acts.TaskHeld, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.TaskHeldInput) (bool, error) {
				require.Equal(t, activities.TaskHeldInput{AgentWorkflowID: workflows.AgentWorkflowID("coder-1"), Query: workflows.AgentTasksQuery, TaskID: "t1"}, in)
				asked++
				return held, nil
			})
			env.OnActivity(acts.AdmitNewTask, mock.Anything, mock.Anything).Return(func(context.Context, activities.NewTaskAdmission) (activities.TaskAdmitted, error) {
				admitted++
				return activities.TaskAdmitted{Result: taskadmission.Result{Verdict: taskadmission.OK}, JobKey: "coder/key"}, nil
			})
			env.OnActivity(acts.SignalWorkflow, mock.Anything, mock.Anything).Return(func(context.Context, activities.SignalInput) error {
				enqueued++
				return nil
			})
			env.OnActivity(acts.FinishTask, mock.Anything, mock.Anything).Return(nil)
			env.RegisterDelayedCallback(func() {
				env.SignalWorkflow(workflows.TaskEventsSignal, workflows.TaskEvents{Events: []workflows.TaskEvent{
					{State: workflows.TaskScheduled, Seq: 1}, {State: workflows.TaskRunning, Seq: 2}, {State: workflows.TaskCompleted, Result: "done", Seq: 3}}})
			}, workflows.FrontendAdmitWait+time.Second)
			env.ExecuteWorkflow(workflows.TaskWorkflow, workflows.TaskInput{TaskID: "t1", AgentID: "coder-1", Scope: "resource:x",
				FrontendAdmits: true, Revision: workflows.TaskRevisionCurrent})
			require.True(t, env.IsWorkflowCompleted())
			require.NoError(t, env.GetWorkflowError())
			var st workflows.TaskStatus
			require.NoError(t, env.GetWorkflowResult(&st))
			require.Equal(t, []string{workflows.TaskAdmitting, workflows.TaskQueued, workflows.TaskScheduled, workflows.TaskRunning, workflows.TaskCompleted}, st.History)
			require.Equal(t, 1, asked, "the agent's lifecycle is asked once")
			if held {
				require.Zero(t, admitted, "a task its agent holds is not admitted again")
				require.Zero(t, enqueued)
			} else {
				require.Equal(t, 1, admitted, "a task its agent does not hold admits itself")
				require.Equal(t, 1, enqueued, "and queues itself")
			}
		})
	}
}
