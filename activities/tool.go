package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/telemetry"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// Audit event types of tool calls (§19).
const (
	// AuditToolCallFinished records a call's end: its code (empty on success), frames and bytes.
	AuditToolCallFinished = "tool.call_finished"
	// AuditToolEscalated records a call that runs above the caller's standard privileges
	// (§18.5.3: ELEVATED and above are logged).
	AuditToolEscalated = "tool.privilege_escalated"
)

// ToolHeartbeatEvery is how often a running tool attempt heartbeats. Heartbeats carry the
// cancellation back to the attempt (§18.6) and let Temporal see a dead tool worker: the
// call workflow's heartbeat timeout is a few of these.
const ToolHeartbeatEvery = 250 * time.Millisecond

// RunToolInput is one attempt of a tool call, as the call workflow schedules it on the
// provider's task queue.
type RunToolInput struct {
	// Request is what the executor receives; Attempt is filled in by the activity.
	Request tools.Request
}

// RunToolResult is a successful attempt: its final frame is stored.
type RunToolResult struct {
	// FinalFrame is the final frame's frame_no.
	FinalFrame uint64
	// Closed reports that the call already had its final frame (a cancel came first), so
	// the result was not stored.
	Closed bool
}

// ToolRunner runs the tools of one provider: a worker polling that provider's task queue
// registers it, so tool workers scale on their own, per provider (§18).
type ToolRunner struct {
	// ProviderID is the provider this runner serves.
	ProviderID string
	// Executor runs the provider's tools.
	Executor tools.Executor
	// Store keeps the call's frames.
	Store store.Store
	// Sink records audit events.
	Sink *audit.Sink
	// Log logs frame counts and escalations.
	Log *slog.Logger
}

