package router

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// routeResponse routes a response to the producer of the request it answers, whatever the
// addressing metadata says (004 §3); anything else keeps the route protocol.Resolve gave it,
// or its refusal. A request and a response get idempotency tokens here when they have none.
func (r *Router) routeResponse(ctx context.Context, s *sending) (*protocol.Error, error) {
	env := s.env
	if s.link.InResponseTo != "" {
		request, perr := r.requestFor(ctx, env, s.link.InResponseTo)
		if perr != nil {
			return perr, nil
		}
		s.request, s.route, s.routeErr = request, protocol.Route{Recipient: request.ProducerID}, nil
		if env.IdempotencyToken == "" {
			env.IdempotencyToken = protocol.ResponseToken(env.GetProducerId(), originalOf(request))
		}
	}
	if s.routeErr != nil {
		return s.routeErr, nil
	}
	if s.link.Request != nil && env.IdempotencyToken == "" {
		// A response-required request gets a token so its retries and its response's token
		// (derived from it) stay stable across attempts (004 §5).
		env.IdempotencyToken = env.GetProducerId() + ":request:" + env.GetMessageId()
	}
	return nil, nil
}

// requestAdmitted tracks an admitted request that requires a response (trackRequest).
func (r *Router) requestAdmitted(ctx context.Context, s *sending) error {
	if s.link.Request == nil {
		return nil
	}
	return r.trackRequest(ctx, s.env, s.route.Recipient, *s.link.Request, 1, s.env.GetMessageId())
}

// responseAdmitted fulfils the request an admitted response answers (fulfilRequest).
func (r *Router) responseAdmitted(ctx context.Context, s *sending) error {
	if s.link.InResponseTo == "" {
		return nil
	}
	return r.fulfilRequest(ctx, s.request, s.env)
}

// requestFor finds the request a response answers and checks that the responder is the
// agent the request went to.
func (r *Router) requestFor(ctx context.Context, env *commonpb.Envelope, requestID string) (store.MessageRecord, *protocol.Error) {
	rec, err := r.st.Messages().GetMessage(ctx, requestID)
	if err != nil {
		return rec, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "%s=%s names no request this router admitted", wire.InResponseToParam, requestID)
	}
	if rec.RecipientID != env.GetProducerId() {
		return rec, protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "only %q, the request's recipient, may respond to %s", rec.RecipientID, requestID)
	}
	return rec, nil
}

// ResponseWait tells an agent's lifecycle that the agent waits on the response to a request,
// or that the wait ended (004 §2): a Notice.
type ResponseWait struct {
	// ProducerID is the requester, whose lifecycle is told.
	ProducerID string
	// Key is the request's idempotency token, which all its attempts share: it names the
	// wait from beginning to end.
	Key string
	// RequestID is the request's first message_id, what the agent waits on; set when the
	// wait begins.
	RequestID string
	// Waiting is true when the wait begins, false when it ends.
	Waiting bool
	// Bound is the longest the wait may last, set when it begins.
	Bound time.Duration
	// Answered says how a wait ended: the response arrived, or (false) the request failed.
	Answered bool
	// Reason explains the end.
	Reason string
}

// responseWaitSlack is added to a wait's bound beyond its attempts' timeouts: the sweep's
// steps between attempts and the delivery of the handoff that ends the wait.
const responseWaitSlack = 10 * time.Second

// trackRequest records a response-required request so the sweep can retry it and then fail
// it (004 §1–§2: WAITING is bounded). The first attempt also hands the requester's lifecycle
// the beginning of its wait, in the transaction that records the pending entry, so the
// agent enters WAITING whether or not Temporal is reachable now (docs/architecture.md,
// "The outbox"); retries continue the same wait.
func (r *Router) trackRequest(ctx context.Context, env *commonpb.Envelope, responder string, p protocol.ResponsePolicy, attempt int, original string) error {
	pr := store.PendingResponse{
		RequestMessageID: env.GetMessageId(), OriginalMessageID: original, ProducerID: env.GetProducerId(), ResponderID: responder,
		CorrelationID: env.GetCorrelationId(), Attempt: attempt, MaxAttempts: p.MaxAttempts, Timeout: p.Timeout,
		Deadline: time.Now().Add(p.Timeout), Status: "pending",
	}
	var handoffs []store.OutboxEntry
	if attempt == 1 && r.schedOutbox != nil {
		bound := time.Duration(p.MaxAttempts)*(p.Timeout+r.cfg.SweepInterval) + responseWaitSlack
		h, err := r.schedOutbox.Entry(ResponseWait{ProducerID: pr.ProducerID, Key: env.GetIdempotencyToken(), RequestID: original,
			Waiting: true, Bound: bound})
		if err != nil {
			return fmt.Errorf("prepare the wait's handoff: %w", err)
		}
		handoffs = append(handoffs, h)
	}
	if err := r.st.Messages().AddPendingResponse(ctx, pr, handoffs...); err != nil {
		return fmt.Errorf("track request: %w", err)
	}
	for _, h := range handoffs {
		r.deliverEntry(ctx, h)
	}
	r.sink.Record(ctx, audit.Event{CorrelationID: env.GetCorrelationId(), Actor: env.GetProducerId(), Type: "request.waiting",
		AgentID: env.GetProducerId(), MessageID: env.GetMessageId(),
		Details: map[string]any{"waiting_on": responder, "attempt": attempt, "max_attempts": p.MaxAttempts, "timeout_ms": p.Timeout.Milliseconds(), "original_message_id": original}})
	return nil
}

