package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// toolReply takes a TOOL_RESULT or TOOL_ERROR envelope a provider agent addressed to the
// scheduler: it stores the answer and records that it was taken.
func (s *Scheduler) toolReply(ctx context.Context, env *commonpb.Envelope) (*protocol.Error, error) {
	perr, err := s.storeToolReply(ctx, env)
	if perr != nil || err != nil {
		return perr, err
	}
	s.sink.Record(ctx, audit.Event{CorrelationID: env.GetCorrelationId(), Actor: env.GetProducerId(), Type: "tool.reply_received",
		AgentID: env.GetProducerId(), MessageID: env.GetMessageId(), Details: map[string]any{"message_type": env.GetMessageType().String()}})
	return nil, nil
}

// storeToolReply stores what a provider agent answers to a call it was routed (§18.2): a
// frame, or the call's final frame — its result or its TOOL_ERROR — whose storing then
// reaches the call's workflow as an outbox entry. Only the call's provider may answer it; an
// answer to a call that already ended is refused, so the agent learns that its work was not
// used.
func (s *Scheduler) storeToolReply(ctx context.Context, env *commonpb.Envelope) (*protocol.Error, error) {
	if s.store == nil {
		return protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "this server does not take tool replies"), nil
	}
	var p tool.ReplyPayload
	if err := json.Unmarshal(env.GetPayload(), &p); err != nil {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "the %s payload is not the JSON of §18.2: %v", env.GetMessageType(), err), nil
	}
	if p.CallID == "" {
		p.CallID = env.GetCorrelationId()
	}
	calls := s.store.ToolCalls()
	rec, err := calls.GetCall(ctx, p.CallID)
	if errors.Is(err, store.ErrNotFound) {
		return protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "no tool call %q", p.CallID), nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up tool call %s: %w", p.CallID, err)
	}
	if rec.ProviderID != env.GetProducerId() {
		return protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "call %s is provider %s's to answer, not %s's", p.CallID, rec.ProviderID, env.GetProducerId()), nil
	}
	ct := p.ContentType
	if ct == "" {
		ct = "application/json"
	}
	var provided workflows.ToolProvided
	var fin store.ToolFrameRecord
	var created bool
	switch {
	case env.GetMessageType() == commonpb.MessageType_TOOL_RESULT && p.Final != nil && !*p.Final:
		_, err := calls.AppendFrame(ctx, p.CallID, ct, p.ResultB64)
		if errors.Is(err, store.ErrCallClosed) {
			return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "call %s already ended; the frame is not stored", p.CallID), nil
		}
		return nil, err
	case env.GetMessageType() == commonpb.MessageType_TOOL_RESULT:
		fin, created, err = calls.Finish(ctx, p.CallID, ct, p.ResultB64, func(frames, bytes uint64) []byte {
			return tool.Summary{Status: "ok", Frames: frames, Bytes: bytes, Attempt: 1}.JSON()
		})
	default:
		code := tool.Code(p.ErrorCode)
		if !code.Valid() || code == tool.CodeAlreadyCompleted {
			return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "error_code %q is not one of the §18.3 codes (docs/tools.md)", p.ErrorCode), nil
		}
		provided.Code, provided.Message = code, p.Note
		data, _ := json.Marshal(map[string]string{"error_code": string(code), "message": p.Note})
		fin, created, err = calls.Finish(ctx, p.CallID, "application/json", data, func(frames, bytes uint64) []byte {
			return tool.Summary{Status: "error", ErrorCode: string(code), Message: p.Note, Frames: frames, Bytes: bytes, Partial: frames > 0, Attempt: 1}.JSON()
		})
	}
	if err != nil {
		return nil, fmt.Errorf("store the answer to call %s: %w", p.CallID, err)
	}
	if !created {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "call %s already ended; the answer is not stored", p.CallID), nil
	}
	provided.FinalFrame = fin.FrameNo
	h, err := NewOutboxEntry(workflows.OutboxToolProvided, workflows.ToolWorkflowID(p.CallID), workflows.ToolProvidedPayload{CallID: p.CallID, Provided: provided})
	if err != nil {
		return nil, err
	}
	// The answer is stored: should this outbox entry be lost with the process, the call ends at
	// its deadline and finds the stored answer standing (the first final frame wins).
	if err := s.store.Outbox().Add(ctx, []store.OutboxEntry{h}, store.OutboxLease); err != nil {
		return nil, fmt.Errorf("hand the answer to call %s to Temporal: %w", p.CallID, err)
	}
	_ = s.relay.Deliver(ctx, h)
	return nil, nil
}
