package workflows_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/taskadmission"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// heldTaskHarness runs TaskWorkflow for a task that needs a worktree, with its activities
// mocked: binding answers AgentWorktreeOf for its n-th call, and each call's time is kept.
type heldTaskHarness struct {
	env *testsuite.TestWorkflowEnvironment
	t0  time.Time

	mu       sync.Mutex
	binding  func(call int) activities.AgentWorktree
	checks   []time.Time
	admitted []time.Time
	enqueued bool
	finished []activities.FinishTaskInput
}

func newHeldTaskHarness(t *testing.T, binding func(call int) activities.AgentWorktree) *heldTaskHarness {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	h := &heldTaskHarness{env: suite.NewTestWorkflowEnvironment(), t0: time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC), binding: binding}
	h.env.SetStartTime(h.t0)
	var acts *activities.Activities
	h.env.OnActivity(acts.AgentWorktreeOf, mock.Anything, mock.Anything).Return(func(context.Context, string) (activities.AgentWorktree, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.checks = append(h.checks, h.env.Now())
		return h.binding(len(h.checks)), nil
	})
	h.env.OnActivity(acts.AdmitNewTask, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.NewTaskAdmission) (activities.TaskAdmitted, error) {
		require.Empty(t, in.Input.JobKey, "the activity derives the job key")
		h.mu.Lock()
		defer h.mu.Unlock()
		h.admitted = append(h.admitted, h.env.Now())
		return activities.TaskAdmitted{Result: taskadmission.Result{Verdict: taskadmission.OK, Reason: "admitted"}, JobKey: "coder/key"}, nil
	})
	h.env.OnActivity(acts.FinishTask, mock.Anything, mock.Anything).Return(recorder(&h.mu, &h.finished))
	h.env.OnActivity(acts.SignalWorkflow, mock.Anything, mock.Anything).
		Return(func(_ context.Context, in activities.SignalInput) error {
			require.Equal(t, activities.SignalInput{WorkflowID: workflows.AgentWorkflowID("coder-1"), Signal: workflows.AgentTaskEnqueueSignal,
				Arg: in.Arg, MustExist: true}, in, "the admitted task queues itself at its agent, by the signal")
			h.mu.Lock()
			defer h.mu.Unlock()
			h.enqueued = true
			// The agent runs the task at once.
			h.env.RegisterDelayedCallback(func() {
				h.env.SignalWorkflow(workflows.TaskEventSignal, workflows.TaskEvent{State: workflows.TaskCompleted, Result: "done", Seq: 1})
			}, time.Millisecond)
			return nil
		})
	return h
}

func heldInput() workflows.TaskInput {
	return workflows.TaskInput{TaskID: "t1", AgentID: "coder-1", Scope: "repo:app path:src/**", NeedsWorktree: true, Revision: workflows.TaskRevisionCurrent}
}

// TestTaskNeedingWorktreeIsHeldUntilBound: a task that needs a worktree is WAITING, with a
// reason naming the agent's state, while the agent is UNBOUND and then BIND_FAILED; admission
// answers accepted with that reason; the binding is checked again after 2 s, 4 s, 8 s, …
// (capped at WorktreeRecheckMax); once the agent is bound the task is admitted, queued and
// runs.
func TestTaskNeedingWorktreeIsHeldUntilBound(t *testing.T) {
	h := newHeldTaskHarness(t, func(call int) activities.AgentWorktree {
		switch {
		case call <= 4:
			return activities.AgentWorktree{Registered: true, State: "UNBOUND"}
		case call <= 7:
			return activities.AgentWorktree{Registered: true, State: "BIND_FAILED", RepoID: "app", Reason: "worktree_locked"}
		}
		return activities.AgentWorktree{Registered: true, State: "BOUND_HOME", RepoID: "app", WorktreeID: "home", Branch: "sw4rm/home"}
	})
	var answer workflows.TaskAdmission
	var during []workflows.TaskStatus
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(workflows.TaskAdmissionUpdate, "", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { t.Errorf("admission update rejected: %v", err) },
			OnAccept: func() {},
			OnComplete: func(v any, err error) {
				require.NoError(t, err)
				answer = v.(workflows.TaskAdmission)
			},
		})
	}, time.Millisecond)
	for _, at := range []time.Duration{time.Second, 40 * time.Second} {
		h.env.RegisterDelayedCallback(func() {
			v, err := h.env.QueryWorkflow(workflows.TaskStatusQuery)
			require.NoError(t, err)
			var st workflows.TaskStatus
			require.NoError(t, v.Get(&st))
			during = append(during, st)
		}, at)
	}
	h.env.ExecuteWorkflow(workflows.TaskWorkflow, heldInput())
	require.True(t, h.env.IsWorkflowCompleted())
	require.NoError(t, h.env.GetWorkflowError())
	var st workflows.TaskStatus
	require.NoError(t, h.env.GetWorkflowResult(&st))

	assert.True(t, answer.Accepted, "a held task is accepted: it will run")
	assert.Equal(t, workflows.TaskWaiting, answer.State)
	assert.Equal(t, "waiting: agent coder-1 is UNBOUND; a task that needs a worktree is dispatched once the agent is bound (§16.3)", answer.Reason)
	require.Len(t, during, 2)
	assert.Equal(t, workflows.TaskWaiting, during[0].State)
	assert.Contains(t, during[0].Reason, "is UNBOUND")
	assert.Equal(t, workflows.TaskWaiting, during[1].State)
	assert.Contains(t, during[1].Reason, "is BIND_FAILED (worktree_locked)")

	// Offsets from the first check, rounded to the second: the test environment may fire the
	// update's 1 ms callback before or after the first local activity, depending on how fast
	// the machine is, so the later checks can sit 1 ms off the whole seconds.
	var offsets []time.Duration
	for _, c := range h.checks {
		offsets = append(offsets, c.Sub(h.checks[0]).Round(time.Second))
	}
	require.Less(t, h.checks[0].Sub(h.t0), time.Second, "the binding is checked at once")
	assert.Equal(t, []time.Duration{0, 2 * time.Second, 6 * time.Second, 14 * time.Second, 30 * time.Second, 60 * time.Second,
		90 * time.Second, 120 * time.Second}, offsets, "checked again after 2, 4, 8, 16, then every 30 s")
	require.Len(t, h.admitted, 1, "admitted once, after the binding")
	assert.Equal(t, 120*time.Second, h.admitted[0].Sub(h.checks[0]).Round(time.Second))
	assert.True(t, h.enqueued)
	assert.Equal(t, workflows.TaskCompleted, st.State)
	assert.Equal(t, []string{workflows.TaskAdmitting, workflows.TaskWaiting, workflows.TaskWaiting, workflows.TaskQueued, workflows.TaskCompleted}, st.History,
		"WAITING once per reason")
}

