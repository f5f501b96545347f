package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// applyAck advances the acknowledged message and routes the ACK to its producer (§11,
// wire contract: ACKs travel as ordinary envelopes); late ACKs are reconciled (§11.1).
//
// The common case — a legal stage forwarded to the producer — is one store step
// (MessagePlane.AdvanceWith): the transition and the forward's admission are written in one
// transaction. What the ACK does is decided from the message's record inside the step's plan,
// and acted on once the step is written.
func (r *Router) applyAck(ctx context.Context, env *commonpb.Envelope) (*protocol.Error, error) {
	ack, perr := protocol.ParseAck(env)
	if perr != nil {
		return r.reject(ctx, env, "", perr)
	}
	to := protocol.StateForStage(ack.Stage)
	var (
		decision ackDecision
		forward  control // the ACK's forward to the producer, as the plan that was written prepared it
	)
	res, err := r.st.Messages().AdvanceWith(ctx, store.StepRequest{MessageID: ack.AckForMessageID, Known: r.records.recall(ack.AckForMessageID),
		Plan: func(rec store.MessageRecord) (*store.Step, error) {
			decision, forward = decideAck(rec, env, to), control{}
			if decision != ackAdvances {
				return nil, nil
			}
			c, err := r.prepareControl(ctx, rec.ProducerID, env)
			if err != nil {
				return nil, err
			}
			if c, err = r.withSchedulerEntry(c, rec, ack); err != nil {
				return nil, err
			}
			forward = c
			return &store.Step{To: to, ErrorCode: ack.ErrorCode, Note: ack.Note, FollowUp: c.admit, Outbox: c.outbox}, nil
		}})
	if errors.Is(err, store.ErrNotFound) {
		return r.reject(ctx, env, "", protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "ack_for_message_id %s names no message this router admitted", ack.AckForMessageID))
	}
	if err != nil {
		return nil, fmt.Errorf("apply ack to message %s: %w", ack.AckForMessageID, err)
	}
	rec := res.Record
	linkMessage(ctx, rec)
	r.records.remember(rec)
	switch decision {
	case ackWrongSender:
		return r.reject(ctx, env, "", protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED,
			"only the recipient %q may acknowledge message %s, not %q", rec.RecipientID, rec.MessageID, env.GetProducerId()))
	case ackLate:
		return nil, r.lateAck(ctx, rec, env, ack, to)
	case ackFails:
		// The consumer says the message cannot succeed: terminal, NACK and, unless it is an
		// answer to the scheduler (schedulerOutcome), dead letter.
		code := ack.ErrorCode
		if code == commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
			code = commonpb.ErrorCode_INTERNAL_ERROR
		}
		return nil, r.consumerFailed(ctx, rec, to, code, ack.Note, env.GetProducerId(), !schedulerOutcome(rec))
	}
	if !res.Applied {
		r.ackIgnored(ctx, rec, env, ack)
		return nil, nil
	}
	r.recordTransition(ctx, rec, to, ack.ErrorCode, ack.Note, env.GetProducerId())
	if to == commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED && r.metrics != nil {
		r.metrics.Processed(rec.RecipientID, time.Since(rec.CreatedAt))
	}
	return nil, r.finishControl(ctx, forward)
}

// schedulerOutcome reports whether a consumer's REJECTED or FAILED answer to rec is an
// outcome the scheduler records rather than a dead letter: rec is one of the scheduler's
// CONTROL messages (SendControl), the only scheduler traffic that is tracked. A RUN the agent
// answers FAILED is its task's failure, which the task keeps with the agent's error_code and
// reason (a DAG node's error, GetTask) and which is run again by resubmitting or resuming
// the task, not by redelivering the RUN; a requeued RUN would reach the agent under a
// message_id the scheduler no longer waits on. §21.1 dead-letters messages that cannot be
// processed; this one was, and its answer is the task's result. The scheduler's messages that
// nobody took (a permanent delivery failure, retries exhausted, TTL) are still dead letters.
func schedulerOutcome(rec store.MessageRecord) bool {
	return rec.ProducerID == protocol.SchedulerID
}

// ackDecision is what an ACK does to the message it acknowledges.
type ackDecision int

