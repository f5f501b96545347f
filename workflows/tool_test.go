package workflows_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enums "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
	"github.com/sw4rm/sw4rm-temporal/tools"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// scriptedExecutor runs a tool by a function the test gives, counting attempts.
type scriptedExecutor struct {
	attempts atomic.Int64
	run      func(ctx context.Context, attempt int64, emit tools.Emit) (tools.Result, error)
}

func (s *scriptedExecutor) Call(ctx context.Context, _ tools.Request, emit tools.Emit) (tools.Result, error) {
	return s.run(ctx, s.attempts.Add(1), emit)
}

// toolHarness runs ToolCall with the real activities over a memory store.
type toolHarness struct {
	env  *testsuite.TestWorkflowEnvironment
	st   *memory.Store
	exec *scriptedExecutor
	in   workflows.ToolCallInput
}

func newToolHarness(t *testing.T, idempotent bool, policy tool.Policy, run func(ctx context.Context, attempt int64, emit tools.Emit) (tools.Result, error)) *toolHarness {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	h := &toolHarness{env: suite.NewTestWorkflowEnvironment(), st: memory.New(), exec: &scriptedExecutor{run: run}}
	h.env.RegisterActivity(&activities.Activities{Store: h.st})
	h.env.RegisterActivity(&activities.ToolRunner{ProviderID: "p", Executor: h.exec, Store: h.st})
	if policy.Timeout == 0 {
		policy.Timeout = time.Minute
	}
	if !idempotent {
		policy.MaxRetries = 0
	}
	h.in = workflows.ToolCallInput{Caller: "agent:a", TaskQueue: "q",
		Request: tools.Request{CallID: "c1", ProviderID: "p", ToolName: "t", Args: []byte(`{}`), Policy: policy}}
	_, _, err := h.st.ToolCalls().CreateCall(context.Background(), store.ToolCallRecord{CallID: "c1", Caller: "agent:a"})
	require.NoError(t, err)
	return h
}

func (h *toolHarness) result(t *testing.T) workflows.ToolCallResult {
	t.Helper()
	require.True(t, h.env.IsWorkflowCompleted())
	return toolResult(t, h.env)
}

// toolResult is a finished call's result: a call that ended with an error code fails its
// workflow with the result as the error's details, one that succeeded completes with it.
func toolResult(t *testing.T, env *testsuite.TestWorkflowEnvironment) workflows.ToolCallResult {
	t.Helper()
	var res workflows.ToolCallResult
	err := env.GetWorkflowError()
	if err == nil {
		require.NoError(t, env.GetWorkflowResult(&res))
	}
	res, ok := workflows.ToolOutcome(res, err)
	require.True(t, ok, "the run failed otherwise: %v", err)
	assert.Equal(t, res.Code != "", err != nil, "a call fails its workflow exactly when it has an error code: %v", err)
	return res
}

func (h *toolHarness) frames(t *testing.T) []store.ToolFrameRecord {
	t.Helper()
	fs, err := h.st.ToolCalls().Frames(context.Background(), "c1", 0, 0)
	require.NoError(t, err)
	return fs
}

func summary(t *testing.T, f store.ToolFrameRecord) tool.Summary {
	t.Helper()
	var s tool.Summary
	require.NoError(t, json.Unmarshal(f.Summary, &s))
	return s
}

// TestToolCallStoresFramesAndResult: frames are stored as the tool emits them and its result
// becomes the final frame, with an ok summary counting them.
func TestToolCallStoresFramesAndResult(t *testing.T) {
	h := newToolHarness(t, true, tool.Policy{}, func(ctx context.Context, _ int64, emit tools.Emit) (tools.Result, error) {
		for range 2 {
			if err := emit(ctx, "text/plain", []byte("x")); err != nil {
				return tools.Result{}, err
			}
		}
		return tools.Result{ContentType: "application/json", Data: []byte(`{"ok":true}`)}, nil
	})
	h.env.ExecuteWorkflow(workflows.ToolCall, h.in)
	res := h.result(t)
	assert.Empty(t, res.Code)
	assert.Equal(t, uint64(3), res.FinalFrame)
	fs := h.frames(t)
	require.Len(t, fs, 3)
	assert.Equal(t, `{"ok":true}`, string(fs[2].Data))
	s := summary(t, fs[2])
	assert.Equal(t, "ok", s.Status)
	assert.Equal(t, uint64(2), s.Frames)
}

