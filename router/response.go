package router

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/observe"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// requestFor finds the request a response answers and checks that the responder is the
// agent the request went to.
func (r *Router) requestFor(ctx context.Context, env *commonpb.Envelope, requestID string) (store.MessageRecord, *protocol.Error) {
	rec, err := r.st.Messages().GetMessage(ctx, requestID)
	if err != nil {
		return rec, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "%s=%s names no request this router admitted", protocol.ParamInResponseTo, requestID)
	}
	if rec.RecipientID != env.GetProducerId() {
		return rec, protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "only %q, the request's recipient, may respond to %s", rec.RecipientID, requestID)
	}
	return rec, nil
}

// trackRequest records a response-required request so the sweep can retry it and then fail
// it (004 §1–§2: WAITING is bounded).
func (r *Router) trackRequest(ctx context.Context, env *commonpb.Envelope, responder string, p protocol.ResponsePolicy, attempt int, original string) error {
	pr := store.PendingResponse{
		RequestMessageID: env.GetMessageId(), OriginalMessageID: original, ProducerID: env.GetProducerId(), ResponderID: responder,
		CorrelationID: env.GetCorrelationId(), Attempt: attempt, MaxAttempts: p.MaxAttempts, Timeout: p.Timeout,
		Deadline: time.Now().Add(p.Timeout), Status: "pending",
	}
	if err := r.st.Messages().AddPendingResponse(ctx, pr); err != nil {
		return fmt.Errorf("track request: %w", err)
	}
	r.sink.Record(ctx, observe.Event{CorrelationID: env.GetCorrelationId(), Actor: env.GetProducerId(), Type: "request.waiting",
		AgentID: env.GetProducerId(), MessageID: env.GetMessageId(),
		Details: map[string]any{"waiting_on": responder, "attempt": attempt, "max_attempts": p.MaxAttempts, "timeout_ms": p.Timeout.Milliseconds(), "original_message_id": original}})
	return nil
}

// fulfilRequest links an admitted response to its request: the pending entry is resolved and
// the request moves to FULFILLED (004 §1), which its producer hears as an ACK.
func (r *Router) fulfilRequest(ctx context.Context, request store.MessageRecord, response *commonpb.Envelope) error {
	if _, ok, err := r.st.Messages().ResolvePendingResponse(ctx, request.MessageID, response.GetMessageId()); err != nil {
		return fmt.Errorf("resolve pending response: %w", err)
	} else if ok {
		r.sink.Record(ctx, observe.Event{CorrelationID: request.CorrelationID, Actor: response.GetProducerId(), Type: "request.answered",
			AgentID: request.ProducerID, MessageID: request.MessageID, Details: map[string]any{"response_message_id": response.GetMessageId()}})
	}
	_, applied, err := r.advance(ctx, request.MessageID, commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED, 0, "response "+response.GetMessageId(), response.GetProducerId())
	if err != nil || !applied {
		return err
	}
	return r.nack(ctx, request.ProducerID, request.CorrelationID, request.MessageID, commonpb.AckStage_FULFILLED, 0, "response "+response.GetMessageId())
}

// retryOrFailRequest handles a response deadline (004 §1): another attempt with a new
// message_id, the same idempotency token and retry_count+1 while attempts remain, else the
// request FAILS with ack_timeout, its producer is told and it is dead-lettered.
func (r *Router) retryOrFailRequest(ctx context.Context, p store.PendingResponse) error {
	rec, err := r.st.Messages().GetMessage(ctx, p.RequestMessageID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up request: %w", err)
	}
	if protocol.MessageStateTerminal(rec.State) && rec.State != commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT {
		return nil // answered or failed meanwhile
	}
	r.sink.Record(ctx, observe.Event{CorrelationID: rec.CorrelationID, Actor: protocol.SchedulerID, Type: "request.response_timeout",
		AgentID: rec.ProducerID, MessageID: rec.MessageID, Details: map[string]any{"attempt": p.Attempt, "max_attempts": p.MaxAttempts, "waiting_on": p.ResponderID}})
	if p.Attempt < p.MaxAttempts {
		env := proto.Clone(rec.Envelope).(*commonpb.Envelope)
		env.MessageId = uuid.NewString()
		env.RetryCount++
		env.State = commonpb.EnvelopeState_ENVELOPE_STATE_SENT
		// The retry skips the idempotency cache on purpose: the cache would answer
		// ALREADY_IN_PROGRESS for the attempt that is still RECEIVED. It keeps the token, so
		// the responder can recognise the repeat (§11.3).
		_, err := r.st.Messages().Admit(ctx, store.AdmitRequest{Envelope: env, RecipientID: p.ResponderID, Capacity: r.cfg.BufferCapacity, Track: true,
			Lane: r.laneFor(ctx, rec.ProducerID)})
		if err == nil {
			r.sink.Record(ctx, observe.Event{CorrelationID: env.GetCorrelationId(), Actor: protocol.SchedulerID, Type: "request.retried",
				AgentID: p.ResponderID, MessageID: env.GetMessageId(), Details: map[string]any{"retry_of": rec.MessageID, "attempt": p.Attempt + 1}})
			return r.trackRequest(ctx, env, p.ResponderID, protocol.ResponsePolicy{Timeout: p.Timeout, MaxAttempts: p.MaxAttempts}, p.Attempt+1, p.OriginalMessageID)
		}
		if !errors.Is(err, store.ErrBufferFull) {
			return fmt.Errorf("retry request: %w", err)
		}
		// A full buffer ends the retries: the request fails below with the reason.
	}
	note := fmt.Sprintf("no response from %s after %d attempt(s) of %s each", p.ResponderID, p.Attempt, p.Timeout)
	if rec.State != commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT {
		if _, _, err := r.advance(ctx, rec.MessageID, commonpb.EnvelopeState_ENVELOPE_STATE_FAILED, commonpb.ErrorCode_ACK_TIMEOUT, note, protocol.SchedulerID); err != nil {
			return err
		}
	}
	if err := r.nack(ctx, rec.ProducerID, rec.CorrelationID, rec.MessageID, commonpb.AckStage_FAILED, commonpb.ErrorCode_ACK_TIMEOUT, note); err != nil {
		return err
	}
	return r.deadLetter(ctx, deadLetterInput{env: rec.Envelope, route: p.ResponderID, code: commonpb.ErrorCode_ACK_TIMEOUT,
		class: store.DLQRetriesExhausted, reason: note, state: commonpb.EnvelopeState_ENVELOPE_STATE_FAILED, firstSeen: rec.CreatedAt})
}