// RunTool runs one attempt of a tool call: the executor's frames are stored as they come,
// its result becomes the call's final frame, and a failure becomes an application error
// whose type is the §18.3 code — non-retryable unless the code is transient, since the
// workflow's retry policy only retries idempotent tools anyway. It heartbeats all along.
func (r *ToolRunner) RunTool(ctx context.Context, in RunToolInput) (RunToolResult, error) {
	req := in.Request
	req.Attempt = int(activity.GetInfo(ctx).Attempt)
	if req.ProviderID != r.ProviderID {
		return RunToolResult{}, toolAppError(tool.Errorf(tool.CodeInternal, "provider %s's call reached the worker of provider %s", req.ProviderID, r.ProviderID))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopBeat := heartbeatEvery(ctx, ToolHeartbeatEvery)
	defer stopBeat()

	if req.MaxConcurrency > 0 {
		release, err := r.takeSlot(ctx, req)
		if err != nil {
			return RunToolResult{}, toolAppError(err)
		}
		defer release()
	}
	emit := func(ectx context.Context, contentType string, data []byte) error {
		_, err := r.Store.ToolCalls().AppendFrame(ectx, req.CallID, contentType, data)
		if errors.Is(err, store.ErrCallClosed) {
			// The call was cancelled and its final frame written: stop the tool now rather
			// than wait for the heartbeat to bring the cancellation.
			cancel()
			return tool.Errorf(tool.CodeCancelled, "call %s is closed", req.CallID)
		}
		return err
	}
	res, err := r.callTool(ctx, req, emit)
	if err != nil {
		return RunToolResult{}, toolAppError(err)
	}
	final, created, err := r.Store.ToolCalls().Finish(context.WithoutCancel(ctx), req.CallID, res.ContentType, res.Data, func(frames, bytes uint64) []byte {
		return tool.Summary{Status: "ok", Frames: frames, Bytes: bytes, Attempt: req.Attempt}.JSON()
	})
	if err != nil {
		return RunToolResult{}, fmt.Errorf("storing the final frame of %s: %w", req.CallID, err)
	}
	return RunToolResult{FinalFrame: final.FrameNo, Closed: !created}, nil
}

// Attributes of a tool call's span (callTool).
const (
	spanToolName     = attribute.Key("sw4rm.tool.name")
	spanToolProvider = attribute.Key("sw4rm.tool.provider")
	spanToolCallID   = attribute.Key("sw4rm.tool.call_id")
	spanToolAttempt  = attribute.Key("sw4rm.tool.attempt")
	spanToolCode     = attribute.Key("sw4rm.tool.code")
)

// callTool runs the executor inside the span `tool <name>`, a child of the activity's span
// (the Temporal tracing interceptor's), so the tool's own work — an MCP round trip, a
// process — shows in the call's trace with its provider and §18.3 code ("" on success).
// With tracing off the span is the no-op one.
func (r *ToolRunner) callTool(ctx context.Context, req tools.Request, emit tools.Emit) (tools.Result, error) {
	ctx, span := telemetry.Tracer().Start(ctx, "tool "+req.ToolName, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(spanToolName.String(req.ToolName), spanToolProvider.String(req.ProviderID),
			spanToolCallID.String(req.CallID), spanToolAttempt.Int(req.Attempt)))
	defer span.End()
	res, err := r.Executor.Call(ctx, req, emit)
	if err != nil {
		code := tool.CodeInternal
		var te *tool.Error
		if errors.As(err, &te) {
			code = te.Code
		}
		span.SetAttributes(spanToolCode.String(string(code)))
		span.SetStatus(codes.Error, err.Error())
		return res, err
	}
	span.SetAttributes(spanToolCode.String(""))
	return res, nil
}

// ToolSlotLease is how long a running attempt holds its tool's concurrency slot without
// renewing it: a worker that died frees the slot of its call this long after its last
// renewal. A running attempt renews it every third of the lease.
const ToolSlotLease = 15 * time.Second

// takeSlot waits, heartbeating, for one of the tool's max_concurrency slots (§18.1), and
// returns the function that frees it; the slot is renewed while the attempt runs. Waiting
// ends with the attempt's deadline (TOOL_TIMEOUT) or its cancellation (CANCELLED).
func (r *ToolRunner) takeSlot(ctx context.Context, req tools.Request) (release func(), err error) {
	calls := r.Store.ToolCalls()
	limit := int(req.MaxConcurrency)
	wait := 50 * time.Millisecond
	for {
		ok, err := calls.AcquireSlot(ctx, req.ProviderID, req.ToolName, req.CallID, limit, ToolSlotLease)
		if err == nil && ok {
			break
		}
		if err != nil && ctx.Err() == nil && r.Log != nil {
			r.Log.Warn("taking a tool's concurrency slot failed; trying again", "call_id", req.CallID, "err", err)
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, tool.Errorf(tool.CodeToolTimeout, "tool %s waited past its deadline for one of its %d concurrency slots", req.ToolName, limit)
			}
			return nil, tool.Errorf(tool.CodeCancelled, "cancelled while waiting for one of the %d concurrency slots of tool %s", limit, req.ToolName)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(ToolSlotLease / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_, _ = calls.AcquireSlot(context.WithoutCancel(ctx), req.ProviderID, req.ToolName, req.CallID, limit, ToolSlotLease)
			}
		}
	}()
	return func() {
		close(done)
		_ = calls.ReleaseSlot(context.WithoutCancel(ctx), req.ProviderID, req.ToolName, req.CallID)
	}, nil
}

// heartbeatEvery heartbeats until ctx ends or the returned stop is called; stop returns once
// the heartbeating goroutine has, so that no heartbeat is sent after the attempt returned.
func heartbeatEvery(ctx context.Context, every time.Duration) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			activity.RecordHeartbeat(ctx)
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// toolAppError turns an executor's failure into the activity's error: an application error
// typed with the §18.3 code, retryable only when the code is transient.
func toolAppError(err error) error {
	var te *tool.Error
	if !errors.As(err, &te) {
		te = tool.Errorf(tool.CodeInternal, "%v", err)
	}
	return temporal.NewApplicationErrorWithOptions(te.Msg, string(te.Code), temporal.ApplicationErrorOptions{NonRetryable: !te.Code.Transient()})
}

// FinishToolInput ends a call that did not end with a result: an error or a cancel.
type FinishToolInput struct {
	// CallID is the call.
	CallID string
	// Summary says how it ended; Frames, Bytes and Partial are filled in by the store's totals.
	Summary tool.Summary
	// Caller, ProviderID and ToolName are for the audit record.
	Caller, ProviderID, ToolName string
}

// FinishToolResult is the stored final frame.
type FinishToolResult struct {
	// FinalFrame is its frame_no.
	FinalFrame uint64
	// Created is false when the call already had a final frame, which then stands.
	Created bool
	// Summary is the stored final frame's summary, whichever wrote it.
	Summary tool.Summary
}