// TestToolCallNonIdempotentRunsOnce: a non-idempotent tool whose attempt fails transiently is
// not tried again (§18.3): one attempt, and the error ends the call.
func TestToolCallNonIdempotentRunsOnce(t *testing.T) {
	h := newToolHarness(t, false, tool.Policy{MaxRetries: 3}, func(context.Context, int64, tools.Emit) (tools.Result, error) {
		return tools.Result{}, tool.Errorf(tool.CodeInternal, "the provider hiccuped")
	})
	h.env.ExecuteWorkflow(workflows.ToolCall, h.in)
	res := h.result(t)
	assert.Equal(t, tool.CodeInternal, res.Code)
	assert.Equal(t, int64(1), h.exec.attempts.Load())
	fs := h.frames(t)
	require.Len(t, fs, 1)
	assert.Equal(t, "INTERNAL_ERROR", summary(t, fs[0]).ErrorCode)
}

// TestToolCallFailedCompletesInRecordedRuns: a run recorded before a call with an error
// code failed its workflow (GetVersion answers the default) completes with its result, and
// ToolOutcome reads it; a new run fails with the code as the error's type.
func TestToolCallFailedCompletesInRecordedRuns(t *testing.T) {
	fail := func(context.Context, int64, tools.Emit) (tools.Result, error) {
		return tools.Result{}, tool.Errorf(tool.CodeInternal, "the provider hiccuped")
	}
	h := newToolHarness(t, false, tool.Policy{}, fail)
	h.env.OnGetVersion("tool-failed-error", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	h.env.ExecuteWorkflow(workflows.ToolCall, h.in)
	require.NoError(t, h.env.GetWorkflowError())
	var res workflows.ToolCallResult
	require.NoError(t, h.env.GetWorkflowResult(&res))
	got, ok := workflows.ToolOutcome(res, nil)
	require.True(t, ok)
	assert.Equal(t, tool.CodeInternal, got.Code)

	h = newToolHarness(t, false, tool.Policy{}, fail)
	h.env.ExecuteWorkflow(workflows.ToolCall, h.in)
	var ae *temporal.ApplicationError
	require.ErrorAs(t, h.env.GetWorkflowError(), &ae)
	assert.Equal(t, "internal_error", ae.Type())
	assert.True(t, ae.NonRetryable())
}

// TestToolCallIdempotentRetries: an idempotent tool with retries is tried again after a
// transient failure and completes; a final failure (TOOL_FAILED) is never retried.
func TestToolCallIdempotentRetries(t *testing.T) {
	h := newToolHarness(t, true, tool.Policy{MaxRetries: 2, Backoff: tool.BackoffFixed}, func(_ context.Context, attempt int64, _ tools.Emit) (tools.Result, error) {
		if attempt == 1 {
			return tools.Result{}, tool.Errorf(tool.CodeToolTimeout, "slow")
		}
		return tools.Result{ContentType: "application/json", Data: []byte(`{}`)}, nil
	})
	h.env.ExecuteWorkflow(workflows.ToolCall, h.in)
	res := h.result(t)
	assert.Empty(t, res.Code)
	assert.Equal(t, int64(2), h.exec.attempts.Load())
	assert.Equal(t, 2, summary(t, h.frames(t)[0]).Attempt)

	h = newToolHarness(t, true, tool.Policy{MaxRetries: 2}, func(context.Context, int64, tools.Emit) (tools.Result, error) {
		return tools.Result{}, tool.Errorf(tool.CodeToolFailed, "exit 1")
	})
	h.env.ExecuteWorkflow(workflows.ToolCall, h.in)
	assert.Equal(t, tool.CodeToolFailed, h.result(t).Code)
	assert.Equal(t, int64(1), h.exec.attempts.Load(), "a final code is not retried")
}

// TestToolCallLostWorkerIsInterrupted: an attempt whose worker stopped heartbeating ends a
// non-idempotent call INTERRUPTED rather than running it again (§18.3).
func TestToolCallLostWorkerIsInterrupted(t *testing.T) {
	h := newToolHarness(t, false, tool.Policy{}, nil)
	var runner *activities.ToolRunner
	var calls atomic.Int64
	h.env.OnActivity(runner.RunTool, mock.Anything, mock.Anything).Return(func(context.Context, activities.RunToolInput) (activities.RunToolResult, error) {
		calls.Add(1)
		return activities.RunToolResult{}, temporal.NewTimeoutError(enums.TIMEOUT_TYPE_HEARTBEAT, nil)
	})
	h.env.ExecuteWorkflow(workflows.ToolCall, h.in)
	res := h.result(t)
	assert.Equal(t, tool.CodeInterrupted, res.Code)
	assert.Contains(t, res.Message, "not run again")
	assert.Equal(t, int64(1), calls.Load())
}

// TestToolCallCancel: a cancel mid-run stores the final frame at once, answers CANCELLED,
// stops the attempt, and the run ends CANCELLED; the frames before it are its partial
// results. A cancel after the end answers ALREADY_COMPLETED.
func TestToolCallCancel(t *testing.T) {
	h := newToolHarness(t, true, tool.Policy{}, func(ctx context.Context, _ int64, emit tools.Emit) (tools.Result, error) {
		if err := emit(ctx, "text/plain", []byte("partial")); err != nil {
			return tools.Result{}, err
		}
		<-ctx.Done()
		return tools.Result{}, tool.Errorf(tool.CodeCancelled, "stopped")
	})
	var answer workflows.ToolCancelResult
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(workflows.ToolCancelUpdate, "", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { t.Errorf("cancel rejected: %v", err) },
			OnAccept:   func() {},
			OnComplete: func(r any, err error) { require.NoError(t, err); answer = r.(workflows.ToolCancelResult) },
		}, workflows.ToolCancel{By: "agent:a"})
	}, 2*time.Second)
	h.env.ExecuteWorkflow(workflows.ToolCall, h.in)
	res := h.result(t)
	assert.Equal(t, tool.CodeCancelled, res.Code)
	assert.Equal(t, tool.CodeCancelled, answer.Code)
	fs := h.frames(t)
	require.Len(t, fs, 2)
	s := summary(t, fs[1])
	assert.Equal(t, "cancelled", s.Status)
	assert.True(t, s.Partial)
	assert.Equal(t, "agent:a", s.CancelledBy)
}