// TestTaskNotNeedingWorktreeIsNotHeld: without NeedsWorktree the binding is never read.
func TestTaskNotNeedingWorktreeIsNotHeld(t *testing.T) {
	h := newHeldTaskHarness(t, func(int) activities.AgentWorktree {
		return activities.AgentWorktree{Registered: true, State: "UNBOUND"}
	})
	in := heldInput()
	in.NeedsWorktree = false
	h.env.ExecuteWorkflow(workflows.TaskWorkflow, in)
	require.NoError(t, h.env.GetWorkflowError())
	var st workflows.TaskStatus
	require.NoError(t, h.env.GetWorkflowResult(&st))
	assert.Equal(t, workflows.TaskCompleted, st.State)
	assert.Empty(t, h.checks)
}

// TestTaskHeldForWorktreeEndsWhenAgentDeregisters: a held task whose agent deregisters is
// rejected with no_route, never admitted.
func TestTaskHeldForWorktreeEndsWhenAgentDeregisters(t *testing.T) {
	h := newHeldTaskHarness(t, func(call int) activities.AgentWorktree {
		return activities.AgentWorktree{Registered: call < 3, State: "UNBOUND"}
	})
	h.env.ExecuteWorkflow(workflows.TaskWorkflow, heldInput())
	// A rejected task fails its run, with its status as the error's details.
	err := h.env.GetWorkflowError()
	var ae *temporal.ApplicationError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "no_route", ae.Type())
	st, ok := workflows.TaskOutcome(workflows.TaskStatus{}, err)
	require.True(t, ok, err)
	assert.Equal(t, workflows.TaskRejected, st.State)
	assert.Equal(t, commonpb.ErrorCode_NO_ROUTE, st.ErrorCode)
	assert.True(t, strings.HasPrefix(st.Reason, "no_route: "), st.Reason)
	assert.Empty(t, h.admitted)
	assert.False(t, h.enqueued)
}

// TestTaskRejectedCompletesInRecordedRuns: a run recorded before a REJECTED task failed its
// workflow (GetVersion answers the default) completes with the REJECTED status, as it did.
func TestTaskRejectedCompletesInRecordedRuns(t *testing.T) {
	h := newHeldTaskHarness(t, func(call int) activities.AgentWorktree {
		return activities.AgentWorktree{Registered: call < 3, State: "UNBOUND"}
	})
	h.env.OnGetVersion("task-failed-error", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	h.env.ExecuteWorkflow(workflows.TaskWorkflow, heldInput())
	require.NoError(t, h.env.GetWorkflowError())
	var st workflows.TaskStatus
	require.NoError(t, h.env.GetWorkflowResult(&st))
	assert.Equal(t, workflows.TaskRejected, st.State)
	got, ok := workflows.TaskOutcome(st, nil)
	assert.True(t, ok)
	assert.Equal(t, st, got)
}