// fulfilRequest links an admitted response to its request: the pending entry is resolved and
// the request moves to FULFILLED (004 §1), which its producer hears as an ACK.
// The requester's wait ends in the same transaction (004 §1: back to RUNNING).
func (r *Router) fulfilRequest(ctx context.Context, request store.MessageRecord, response *commonpb.Envelope) error {
	var handoffs []store.OutboxEntry
	if r.schedOutbox != nil {
		h, err := r.schedOutbox.Entry(ResponseWait{ProducerID: request.ProducerID, Key: request.Envelope.GetIdempotencyToken(), Answered: true,
			Reason: "response " + response.GetMessageId()})
		if err != nil {
			return fmt.Errorf("prepare the wait's handoff: %w", err)
		}
		handoffs = append(handoffs, h)
	}
	if _, ok, err := r.st.Messages().ResolvePendingResponse(ctx, request.MessageID, response.GetMessageId(), handoffs...); err != nil {
		return fmt.Errorf("resolve pending response: %w", err)
	} else if ok {
		for _, h := range handoffs {
			r.deliverEntry(ctx, h)
		}
		r.sink.Record(ctx, audit.Event{CorrelationID: request.CorrelationID, Actor: response.GetProducerId(), Type: "request.answered",
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
		// Answered or failed meanwhile without resolving the entry: answered before the entry
		// was written, or refused by its recipient's NACK. The wait ends now.
		return r.endWait(ctx, rec, rec.State == commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED,
			fmt.Sprintf("the request is %s: %s", strings.TrimPrefix(rec.State.String(), "ENVELOPE_STATE_"), rec.Note))
	}
	r.sink.Record(ctx, audit.Event{CorrelationID: rec.CorrelationID, Actor: protocol.SchedulerID, Type: "request.response_timeout",
		AgentID: rec.ProducerID, MessageID: rec.MessageID, Details: map[string]any{"attempt": p.Attempt, "max_attempts": p.MaxAttempts, "waiting_on": p.ResponderID}})
	if p.Attempt < p.MaxAttempts {
		env := proto.Clone(rec.Envelope).(*commonpb.Envelope)
		env.MessageId = uuid.NewString()
		env.RetryCount++
		env.State = commonpb.EnvelopeState_ENVELOPE_STATE_SENT
		r.restamp(env)
		// The retry skips the idempotency cache on purpose: the cache would answer
		// ALREADY_IN_PROGRESS for the attempt that is still RECEIVED. It keeps the token, so
		// the responder can recognise the repeat (§11.3).
		_, err := r.st.Messages().Admit(ctx, store.AdmitRequest{Envelope: env, RecipientID: p.ResponderID, Capacity: r.cfg.BufferCapacity, Track: true,
			Lane: r.laneFor(ctx, rec.ProducerID)})
		if err == nil {
			r.sink.Record(ctx, audit.Event{CorrelationID: env.GetCorrelationId(), Actor: protocol.SchedulerID, Type: "request.retried",
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
	if err := r.endWait(ctx, rec, false, "ack_timeout: "+note); err != nil {
		return err
	}
	return r.deadLetter(ctx, deadLetterInput{env: rec.Envelope, route: p.ResponderID, code: commonpb.ErrorCode_ACK_TIMEOUT,
		class: store.DLQRetriesExhausted, reason: note, state: commonpb.EnvelopeState_ENVELOPE_STATE_FAILED, firstSeen: rec.CreatedAt})
}

// endWait hands the requester's lifecycle the end of its wait on a request that is over
// without a response resolving it. No store write carries it — the sweep claimed the pending
// entry before it decided — so the handoff is written on its own, right after the request's
// last transition, as the sweep's CONTROL timeouts are; a frontend that dies in between leaves
// the lifecycle's own bound on the wait to end it (workflows.ResponseWait.Bound).
func (r *Router) endWait(ctx context.Context, request store.MessageRecord, answered bool, reason string) error {
	if r.schedOutbox == nil {
		return nil
	}
	h, err := r.schedOutbox.Entry(ResponseWait{ProducerID: request.ProducerID, Key: request.Envelope.GetIdempotencyToken(), Answered: answered, Reason: reason})
	if err != nil {
		return fmt.Errorf("prepare the wait's handoff: %w", err)
	}
	if err := r.st.Outbox().Add(ctx, []store.OutboxEntry{h}, store.OutboxLease); err != nil {
		return fmt.Errorf("hand the end of the wait to Temporal: %w", err)
	}
	r.deliverEntry(ctx, h)
	return nil
}