// TestToolCallPrivilegedWaitsForApproval: a PRIVILEGED call that nobody decides gets the
// fallback (deny) and ends PERMISSION_DENIED without running.
func TestToolCallPrivilegedWaitsForApproval(t *testing.T) {
	h := newToolHarness(t, true, tool.Policy{Privilege: tool.PrivilegePrivileged}, func(context.Context, int64, tools.Emit) (tools.Result, error) {
		return tools.Result{Data: []byte(`{}`)}, nil
	})
	h.env.RegisterWorkflow(workflows.HitlWait)
	h.env.ExecuteWorkflow(workflows.ToolCall, h.in)
	res := h.result(t)
	assert.Equal(t, tool.CodePermissionDenied, res.Code)
	assert.NotEmpty(t, res.HitlID)
	assert.Equal(t, int64(0), h.exec.attempts.Load(), "nothing ran without an approval")
}

// TestToolApprovalShowsArguments: the invocation that asks an operator to approve a call shows
// the call's arguments among its facts, cut at 2 KiB with a note of the whole size, so that
// the operator sees what would run.
func TestToolApprovalShowsArguments(t *testing.T) {
	for _, tc := range []struct {
		args, want string
	}{
		{`{"cmd":"rm -rf build"}`, `arguments: {"cmd":"rm -rf build"}`},
		{`{"blob":"` + strings.Repeat("é", 1500) + `"}`, "arguments (the first 2047 of 3011 bytes): {\"blob\":\"" + strings.Repeat("é", 1019) + "…"},
	} {
		h := newToolHarness(t, true, tool.Policy{Privilege: tool.PrivilegePrivileged}, func(context.Context, int64, tools.Emit) (tools.Result, error) {
			return tools.Result{Data: []byte(`{}`)}, nil
		})
		h.in.Request.Args = []byte(tc.args)
		var asked hitl.Invocation
		h.env.RegisterWorkflow(workflows.HitlWait)
		h.env.OnWorkflow(workflows.HitlWait, mock.Anything, mock.Anything).Return(
			func(_ workflow.Context, in workflows.HitlWaitInput) (hitl.Outcome, error) {
				asked = in.Invocation
				return hitl.Outcome{Decision: hitl.Deny, DecidedBy: "ops"}, nil
			})
		h.env.ExecuteWorkflow(workflows.ToolCall, h.in)
		res := h.result(t)
		assert.Equal(t, tool.CodePermissionDenied, res.Code)
		assert.Contains(t, asked.Context.Facts, tc.want)
	}
}

