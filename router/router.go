// Package router is the core of the routed message plane (§11–§13): it validates and
// admits envelopes into per-recipient inbound buffers held by the store, applies ACKs to the
// message lifecycle and routes them to the original producer, sends NACKs for every
// rejection it can attribute, and feeds each agent's inbound stream. The gRPC RouterService
// in frontend/ and the activities that notify agents both go through it, so there is one
// implementation of admission.
package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/observe"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// Defaults of the router's configuration (§13, §20).
const (
	// DefaultBufferCapacity is the inbound buffer size per agent (§13, §20).
	DefaultBufferCapacity = 10
	// DefaultLease is how long a delivered, unconfirmed row waits before it is redelivered on
	// the same stream.
	DefaultLease = 30 * time.Second
	// claimBatch bounds how many rows one claim hands to a stream.
	claimBatch = 64
	// pollInterval is the safety net under notifications: lease expiries produce no
	// notification, and a lost notification must not strand a message.
	pollInterval = time.Second
)

// Config tunes the router.
type Config struct {
	// BufferCapacity is the per-agent inbound buffer size; zero means DefaultBufferCapacity.
	BufferCapacity int
	// Lease is the redelivery lease; zero means DefaultLease.
	Lease time.Duration
	// MaxPayloadBytes is the payload limit; zero means protocol.DefaultMaxPayloadBytes.
	MaxPayloadBytes int
}

// Router admits, acknowledges and streams messages.
type Router struct {
	st   store.Store
	cfg  Config
	sink *observe.Sink
}

// New builds a router over a store.
func New(st store.Store, cfg Config, sink *observe.Sink) *Router {
	if cfg.BufferCapacity <= 0 {
		cfg.BufferCapacity = DefaultBufferCapacity
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	return &Router{st: st, cfg: cfg, sink: sink}
}

// Config returns the effective configuration.
func (r *Router) Config() Config { return r.cfg }

// Send admits one envelope from a producer. recipient is the addressing metadata (see
// protocol.RecipientMetadataKey). A protocol rejection comes back as a *protocol.Error with
// the spec's error_code — the producer also receives a NACK envelope when it is a registered
// agent — while a failure of the store comes back as a plain error.
func (r *Router) Send(ctx context.Context, env *commonpb.Envelope, recipient string) (*protocol.Error, error) {
	if perr := protocol.ValidateEnvelope(env, protocol.Limits{MaxPayloadBytes: r.cfg.MaxPayloadBytes}); perr != nil {
		return r.reject(ctx, env, perr)
	}
	env = proto.Clone(env).(*commonpb.Envelope)
	// The lifecycle state is the server's to keep; whatever the producer put there is replaced.
	env.State = commonpb.EnvelopeState_ENVELOPE_STATE_SENT
	route, perr := protocol.Resolve(env, recipient)
	if perr != nil {
		return r.reject(ctx, env, perr)
	}
	if route.AckFor != "" {
		return r.applyAck(ctx, env)
	}
	agent, err := r.st.Registry().GetAgent(ctx, route.Recipient)
	if errors.Is(err, store.ErrNotFound) {
		return r.reject(ctx, env, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "recipient %q is not a registered agent", route.Recipient))
	}
	if err != nil {
		return nil, fmt.Errorf("look up recipient: %w", err)
	}
	if len(env.GetPayload()) > 0 && !protocol.AcceptsContentType(agent.Descriptor.GetModalitiesSupported(), env.GetContentType()) {
		return r.reject(ctx, env, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR,
			"content_type %q is not among the modalities agent %q declared %v (§12)", env.GetContentType(), route.Recipient, agent.Descriptor.GetModalitiesSupported()))
	}
	seq, err := r.st.Messages().Admit(ctx, store.AdmitRequest{
		Envelope: env, RecipientID: route.Recipient, Capacity: r.cfg.BufferCapacity, Track: true,
	})
	switch {
	case errors.Is(err, store.ErrBufferFull):
		return r.reject(ctx, env, protocol.Errorf(commonpb.ErrorCode_BUFFER_FULL,
			"inbound buffer capacity (%d) exceeded for agent=%s (§13)", r.cfg.BufferCapacity, route.Recipient))
	case errors.Is(err, store.ErrDuplicateMessage):
		return r.reject(ctx, env, protocol.Errorf(commonpb.ErrorCode_DUPLICATE_DETECTED,
			"message_id %s was already admitted; a retry needs a new message_id (§11.3)", env.GetMessageId()))
	case err != nil:
		return nil, fmt.Errorf("admit message: %w", err)
	}
	r.sink.Record(ctx, observe.Event{
		CorrelationID: env.GetCorrelationId(), Actor: env.GetProducerId(), Type: "message.admitted",
		AgentID: route.Recipient, MessageID: env.GetMessageId(),
		Details: map[string]any{"seq": seq, "state": "SENT", "message_type": env.GetMessageType().String(), "content_type": env.GetContentType(), "content_length": env.GetContentLength()},
	})
	return nil, nil
}

