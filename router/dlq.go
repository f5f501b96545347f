package router

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// excerptBytes bounds the payload excerpt kept in a dead letter.
const excerptBytes = 256

// admissionDLQClass says which admission rejections are dead-lettered (§21.1): those that
// mean the message can never succeed. buffer_full is back-pressure (the producer retries),
// and duplicates are answered from the cache.
func admissionDLQClass(code commonpb.ErrorCode) string {
	switch code {
	case commonpb.ErrorCode_VALIDATION_ERROR, commonpb.ErrorCode_UNSUPPORTED_MESSAGE_TYPE, commonpb.ErrorCode_NO_ROUTE:
		return store.DLQTerminalError
	case commonpb.ErrorCode_OVERSIZE_PAYLOAD, commonpb.ErrorCode_PERMISSION_DENIED:
		return store.DLQPolicyViolation
	}
	return ""
}

type deadLetterInput struct {
	env       *commonpb.Envelope
	route     string
	code      commonpb.ErrorCode
	class     string
	reason    string
	state     commonpb.EnvelopeState
	firstSeen time.Time
}

// deadLetter stores a dead letter with the diagnostic context of §21.1, its attempt history
// that of the whole operation (attemptHistory).
func (r *Router) deadLetter(ctx context.Context, in deadLetterInput) error {
	env := in.env
	if env == nil {
		env = &commonpb.Envelope{}
	}
	now := time.Now().UTC()
	first := in.firstSeen
	if first.IsZero() {
		first = now
	}
	id := env.GetMessageId()
	if id == "" {
		// A malformed message without an id still gets an entry (§21.1 lists malformed
		// messages); the synthetic id is marked as such.
		id = "invalid-" + uuid.NewString()
	}
	excerpt := env.GetPayload()
	if len(excerpt) > excerptBytes {
		excerpt = excerpt[:excerptBytes]
	}
	attempts, err := r.attemptHistory(ctx, env, store.DLQAttempt{MessageID: id, At: first, State: trimState(in.state),
		ErrorCode: codeName(in.code), Reason: in.reason, UpdatedAt: now})
	if err != nil {
		return fmt.Errorf("dead-letter %s: %w", id, err)
	}
	// §21.1's creation time is the operation's: its first attempt's, which the bounded
	// history keeps.
	if at := attempts[0].At; !at.IsZero() && at.Before(first) {
		first = at
	}
	entry, err := r.st.DLQ().PutDeadLetter(ctx, store.DLQEntry{
		MessageID: id, ProducerID: env.GetProducerId(), RecipientID: in.route, CorrelationID: env.GetCorrelationId(),
		IdempotencyToken: env.GetIdempotencyToken(), ErrorCode: in.code, Class: in.class, Reason: in.reason,
		Attempts: attempts, Envelope: env, PayloadSize: len(env.GetPayload()), ContentType: env.GetContentType(),
		PayloadExcerpt: excerpt, FirstSeenAt: first, FailedAt: now,
	})
	if err != nil {
		return fmt.Errorf("dead-letter %s: %w", id, err)
	}
	r.sink.Record(ctx, audit.Event{CorrelationID: env.GetCorrelationId(), Actor: protocol.SchedulerID, Type: "dlq.added",
		AgentID: in.route, MessageID: id, Details: map[string]any{"dlq_id": entry.ID, "class": in.class, "error_code": in.code.String(), "reason": in.reason}})
	return nil
}

// attemptHistory returns the attempt history of the operation final belongs to (§21.1:
// "attempt history with timestamps and reasons"), oldest first, final included: every
// attempt with final's producer, correlation_id and idempotency token (§11.3, the three-ID
// model) — the producer's retries after a timeout, the attempts the idempotency cache
// refused while one was in progress, the router's retries of a request (004 §1), an
// operator's requeues of an earlier dead letter and its retries. Two sources make it up:
// the message records (store.MessagePlane.OperationAttempts), and the attempts of the
// operation's earlier dead letters, which alone know the attempts admission refused without
// recording them (a validation error, no_route). A record tells an attempt's state as it is
// now, so it wins over an earlier dead letter's copy, and final, as this failure sees it,
// over both. A message without a token is an operation of its own: final alone. The store
// bounds what it keeps (store.BoundAttempts).
func (r *Router) attemptHistory(ctx context.Context, env *commonpb.Envelope, final store.DLQAttempt) ([]store.DLQAttempt, error) {
	op := store.Operation{ProducerID: env.GetProducerId(), CorrelationID: env.GetCorrelationId(), IdempotencyToken: env.GetIdempotencyToken()}
	if !op.Valid() {
		return []store.DLQAttempt{final}, nil
	}
	earlier, err := r.st.DLQ().ListDeadLetters(ctx, store.DLQFilter{ProducerID: op.ProducerID, CorrelationID: op.CorrelationID,
		IdempotencyToken: op.IdempotencyToken, IncludeRequeued: true})
	if err != nil {
		return nil, fmt.Errorf("earlier dead letters of the operation: %w", err)
	}
	recs, err := r.st.Messages().OperationAttempts(ctx, op)
	if err != nil {
		return nil, fmt.Errorf("attempts of the operation: %w", err)
	}
	byID := map[string]store.DLQAttempt{}
	for _, e := range earlier {
		for _, a := range e.Attempts {
			byID[a.MessageID] = a
		}
	}
	for _, rec := range recs {
		byID[rec.MessageID] = store.DLQAttempt{MessageID: rec.MessageID, At: rec.CreatedAt, State: trimState(rec.State),
			ErrorCode: codeName(rec.ErrorCode), Reason: rec.Note, UpdatedAt: rec.UpdatedAt}
	}
	byID[final.MessageID] = final
	out := slices.SortedFunc(maps.Values(byID), func(a, b store.DLQAttempt) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return strings.Compare(a.MessageID, b.MessageID)
	})
	return out, nil
}