// argsExecutor records the arguments each attempt ran with.
type argsExecutor struct{ args chan []byte }

func (a *argsExecutor) Call(_ context.Context, req tools.Request, _ tools.Emit) (tools.Result, error) {
	a.args <- req.Args
	return tools.Result{ContentType: "application/json", Data: []byte(`{}`)}, nil
}

// TestToolApprovalModifyReplacesArguments: an operator's Modify of a privileged call replaces
// its arguments with the modification once it validates against the tool's input schema, so
// the tool runs with what the operator wrote; a modification that does not validate is
// refused with VALIDATION_ERROR and nothing runs.
func TestToolApprovalModifyReplacesArguments(t *testing.T) {
	for _, tc := range []struct {
		patch    string
		wantCode tool.Code
	}{
		{`{"q":"only the staging bucket"}`, ""},
		{`{"q":7}`, tool.CodeValidation},
	} {
		var suite testsuite.WorkflowTestSuite
		env := suite.NewTestWorkflowEnvironment()
		st := memory.New()
		require.NoError(t, st.ToolProviders().RegisterProvider(context.Background(), "p", tool.ProviderKindConnector, []*connectorpb.ToolDescriptor{{
			ToolName: "t", InputSchema: `{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`, SideEffects: "write", DefaultTimeoutS: 10,
		}}, "scheduler"))
		exec := &argsExecutor{args: make(chan []byte, 2)}
		env.RegisterActivity(&activities.Activities{Store: st})
		env.RegisterActivity(&activities.ToolRunner{ProviderID: "p", Executor: exec, Store: st})
		env.RegisterWorkflow(workflows.HitlWait)
		env.OnWorkflow(workflows.HitlWait, mock.Anything, mock.Anything).Return(
			func(_ workflow.Context, in workflows.HitlWaitInput) (hitl.Outcome, error) {
				return hitl.Outcome{Decision: hitl.Modify, Patch: []byte(tc.patch), DecidedBy: "ops"}, nil
			})
		_, _, err := st.ToolCalls().CreateCall(context.Background(), store.ToolCallRecord{CallID: "c1", Caller: "agent:a"})
		require.NoError(t, err)
		env.ExecuteWorkflow(workflows.ToolCall, workflows.ToolCallInput{Caller: "agent:a", TaskQueue: "q",
			Request: tools.Request{CallID: "c1", ProviderID: "p", ToolName: "t", ContentType: "application/json", Args: []byte(`{"q":"every bucket"}`),
				Policy: tool.Policy{Privilege: tool.PrivilegePrivileged, Timeout: time.Minute}}})
		require.True(t, env.IsWorkflowCompleted())
		res := toolResult(t, env)
		assert.Equal(t, tc.wantCode, res.Code, res.Message)
		if tc.wantCode == "" {
			assert.JSONEq(t, tc.patch, string(<-exec.args), "the tool ran with the operator's arguments")
		} else {
			assert.Contains(t, res.Message, "modified in HITL invocation")
			assert.Empty(t, exec.args, "nothing ran")
		}
	}
}
