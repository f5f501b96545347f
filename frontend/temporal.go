package frontend

import (
	"context"
	"errors"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/status"
)

// The frontend's one way of talking to Temporal: start, update and query a workflow, and
// classify what went wrong by the error's type — never by its text, which the server may
// reword in any release. Handlers turn a class into their own answer (a refusal, a
// not-found, a retry), and what is left, Temporal being unreachable, into
// temporalUnavailable for the error table.

// temporalClass is what a failed Temporal call says happened.
type temporalClass int

const (
	// temporalOther is any other failure: Temporal unreachable, a timeout, a bug.
	temporalOther temporalClass = iota
	// temporalAlreadyStarted: a start found the workflow id in use.
	temporalAlreadyStarted
	// temporalClosing: the run is completing and admits no more updates; a moment later the
	// call finds the run closed (or, for a start-or-update, the next run).
	temporalClosing
	// temporalClosed: the workflow exists but its run has closed.
	temporalClosed
	// temporalNotFound: there is no such workflow, or — before settle has asked — no
	// running one.
	temporalNotFound
	// temporalRefused: the workflow's update validator or handler refused the call; refusalOf
	// says with which type.
	temporalRefused
)

// String names the class, for logs and tests.
func (c temporalClass) String() string {
	switch c {
	case temporalAlreadyStarted:
		return "already-started"
	case temporalClosing:
		return "closing"
	case temporalClosed:
		return "closed"
	case temporalNotFound:
		return "not-found"
	case temporalRefused:
		return "refused"
	}
	return "other"
}

// classify sorts a Temporal error by its type. The server answers an update to a run that
// is completing with ResourceExhausted cause BUSY_WORKFLOW ("workflow is closing"); an
// update to a closed run, one aborted because its run closed, and one to a workflow that
// never existed all come back as NotFound, which settle tells apart.
func classify(err error) temporalClass {
	var (
		app     *temporal.ApplicationError
		started *serviceerror.WorkflowExecutionAlreadyStarted
		nf      *serviceerror.NotFound
		busy    *serviceerror.ResourceExhausted
	)
	switch {
	case err == nil:
		return temporalOther
	case errors.As(err, &app):
		return temporalRefused
	case errors.As(err, &started):
		return temporalAlreadyStarted
	case errors.As(err, &busy) && busy.Cause == enumspb.RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW:
		return temporalClosing
	case errors.As(err, &nf):
		return temporalNotFound
	}
	return temporalOther
}

// refusalOf is the refusal an update met: its type (one of the workflows package's error
// types) and message; nil when err is no refusal.
func refusalOf(err error) *temporal.ApplicationError {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app
	}
	return nil
}

// settle classifies err from a call to workflow wid, and splits a NotFound by asking
// Temporal about wid: no workflow is temporalNotFound, a closed run temporalClosed, a run
// still open temporalClosing (the update was aborted as the run closed).
func (s *Server) settle(ctx context.Context, wid string, err error) temporalClass {
	c := classify(err)
	if c != temporalNotFound {
		return c
	}
	desc, derr := s.temporal.DescribeWorkflowExecution(ctx, wid, "")
	if derr != nil || desc.GetWorkflowExecutionInfo() == nil {
		return temporalNotFound
	}
	if desc.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return temporalClosing
	}
	return temporalClosed
}

// start starts a workflow; an id in use is temporalAlreadyStarted.
func start(ctx context.Context, tc client.Client, opts client.StartWorkflowOptions, workflow any, arg any) error {
	_, err := tc.ExecuteWorkflow(ctx, opts, workflow, arg)
	return err
}

// none is the result of an update whose answer the caller does not read.
type none struct{}

// update sends an update and waits for it to complete, answering its result. When the call
// fails because ctx ended, the error is ctx's, so that the caller sees why.
func update[R any](ctx context.Context, tc client.Client, opts client.UpdateWorkflowOptions) (R, error) {
	var out R
	opts.WaitForStage = client.WorkflowUpdateStageCompleted
	h, err := tc.UpdateWorkflow(ctx, opts)
	if err == nil {
		if _, skip := any(out).(none); skip {
			err = h.Get(ctx, nil)
		} else {
			err = h.Get(ctx, &out)
		}
	}
	return out, ctxFirst(ctx, err)
}

// updateWithStart starts the workflow unless it runs, then sends it the update and waits for
// the update's result.
func updateWithStart[R any](ctx context.Context, tc client.Client, start client.StartWorkflowOptions, workflow, arg any,
	opts client.UpdateWorkflowOptions,
) (R, error) {
	var out R
	opts.WaitForStage = client.WorkflowUpdateStageCompleted
	op := tc.NewWithStartWorkflowOperation(start, workflow, arg)
	h, err := tc.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{StartWorkflowOperation: op, UpdateOptions: opts})
	if err == nil {
		err = h.Get(ctx, &out)
	}
	return out, ctxFirst(ctx, err)
}

// query asks a workflow's latest run, open or closed, a query; an answer that does not
// decode is internal_error.
func query[R any](ctx context.Context, tc client.Client, wid, name string) (R, error) {
	var out R
	v, err := tc.QueryWorkflow(ctx, wid, "", name)
	if err != nil {
		return out, err
	}
	if err := v.Get(&out); err != nil {
		return out, internalf("decode the %s query of %s: %v", name, wid, err)
	}
	return out, nil
}

// queryOpen asks a workflow's running run a query; open is false when the latest run has
// closed, which is not replayed to answer.
func queryOpen[R any](ctx context.Context, tc client.Client, wid, name string) (out R, open bool, err error) {
	resp, err := tc.QueryWorkflowWithOptions(ctx, &client.QueryWorkflowWithOptionsRequest{
		WorkflowID: wid, QueryType: name, QueryRejectCondition: enumspb.QUERY_REJECT_CONDITION_NOT_OPEN,
	})
	if err != nil {
		return out, false, err
	}
	if resp.QueryRejected != nil || resp.QueryResult == nil {
		return out, false, nil
	}
	if err := resp.QueryResult.Get(&out); err != nil {
		return out, true, internalf("decode the %s query of %s: %v", name, wid, err)
	}
	return out, true, nil
}

// ctxFirst replaces err by ctx's own error once ctx has ended: a call cut short answers
// Canceled or DeadlineExceeded, not whatever Temporal said as the connection went.
func ctxFirst(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return err
}

// sleepCtx waits d, or less when ctx ends first; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
