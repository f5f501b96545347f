package workflows

import (
	"errors"
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
)

// A task or a tool call that did not succeed ends its workflow with an error, so the Temporal
// UI shows the run as Failed rather than a green Completed whose result says FAILED. The
// error is a non-retryable application error whose type names the protocol's code and whose
// details are the result the run completed with before (TaskStatus, ToolCallResult). Runs
// recorded before the change completed with that result: every reader takes both forms,
// through TaskOutcome and ToolOutcome.

// Change IDs of workflow.GetVersion for the failed ends: asked only when the run did not
// succeed, so a run that succeeds records no marker.
const (
	// versionTaskFailedError: a task FAILED or REJECTED fails its workflow.
	versionTaskFailedError = "task-failed-error"
	// versionToolFailedError: a tool call with an error code fails its workflow.
	versionToolFailedError = "tool-failed-error"
)

// TaskErrorType is the application error type a task workflow fails with: the task's error
// code in lower case (e.g. "no_route", "tool_timeout"), else "task_failed" or "task_rejected".
func TaskErrorType(st TaskStatus) string {
	if st.ErrorCode != commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
		return strings.ToLower(st.ErrorCode.String())
	}
	return "task_" + strings.ToLower(st.State)
}

// taskEnd is how a task workflow returns st: an error carrying st when the task FAILED or
// was REJECTED and the run is new enough (versionTaskFailedError), else st as the result.
func taskEnd(ctx workflow.Context, st TaskStatus) (TaskStatus, error) {
	if st.State != TaskFailed && st.State != TaskRejected {
		return st, nil
	}
	if workflow.GetVersion(ctx, versionTaskFailedError, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return st, nil
	}
	msg := "task " + st.TaskID + " " + st.State
	if st.Reason != "" {
		msg += ": " + st.Reason
	}
	return st, temporal.NewNonRetryableApplicationError(msg, TaskErrorType(st), nil, st)
}

// TaskOutcome is the TaskStatus of a finished task workflow from what its result's Get
// answered — the result itself (runs that completed with a FAILED or REJECTED task, and every
// successful run) or the error of a run that failed with the status as details. ok is false
// when err is another error: the run failed for some other reason, or could not be read.
func TaskOutcome(st TaskStatus, err error) (TaskStatus, bool) {
	return outcome(st, err, func(got TaskStatus) bool { return got.TaskID != "" && TaskTerminal(got.State) })
}

// toolEnd is how a tool call's workflow returns st: an error carrying st when the call ended
// with an error code and the run is new enough (versionToolFailedError), else st.
func toolEnd(ctx workflow.Context, st ToolStatus) (ToolCallResult, error) {
	if st.Code == "" {
		return st, nil
	}
	if workflow.GetVersion(ctx, versionToolFailedError, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return st, nil
	}
	msg := "tool call " + string(st.Code)
	if st.Message != "" {
		msg += ": " + st.Message
	}
	return st, temporal.NewNonRetryableApplicationError(msg, strings.ToLower(string(st.Code)), nil, st)
}

// ToolOutcome is the ToolCallResult of a finished tool call's workflow, from its result or
// from the error of a run that failed with the result as details (see TaskOutcome).
func ToolOutcome(res ToolCallResult, err error) (ToolCallResult, bool) {
	return outcome(res, err, func(got ToolCallResult) bool { return got.State == "done" && got.Code != "" })
}

// outcome is TaskOutcome and ToolOutcome: res when err is nil, else the details of err when
// it is an application error whose details decode to a result that ended (ended says so).
func outcome[T any](res T, err error, ended func(T) bool) (T, bool) {
	if err == nil {
		return res, true
	}
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || !ae.HasDetails() {
		return res, false
	}
	var got T
	if ae.Details(&got) != nil || !ended(got) {
		return res, false
	}
	return got, true
}