const (
	// ackIgnoredStage: a repeat, or a stage the state cannot move to (ackIgnored).
	ackIgnoredStage ackDecision = iota
	// ackAdvances: the state moves to the stage's and the ACK is forwarded to the producer.
	ackAdvances
	// ackWrongSender: only the message's recipient may acknowledge it.
	ackWrongSender
	// ackLate: the message TIMED_OUT; the ACK is reconciled (§11.1).
	ackLate
	// ackFails: a legal REJECTED or FAILED stage: terminal, NACK and dead letter.
	ackFails
)

// decideAck decides what an ACK of env's producer at state to does to rec.
func decideAck(rec store.MessageRecord, env *commonpb.Envelope, to commonpb.EnvelopeState) ackDecision {
	switch {
	case rec.RecipientID != env.GetProducerId():
		return ackWrongSender
	case rec.State == commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT:
		return ackLate
	case rec.State == to || !protocol.MessageTransitionLegal(rec.State, to):
		return ackIgnoredStage
	case to == commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED || to == commonpb.EnvelopeState_ENVELOPE_STATE_FAILED:
		return ackFails
	}
	return ackAdvances
}

// ackIgnored records an ACK that changes nothing: a repeat, or one behind the state (§11.1:
// terminal states ignore late ACKs for state purposes but audit them).
func (r *Router) ackIgnored(ctx context.Context, rec store.MessageRecord, env *commonpb.Envelope, ack protocol.AckPayload) {
	typ, level := "message.ack_ignored", slog.LevelWarn
	if rec.State == protocol.StateForStage(ack.Stage) {
		typ, level = "message.ack_repeated", slog.LevelInfo
	}
	r.sink.Record(ctx, audit.Event{
		CorrelationID: rec.CorrelationID, Actor: env.GetProducerId(), Type: typ,
		AgentID: rec.ProducerID, MessageID: rec.MessageID, Level: level,
		Details: map[string]any{"ack_stage": ack.Stage.String(), "current_state": rec.State.String(), "state_since": rec.UpdatedAt.UTC().Format(time.RFC3339Nano), "ack_message_id": env.GetMessageId()},
	})
}

// lateAck reconciles an ACK for a TIMED_OUT message (§11.1): the state stays TIMED_OUT and
// the ACK is logged with the timeout's and its own timestamps (rule 1); a completion updates
// the idempotency cache to the earliest successful completion (rule 4); an in-flight retry of
// the same operation is then cancelled if undelivered and answered as DUPLICATE_DETECTED
// (rule 2, App. D C.2).
func (r *Router) lateAck(ctx context.Context, rec store.MessageRecord, env *commonpb.Envelope, ack protocol.AckPayload, to commonpb.EnvelopeState) error {
	late, err := r.st.Messages().RecordLateAck(ctx, rec.MessageID, to, ack.ErrorCode, ack.Note)
	if err != nil {
		return fmt.Errorf("record late ack: %w", err)
	}
	details := map[string]any{"ack_stage": ack.Stage.String(), "timed_out_at": rec.UpdatedAt.UTC().Format(time.RFC3339Nano),
		"late_ack_at": time.Now().UTC().Format(time.RFC3339Nano), "reconciled": late.Reconciled}
	r.sink.Record(ctx, audit.Event{CorrelationID: rec.CorrelationID, Actor: env.GetProducerId(), Type: "message.late_ack",
		AgentID: rec.ProducerID, MessageID: rec.MessageID, Level: slog.LevelWarn, Details: details})
	if !late.Reconciled || late.Entry == nil {
		return nil
	}
	entry := *late.Entry
	r.sink.Record(ctx, audit.Event{CorrelationID: rec.CorrelationID, Actor: protocol.SchedulerID, Type: "idempotency.reconciled",
		AgentID: rec.ProducerID, MessageID: rec.MessageID,
		Details: map[string]any{"key": entry.Key, "original_message_id": entry.OriginalMessageID, "status": entry.TerminalState.String()}})
	retry := entry.LatestMessageID
	if retry == "" || retry == rec.MessageID {
		return nil
	}
	cancelled, err := r.st.Messages().CancelUndelivered(ctx, retry)
	if err != nil {
		return fmt.Errorf("cancel retry: %w", err)
	}
	note := duplicateNote(entry)
	after, applied, err := r.advance(ctx, retry, commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED, commonpb.ErrorCode_DUPLICATE_DETECTED, note, protocol.SchedulerID)
	if err != nil {
		return err
	}
	if !applied {
		return nil // the retry had already ended on its own
	}
	r.sink.Record(ctx, audit.Event{CorrelationID: after.CorrelationID, Actor: protocol.SchedulerID, Type: "idempotency.duplicate",
		AgentID: after.ProducerID, MessageID: retry, Details: map[string]any{"original_message_id": entry.OriginalMessageID, "retry_cancelled_undelivered": cancelled}})
	return r.nack(ctx, after.ProducerID, after.CorrelationID, retry, commonpb.AckStage_REJECTED, commonpb.ErrorCode_DUPLICATE_DETECTED, note)
}

