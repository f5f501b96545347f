package frontend

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/mocks"
	"go.temporal.io/sdk/temporal"
)

// The errors below are the ones Temporal's server (1.29) answers, built as the client hands
// them over: typed, and — from the frontend's helpers — wrapped.

// closingErr is the server's refusal of an update while the run completes (its
// consts.ErrWorkflowClosing).
var closingErr = &serviceerror.ResourceExhausted{
	Cause:   enumspb.RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW,
	Scope:   enumspb.RESOURCE_EXHAUSTED_SCOPE_NAMESPACE,
	Message: "workflow operation can not be applied because workflow is closing",
}

func TestClassifyAlreadyStarted(t *testing.T) {
	err := serviceerror.NewWorkflowExecutionAlreadyStarted("workflow execution already started", "req", "run1")
	assert.Equal(t, temporalAlreadyStarted, classify(err))
	assert.Equal(t, temporalAlreadyStarted, classify(fmt.Errorf("start: %w", err)))
}

func TestClassifyClosing(t *testing.T) {
	assert.Equal(t, temporalClosing, classify(closingErr))
	assert.Equal(t, temporalClosing, classify(fmt.Errorf("update: %w", closingErr)))
	// Other pressure on the namespace is no closing run.
	assert.Equal(t, temporalOther, classify(&serviceerror.ResourceExhausted{Cause: enumspb.RESOURCE_EXHAUSTED_CAUSE_RPS_LIMIT, Message: "rps"}))
}

func TestClassifyNotFound(t *testing.T) {
	for _, msg := range []string{
		"workflow not found for ID: negotiation/n1",       // never started
		"workflow execution already completed",            // consts.ErrWorkflowCompleted
		"workflow update was aborted by closing workflow", // update.AbortedByWorkflowClosingErr
	} {
		assert.Equal(t, temporalNotFound, classify(serviceerror.NewNotFound(msg)), msg)
	}
	// Text alone is no signal.
	assert.Equal(t, temporalOther, classify(errors.New("workflow execution already completed")))
	assert.Equal(t, temporalOther, classify(errors.New("workflow update was aborted by closing workflow")))
}

func TestClassifyRefused(t *testing.T) {
	err := fmt.Errorf("update: %w", temporal.NewApplicationError("not your turn", "NegotiationValidation"))
	assert.Equal(t, temporalRefused, classify(err))
	if app := refusalOf(err); assert.NotNil(t, app) {
		assert.Equal(t, "NegotiationValidation", app.Type())
		assert.Equal(t, "not your turn", app.Message())
	}
	assert.Nil(t, refusalOf(closingErr))
}

func TestClassifyOther(t *testing.T) {
	assert.Equal(t, temporalOther, classify(nil))
	assert.Equal(t, temporalOther, classify(serviceerror.NewUnavailable("connection refused")))
	assert.Equal(t, temporalOther, classify(context.DeadlineExceeded))
}

// TestSettle: a NotFound is split by what Temporal knows of the workflow — none (not-found), a
// closed run (closed), a run still open (closing: the update was aborted as it closed).
func TestSettle(t *testing.T) {
	const wid = "negotiation/n1"
	describe := func(st enumspb.WorkflowExecutionStatus) *workflowservice.DescribeWorkflowExecutionResponse {
		return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Status: st}}
	}
	nf := serviceerror.NewNotFound("workflow execution already completed")
	for _, tc := range []struct {
		desc *workflowservice.DescribeWorkflowExecutionResponse
		err  error
		want temporalClass
	}{
		{nil, serviceerror.NewNotFound("workflow not found"), temporalNotFound},
		{describe(enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED), nil, temporalClosed},
		{describe(enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED), nil, temporalClosed},
		{describe(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING), nil, temporalClosing},
	} {
		tc2 := &mocks.Client{}
		tc2.On("DescribeWorkflowExecution", mock.Anything, wid, "").Return(tc.desc, tc.err).Once()
		s := &Server{temporal: tc2}
		assert.Equal(t, tc.want, s.settle(context.Background(), wid, nf), "%v", tc.want)
		tc2.AssertExpectations(t)
	}
	// Anything but a NotFound is classified without asking.
	s := &Server{temporal: &mocks.Client{}}
	assert.Equal(t, temporalClosing, s.settle(context.Background(), wid, closingErr))
	assert.Equal(t, temporalRefused, s.settle(context.Background(), wid, temporal.NewApplicationError("no", "x")))
}