// FinishTool stores the final frame of a call that failed or was cancelled, with a summary
// counting the partial results before it; the first final frame wins (store.ToolCalls.Finish).
// The summary's data is the error as JSON, so a stream's last frame says what happened.
func (a *Activities) FinishTool(ctx context.Context, in FinishToolInput) (FinishToolResult, error) {
	sum := in.Summary
	data, _ := json.Marshal(map[string]string{"error_code": sum.ErrorCode, "message": sum.Message})
	f, created, err := a.Store.ToolCalls().Finish(ctx, in.CallID, "application/json", data, func(frames, bytes uint64) []byte {
		sum.Frames, sum.Bytes, sum.Partial = frames, bytes, frames > 0
		return sum.JSON()
	})
	if err != nil {
		return FinishToolResult{}, err
	}
	var stored tool.Summary
	if len(f.Summary) > 0 {
		_ = json.Unmarshal(f.Summary, &stored)
	}
	return FinishToolResult{FinalFrame: f.FrameNo, Created: created, Summary: stored}, nil
}

// ValidateToolArgsInput names a tool and the arguments to check against its descriptor.
type ValidateToolArgsInput struct {
	// ProviderID and ToolName name the tool.
	ProviderID, ToolName string
	// ContentType and Args are the arguments.
	ContentType string
	Args        []byte
}

// ValidateToolArgs checks arguments against the tool's input schema as the frontend checks a
// call's (tool.ValidateArgs), for arguments an operator wrote in a Modify decision. The
// refusal comes back as its message rather than as an error, for the workflow to answer; only
// a store failure is an error, which the activity's retries absorb.
func (a *Activities) ValidateToolArgs(ctx context.Context, in ValidateToolArgsInput) (string, error) {
	rec, err := a.Store.ToolProviders().GetTool(ctx, in.ProviderID, in.ToolName)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Sprintf("provider %s no longer offers tool %s", in.ProviderID, in.ToolName), nil
	}
	if err != nil {
		return "", err
	}
	if err := tool.ValidateArgs(rec.Descriptor, in.ContentType, in.Args); err != nil {
		return err.Error(), nil
	}
	return "", nil
}

// RecordToolEndInput is the audit record of a call's end (§19: frame counts and bytes).
type RecordToolEndInput struct {
	// CallID, Caller, ProviderID and ToolName name the call.
	CallID, Caller, ProviderID, ToolName string
	// Code is the error code, empty on success.
	Code string
	// Privilege is the call's privilege level.
	Privilege string
}

// RecordToolEnd logs and audits a call's end with its frame count and bytes (§19).
func (a *Activities) RecordToolEnd(ctx context.Context, in RecordToolEndInput) error {
	rec, err := a.Store.ToolCalls().GetCall(ctx, in.CallID)
	if err != nil {
		return err
	}
	a.Sink.Record(ctx, audit.Event{CorrelationID: in.CallID, Actor: in.Caller, AgentID: in.Caller, Type: AuditToolCallFinished,
		Details: map[string]any{"call_id": in.CallID, "provider_id": in.ProviderID, "tool_name": in.ToolName, "error_code": in.Code,
			"frames": rec.Frames, "bytes": rec.Bytes, "privilege_level": in.Privilege,
			// From the call's record to its end: sw4rm_tool_call_duration_seconds (metrics).
			"duration_ms": time.Since(rec.CreatedAt).Milliseconds()}})
	return nil
}

// RecordToolEscalation audits a call that runs at ELEVATED or above (§18.5.3); the call
// workflow logs it too, at WARN from PRIVILEGED up.
func (a *Activities) RecordToolEscalation(ctx context.Context, in RecordToolEndInput) error {
	a.Sink.Record(ctx, audit.Event{CorrelationID: in.CallID, Actor: in.Caller, AgentID: in.Caller, Type: AuditToolEscalated,
		Details: map[string]any{"call_id": in.CallID, "provider_id": in.ProviderID, "tool_name": in.ToolName, "privilege_level": in.Privilege}})
	return nil
}

// ReplyToolInput asks ReplyTool to tell the calling agent how its call ended.
type ReplyToolInput struct {
	// CallID is the call.
	CallID string
	// To is the agent that receives the envelope.
	To string
	// Correlation is the envelope's correlation_id.
	Correlation string
}

// ToolReplyMessageID is the message_id of a call's TOOL_RESULT or TOOL_ERROR envelope: one
// per call, so a retried reply is delivered once.
func ToolReplyMessageID(callID string) string { return "tool-reply/" + callID }