// applyAck advances the acknowledged message and routes the ACK to its producer (§11,
// wire contract: ACKs travel as ordinary envelopes).
func (r *Router) applyAck(ctx context.Context, env *commonpb.Envelope) (*protocol.Error, error) {
	ack, perr := protocol.ParseAck(env)
	if perr != nil {
		return r.reject(ctx, env, perr)
	}
	rec, err := r.st.Messages().GetMessage(ctx, ack.AckForMessageID)
	if errors.Is(err, store.ErrNotFound) {
		return r.reject(ctx, env, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "ack_for_message_id %s names no message this router admitted", ack.AckForMessageID))
	}
	if err != nil {
		return nil, fmt.Errorf("look up acknowledged message: %w", err)
	}
	if rec.RecipientID != env.GetProducerId() {
		return r.reject(ctx, env, protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED,
			"only the recipient %q may acknowledge message %s, not %q", rec.RecipientID, rec.MessageID, env.GetProducerId()))
	}
	after, applied, err := r.advance(ctx, rec.MessageID, protocol.StateForStage(ack.Stage), ack.ErrorCode, ack.Note, env.GetProducerId())
	if err != nil {
		return nil, err
	}
	if !applied {
		// §11.1: a late or repeated ACK never changes the state, but it is recorded.
		r.sink.Record(ctx, observe.Event{
			CorrelationID: rec.CorrelationID, Actor: env.GetProducerId(), Type: "message.ack_ignored",
			AgentID: rec.ProducerID, MessageID: rec.MessageID, Level: slog.LevelWarn,
			Details: map[string]any{"ack_stage": ack.Stage.String(), "current_state": after.State.String(), "state_since": after.UpdatedAt.UTC().Format(time.RFC3339Nano), "ack_message_id": env.GetMessageId()},
		})
		return nil, nil
	}
	if err := r.deliverControl(ctx, rec.ProducerID, env); err != nil {
		return nil, err
	}
	return nil, nil
}

// advance applies one lifecycle transition and records it.
func (r *Router) advance(ctx context.Context, messageID string, to commonpb.EnvelopeState, code commonpb.ErrorCode, note, actor string) (store.MessageRecord, bool, error) {
	after, applied, err := r.st.Messages().Advance(ctx, store.Transition{MessageID: messageID, To: to, ErrorCode: code, Note: note}, protocol.MessageTransitionLegal)
	if err != nil {
		return after, false, fmt.Errorf("advance message %s: %w", messageID, err)
	}
	if applied {
		details := map[string]any{"state": to.String()}
		if code != commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
			details["error_code"] = code.String()
		}
		if note != "" {
			details["note"] = note
		}
		r.sink.Record(ctx, observe.Event{
			CorrelationID: after.CorrelationID, Actor: actor, Type: "message.state",
			AgentID: after.RecipientID, MessageID: messageID, Details: details,
		})
	}
	return after, applied, nil
}

// reject records a rejection and sends the NACK (§13: never a silent drop; §21: the NACK
// names the message, the failed stage and the error_code). The NACK goes only to a registered
// producer with a usable message_id: anyone else gets the synchronous answer alone.
func (r *Router) reject(ctx context.Context, env *commonpb.Envelope, perr *protocol.Error) (*protocol.Error, error) {
	r.sink.Record(ctx, observe.Event{
		CorrelationID: env.GetCorrelationId(), Actor: env.GetProducerId(), Type: "message.rejected",
		MessageID: env.GetMessageId(), Level: slog.LevelWarn,
		Details: map[string]any{"error_code": perr.Code.String(), "reason": perr.Msg},
	})
	if env.GetMessageId() == "" || env.GetProducerId() == "" || env.GetMessageType() == commonpb.MessageType_ACKNOWLEDGEMENT {
		return perr, nil // a NACK of an ACK would invite ping-pong; the caller has the answer
	}
	if _, err := r.st.Registry().GetAgent(ctx, env.GetProducerId()); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return perr, nil
		}
		return nil, fmt.Errorf("look up producer for NACK: %w", err)
	}
	nack := protocol.NewAckEnvelope(protocol.AckEnvelopeInput{
		MessageID: uuid.NewString(), ProducerID: protocol.SchedulerID, CorrelationID: env.GetCorrelationId(),
		Ack: protocol.AckPayload{AckForMessageID: env.GetMessageId(), Stage: commonpb.AckStage_REJECTED, ErrorCode: perr.Code, Note: perr.Msg},
	})
	if err := r.deliverControl(ctx, env.GetProducerId(), nack); err != nil {
		return nil, err
	}
	return perr, nil
}