// codeName is an error code's enum name, "" for none.
func codeName(c commonpb.ErrorCode) string {
	if c == commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
		return ""
	}
	return c.String()
}

// Requeue sends a dead letter again: a new attempt with a new message_id, the same
// idempotency token and retry_count+1, to the original route (§21.1: operators requeue
// selected entries). The requeue bypasses the idempotency cache — an operator asked for
// another execution — and is recorded on the entry so it cannot be requeued twice.
func (r *Router) Requeue(ctx context.Context, id int64) (string, error) {
	entry, err := r.st.DLQ().GetDeadLetter(ctx, id)
	if err != nil {
		return "", err
	}
	if entry.RequeuedAs != "" {
		return "", fmt.Errorf("%w: as %s at %s", store.ErrAlreadyRequeued, entry.RequeuedAs, entry.RequeuedAt.UTC().Format(time.RFC3339))
	}
	if entry.Envelope == nil || entry.Envelope.GetMessageId() == "" {
		return "", fmt.Errorf("dead letter %d holds no usable envelope (it was malformed); it cannot be requeued", id)
	}
	if entry.RecipientID == "" {
		return "", fmt.Errorf("dead letter %d has no route to requeue to", id)
	}
	env := proto.Clone(entry.Envelope).(*commonpb.Envelope)
	env.MessageId = uuid.NewString()
	env.RetryCount++
	env.State = commonpb.EnvelopeState_ENVELOPE_STATE_SENT
	r.restamp(env)
	// A dead letter may hold what admission refused (an oversize payload, a policy
	// violation): a requeue is an admission like any other and passes the same checks.
	if perr := protocol.ValidateEnvelope(env, protocol.Limits{MaxPayloadBytes: r.cfg.MaxPayloadBytes}); perr != nil {
		return "", fmt.Errorf("dead letter %d cannot be admitted as it is: %w", id, perr)
	}
	if _, err := r.agent(ctx, entry.RecipientID); err != nil {
		return "", fmt.Errorf("route %s: %w", entry.RecipientID, err)
	}
	req := store.AdmitRequest{Envelope: env, RecipientID: entry.RecipientID, Capacity: r.cfg.BufferCapacity, Track: true, Lane: r.laneFor(ctx, env.GetProducerId())}
	if ttl := env.GetTtlMs(); ttl > 0 {
		req.ExpiresAt = time.Now().Add(time.Duration(ttl) * time.Millisecond)
	}
	// Admit before marking: a failed admission (a full buffer) must leave the entry
	// requeueable rather than lose the message.
	if _, err := r.st.Messages().Admit(ctx, req); err != nil {
		if errors.Is(err, store.ErrBufferFull) {
			return "", fmt.Errorf("buffer_full: agent %s's inbound buffer is full; the entry stays in the DLQ, retry later", entry.RecipientID)
		}
		return "", fmt.Errorf("admit requeued message: %w", err)
	}
	if err := r.st.DLQ().MarkRequeued(ctx, id, env.GetMessageId(), time.Now().UTC()); err != nil {
		return "", err
	}
	r.sink.Record(ctx, audit.Event{CorrelationID: env.GetCorrelationId(), Actor: "operator", Type: "dlq.requeued",
		AgentID: entry.RecipientID, MessageID: env.GetMessageId(), Details: map[string]any{"dlq_id": id, "original_message_id": entry.MessageID, "retry_count": env.GetRetryCount()}})
	return env.GetMessageId(), nil
}