// ReplyTool sends the calling agent a TOOL_RESULT envelope with the call's result, or a
// TOOL_ERROR with its code (§18.2), through the router, once.
func (a *Activities) ReplyTool(ctx context.Context, in ReplyToolInput) error {
	rec, err := a.Store.ToolCalls().GetCall(ctx, in.CallID)
	if err != nil {
		return err
	}
	if !rec.Final {
		return fmt.Errorf("call %s has no final frame yet", in.CallID)
	}
	fs, err := a.Store.ToolCalls().Frames(ctx, in.CallID, rec.Frames-1, 1)
	if err != nil || len(fs) != 1 {
		return fmt.Errorf("reading the final frame of %s: %w", in.CallID, errors.Join(err, store.ErrNotFound))
	}
	f := fs[0]
	var sum tool.Summary
	_ = json.Unmarshal(f.Summary, &sum)
	mt := commonpb.MessageType_TOOL_RESULT
	var payload []byte
	if sum.Status == "ok" {
		payload, err = json.Marshal(tool.ResultPayload{CallID: in.CallID, Status: "OK", ResultB64: f.Data, ContentType: f.ContentType, FrameNo: f.FrameNo})
	} else {
		mt = commonpb.MessageType_TOOL_ERROR
		payload, err = json.Marshal(tool.ErrorPayload{CallID: in.CallID, ErrorCode: sum.ErrorCode, Note: sum.Message, PartialResult: sum.Partial})
	}
	if err != nil {
		return err
	}
	env := &commonpb.Envelope{MessageId: ToolReplyMessageID(in.CallID), CorrelationId: in.Correlation, MessageType: mt,
		ContentType: "application/json", ContentLength: uint64(len(payload)), Payload: payload}
	if err := a.Router.Notify(ctx, in.To, env); err != nil && !errors.Is(err, store.ErrDuplicateMessage) {
		return fmt.Errorf("reply to %s: %w", in.To, err)
	}
	return nil
}

// OfferToolCallInput routes a call to the agent that provides the tool (§18.2).
type OfferToolCallInput struct {
	// Request is the call.
	Request tools.Request
	// Caller is the principal that made the call.
	Caller string
	// Agent is the provider agent.
	Agent string
}

// ToolCallMessageID is the message_id of the TOOL_CALL envelope of a call: one per call, so
// a retried offer is delivered once.
func ToolCallMessageID(callID string) string { return "tool-call/" + callID }

// OfferToolCall sends the provider agent the call as a TOOL_CALL envelope, once.
func (a *Activities) OfferToolCall(ctx context.Context, in OfferToolCallInput) error {
	req, pol := in.Request, in.Request.Policy
	payload, err := json.Marshal(tool.CallPayload{CallID: req.CallID, ToolName: req.ToolName, ProviderID: req.ProviderID, Args: json.RawMessage(req.Args),
		ContentType: req.ContentType, Stream: true, Caller: in.Caller, Worktree: req.Worktree,
		Policy: tool.CallPolicy{TimeoutMs: pol.Timeout.Milliseconds(), BudgetWallMs: pol.BudgetWall.Milliseconds(), BudgetCPUMs: pol.BudgetCPU.Milliseconds(),
			NetworkPolicy: string(pol.Network), PrivilegeLevel: pol.Privilege.String(), WorktreeRequired: pol.WorktreeRequired}})
	if err != nil {
		return err
	}
	env := &commonpb.Envelope{MessageId: ToolCallMessageID(req.CallID), CorrelationId: req.CallID, MessageType: commonpb.MessageType_TOOL_CALL,
		ContentType: "application/json", ContentLength: uint64(len(payload)), Payload: payload}
	if err := a.Router.Notify(ctx, in.Agent, env); err != nil && !errors.Is(err, store.ErrDuplicateMessage) {
		return fmt.Errorf("route call %s to %s: %w", req.CallID, in.Agent, err)
	}
	return nil
}

// NotifyToolCancelled tells a provider agent that a call it was offered ended without its
// answer (cancelled, or past its deadline): a NOTIFICATION {"event": "tool_cancelled",
// "call_id"}, once.
func (a *Activities) NotifyToolCancelled(ctx context.Context, in OfferToolCallInput) error {
	payload, err := json.Marshal(map[string]string{"event": "tool_cancelled", "call_id": in.Request.CallID})
	if err != nil {
		return err
	}
	return a.notifyOnce(ctx, in.Agent, "tool-cancel/"+in.Request.CallID, in.Request.CallID, payload)
}