// DuplicateReport is the DUPLICATE_DETECTED answer of §21 and App. D C.2: the original
// attempt, its status, the cached result or error, and when it was cached. It travels as the
// NACK's note and after "duplicate_detected: " in a synchronous rejection.
type DuplicateReport struct {
	// Status is "DUPLICATE_DETECTED".
	Status string `json:"status"`
	// OriginalMessageID is the attempt whose outcome is cached.
	OriginalMessageID string `json:"original_message_id"`
	// OriginalStatus is its terminal state (FULFILLED, REJECTED, FAILED, ...).
	OriginalStatus string `json:"original_status"`
	// ErrorCode is the cached error, if the operation failed.
	ErrorCode string `json:"error_code,omitempty"`
	// CachedResult is the cached result (the completing ACK's note).
	CachedResult string `json:"cached_result,omitempty"`
	// CachedAt is when the outcome was cached.
	CachedAt string `json:"cached_at"`
}

func duplicateNote(e store.IdempotencyEntry) string {
	rep := DuplicateReport{
		Status: "DUPLICATE_DETECTED", OriginalMessageID: e.OriginalMessageID,
		OriginalStatus: trimState(e.TerminalState), CachedResult: e.Result, CachedAt: e.CachedAt.UTC().Format(time.RFC3339),
	}
	if e.ErrorCode != commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
		rep.ErrorCode = e.ErrorCode.String()
	}
	b, _ := json.Marshal(rep)
	return string(b)
}

// trimState renders ENVELOPE_STATE_FULFILLED as FULFILLED, as the RFC's examples do.
func trimState(s commonpb.EnvelopeState) string {
	const prefix = "ENVELOPE_STATE_"
	name := s.String()
	if len(name) > len(prefix) && name[:len(prefix)] == prefix {
		return name[len(prefix):]
	}
	return name
}

// answerFromCache answers a send that the idempotency cache decided (§11.2): the cached
// outcome without re-execution, or ALREADY_IN_PROGRESS. The attempt is recorded by the store,
// linked to the original, and the decision is logged (§19).
func (r *Router) answerFromCache(ctx context.Context, env *commonpb.Envelope, dup *store.DedupError) (*protocol.Error, error) {
	e := dup.Entry
	r.sink.Record(ctx, audit.Event{CorrelationID: env.GetCorrelationId(), Actor: env.GetProducerId(), Type: "idempotency.cache_hit",
		MessageID: env.GetMessageId(), Details: map[string]any{"key": e.Key, "status": e.Status, "original_message_id": e.OriginalMessageID,
			"latest_message_id": e.LatestMessageID, "in_progress": dup.InProgress}})
	var perr *protocol.Error
	switch {
	case dup.InProgress && protocol.SequenceKey(e.Key):
		// Most likely a producer that reuses sequence numbers for new messages: say how
		// to send a new message, not only how to wait.
		perr = protocol.Errorf(commonpb.ErrorCode_ALREADY_IN_PROGRESS, "sequence_number %d with this recipient, type and payload was sent as %s, "+
			"which is in progress, so this is taken for its retry; wait for its outcome (§11.2). A new message needs a new sequence_number "+
			"(monotonic per producer, §11) or its own idempotency_token", env.GetSequenceNumber(), e.LatestMessageID)
	case dup.InProgress:
		perr = protocol.Errorf(commonpb.ErrorCode_ALREADY_IN_PROGRESS, "operation %s is in progress as attempt %s; wait for its outcome (§11.2)", e.Key, e.LatestMessageID)
	default:
		perr = &protocol.Error{Code: commonpb.ErrorCode_DUPLICATE_DETECTED, Msg: duplicateNote(e)}
	}
	if err := r.nack(ctx, env.GetProducerId(), env.GetCorrelationId(), env.GetMessageId(), commonpb.AckStage_REJECTED, perr.Code, perr.Msg); err != nil {
		return nil, err
	}
	return perr, nil
}