// deliverControl puts router control traffic (ACK forwards, NACKs, notifications) into an
// agent's buffer. It bypasses the capacity check on purpose: a full buffer must not swallow
// the NACK that tells its owner about a rejection, and this traffic is bounded by what the
// agent itself sent. An agent that is not registered (any more) gets nothing, which is logged.
func (r *Router) deliverControl(ctx context.Context, agentID string, env *commonpb.Envelope) error {
	if _, err := r.st.Registry().GetAgent(ctx, agentID); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			r.sink.Record(ctx, observe.Event{
				CorrelationID: env.GetCorrelationId(), Actor: protocol.SchedulerID, Type: "message.control_undeliverable",
				AgentID: agentID, MessageID: env.GetMessageId(), Level: slog.LevelWarn,
				Details: map[string]any{"reason": "agent not registered", "message_type": env.GetMessageType().String()},
			})
			return nil
		}
		return fmt.Errorf("look up control recipient: %w", err)
	}
	env = proto.Clone(env).(*commonpb.Envelope)
	env.State = commonpb.EnvelopeState_ENVELOPE_STATE_SENT
	if env.GetMessageType() == commonpb.MessageType_ACKNOWLEDGEMENT && env.GetProducerId() != protocol.SchedulerID {
		// A forwarded ACK keeps the acknowledging agent as producer, but the copy placed in the
		// producer's buffer needs its own message_id: the acknowledging agent's ACK has one
		// already, and every stored row must be unique (§11.3: unique per transmission).
		env.MessageId = uuid.NewString()
	}
	if _, err := r.st.Messages().Admit(ctx, store.AdmitRequest{Envelope: env, RecipientID: agentID}); err != nil {
		return fmt.Errorf("deliver control envelope to %s: %w", agentID, err)
	}
	return nil
}

// Notify delivers a server-originated envelope (for example a registry NOTIFICATION) to an
// agent. The caller sets message_id, correlation_id, type and payload; producer_id becomes
// the scheduler's.
func (r *Router) Notify(ctx context.Context, agentID string, env *commonpb.Envelope) error {
	env = proto.Clone(env).(*commonpb.Envelope)
	env.ProducerId = protocol.SchedulerID
	return r.deliverControl(ctx, agentID, env)
}

// ConfirmDelivery handles RouterService.AckDelivery: it confirms the stream row, which frees
// its buffer slot, and moves a tracked message from SENT to RECEIVED (the consumer has it)
// or, for a permanent failure, to FAILED — telling the producer in both cases.
func (r *Router) ConfirmDelivery(ctx context.Context, agentID string, seq int64, messageID string, permanentFailure bool) (bool, error) {
	d, ok, err := r.st.Messages().Confirm(ctx, agentID, seq, messageID)
	if err != nil || !ok {
		return ok, err
	}
	rec, err := r.st.Messages().GetMessage(ctx, d.Envelope.GetMessageId())
	if errors.Is(err, store.ErrNotFound) {
		return true, nil // control traffic is not tracked
	}
	if err != nil {
		return true, fmt.Errorf("look up confirmed message: %w", err)
	}
	to, code, note := commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED, "delivery confirmed by "+agentID
	if permanentFailure {
		to, code, note = commonpb.EnvelopeState_ENVELOPE_STATE_FAILED, commonpb.ErrorCode_INTERNAL_ERROR, "consumer "+agentID+" reported a permanent delivery failure"
	}
	if rec.State != commonpb.EnvelopeState_ENVELOPE_STATE_SENT {
		return true, nil // the consumer's own ACK envelope got there first
	}
	_, applied, err := r.advance(ctx, rec.MessageID, to, code, note, agentID)
	if err != nil || !applied {
		return true, err
	}
	ackEnv := protocol.NewAckEnvelope(protocol.AckEnvelopeInput{
		MessageID: uuid.NewString(), ProducerID: protocol.SchedulerID, CorrelationID: rec.CorrelationID,
		Ack: protocol.AckPayload{AckForMessageID: rec.MessageID, Stage: protocol.StageForState(to), ErrorCode: code, Note: note},
	})
	return true, r.deliverControl(ctx, rec.ProducerID, ackEnv)
}

// Stream feeds agentID's inbound buffer to send until ctx ends or send fails. On open, rows a
// previous stream received but never confirmed become deliverable again (wire contract:
// redelivered on the consumer's next stream); rows unconfirmed past the lease are redelivered
// on the same stream.
func (r *Router) Stream(ctx context.Context, agentID string, send func(store.Delivery) error) error {
	msgs := r.st.Messages()
	wake, cancel := msgs.Subscribe(ctx, agentID)
	defer cancel()
	if err := msgs.ReleaseLeases(ctx, agentID); err != nil {
		return fmt.Errorf("release leases: %w", err)
	}
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		batch, err := msgs.Claim(ctx, agentID, claimBatch, r.cfg.Lease)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("claim deliveries: %w", err)
		}
		for _, d := range batch {
			if err := send(d); err != nil {
				return err
			}
		}
		if len(batch) == claimBatch {
			continue // more may be waiting
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		case <-ticker.C:
		}
	}
}
