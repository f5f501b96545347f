package frontend

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/common/v1"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/mocks"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestClosedAdmission: when the task-admission update fails because the task workflow closed
// (it rejected the task on its own), SubmitTask answers with the task's result — a refusal,
// not Unavailable, whether the run completed with it (runs before the task-failed-error
// change) or failed with it; a task that is still running leaves the update's failure, as Unavailable.
func TestClosedAdmission(t *testing.T) {
	const wid = "task/t1"
	aborted := errors.New("workflow update was aborted by closing workflow")
	describe := func(st enums.WorkflowExecutionStatus) *workflowservice.DescribeWorkflowExecutionResponse {
		return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflow.WorkflowExecutionInfo{
			Execution: &common.WorkflowExecution{WorkflowId: wid, RunId: "run1"}, Status: st}}
	}

	tc := &mocks.Client{}
	run := &mocks.WorkflowRun{}
	tc.On("DescribeWorkflowExecution", mock.Anything, wid, "").Return(describe(enums.WORKFLOW_EXECUTION_STATUS_COMPLETED), nil).Once()
	tc.On("GetWorkflow", mock.Anything, wid, "run1").Return(run).Once()
	run.On("Get", mock.Anything, mock.Anything).Run(func(args mock.Arguments) {
		*args.Get(1).(*workflows.TaskStatus) = workflows.TaskStatus{State: workflows.TaskRejected, Reason: `no_route: agent "a" is not registered`}
	}).Return(nil).Once()
	adm, err := closedAdmission(t.Context(), tc, wid, aborted)
	require.NoError(t, err)
	require.Equal(t, workflows.TaskAdmission{Accepted: false, State: workflows.TaskRejected, Reason: `no_route: agent "a" is not registered`}, adm)

	// A task workflow of this code fails with the rejection as its error's details.
	rejected := workflows.TaskStatus{TaskID: "t1", State: workflows.TaskRejected, Reason: `no_route: agent "a" is not registered`}
	tc.On("DescribeWorkflowExecution", mock.Anything, wid, "").Return(describe(enums.WORKFLOW_EXECUTION_STATUS_FAILED), nil).Once()
	tc.On("GetWorkflow", mock.Anything, wid, "run1").Return(run).Once()
	run.On("Get", mock.Anything, mock.Anything).Return(temporal.NewNonRetryableApplicationError("task t1 REJECTED", "no_route", nil, rejected)).Once()
	adm, err = closedAdmission(t.Context(), tc, wid, aborted)
	require.NoError(t, err)
	require.Equal(t, workflows.TaskAdmission{Accepted: false, State: workflows.TaskRejected, Reason: rejected.Reason}, adm)

	tc.On("DescribeWorkflowExecution", mock.Anything, wid, "").Return(describe(enums.WORKFLOW_EXECUTION_STATUS_RUNNING), nil).Once()
	_, err = closedAdmission(context.Background(), tc, wid, aborted)
	require.Equal(t, codes.Unavailable, toStatus(context.Background(), err).Code(), "%v", err)
	require.ErrorContains(t, err, aborted.Error())
	tc.AssertExpectations(t)
	run.AssertExpectations(t)
}

// TestNeedsWorktreeOf: the sw4rm-needs-worktree marker is true or false (or 1, 0, in any
// case); absent is false; anything else, or the key twice, is validation_error.
func TestNeedsWorktreeOf(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   bool
		bad    bool
	}{
		{values: nil, want: false},
		{values: []string{"true"}, want: true},
		{values: []string{"TRUE"}, want: true},
		{values: []string{"1"}, want: true},
		{values: []string{"false"}, want: false},
		{values: []string{"0"}, want: false},
		{values: []string{"yes"}, bad: true},
		{values: []string{""}, bad: true},
		{values: []string{"true", "true"}, bad: true},
	} {
		md := metadata.MD{}
		for _, v := range tc.values {
			md.Append(wire.NeedsWorktreeKey, v)
		}
		got, err := needsWorktreeOf(metadata.NewIncomingContext(context.Background(), md))
		if tc.bad {
			require.Equal(t, codes.InvalidArgument, toStatus(context.Background(), err).Code(), "%v", tc.values)
			require.Contains(t, toStatus(context.Background(), err).Message(), "validation_error: metadata "+wire.NeedsWorktreeKey)
			continue
		}
		require.NoError(t, err, "%v", tc.values)
		require.Equal(t, tc.want, got, "%v", tc.values)
	}
}

// TestEnqueueSendsTheSignal: SubmitTask queues a task by AgentTaskEnqueueSignal alone — never
// by the update, whose retried workflow task could dispatch another task under a RUN's
// message_id — and the signal's failure is enqueue's answer.
func TestEnqueueSendsTheSignal(t *testing.T) {
	in := workflows.TaskInput{TaskID: "t1", AgentID: "a", Priority: 3}
	wid, q := workflows.AgentWorkflowID("a"), workflows.QueuedTaskOf(in)
	for _, signalErr := range []error{nil, errors.New("workflow not found")} {
		c := &mocks.Client{}
		c.On("SignalWorkflow", mock.Anything, wid, "", workflows.AgentTaskEnqueueSignal, q).Return(signalErr).Once()
		sc := &schedulerService{s: &Server{temporal: c, log: slog.New(slog.DiscardHandler)}}
		err := sc.enqueue(t.Context(), in)
		if signalErr != nil {
			require.ErrorIs(t, err, signalErr)
		} else {
			require.NoError(t, err)
		}
		c.AssertExpectations(t)
		c.AssertNotCalled(t, "UpdateWorkflow", mock.Anything, mock.Anything)
	}
}
