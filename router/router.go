// Package router is the core of the routed message plane (§11–§13, §21): it validates and
// admits envelopes into per-recipient inbound buffers held by the store, applies ACKs to the
// message lifecycle and routes them to the original producer, answers duplicates from the
// idempotency cache, sends NACKs for every rejection it can attribute, enforces ACK timeouts,
// TTLs and response deadlines with a sweep that any number of frontends may run against one
// store, moves what cannot succeed to the dead-letter queue, and feeds each agent's inbound
// stream lane by lane. The gRPC RouterService in frontend/ and the activities that notify
// agents both go through it, so there is one implementation of admission.
//
// Send is a pipeline: validate, resolve the address, run the checks, admit, run the
// reactions (send.go). A pattern that constrains what may be sent adds a check to
// admissionChecks, one that reacts to admitted messages a reaction to admissionReactions,
// and one that lets agents tell the scheduler something an entry to the SchedulerHandlers
// table its bridge installs (SetScheduler); none adds a branch to Send. What the router must
// tell the scheduler's workflows it writes into the outbox as a Notice.
//
// Refusal and failure. A function that can refuse a message returns (*protocol.Error, error):
// the *protocol.Error is a refusal under the spec — an error_code and a note for the
// producer, who also gets a NACK — and the error a failure of the router itself (the store,
// Temporal), which the caller reports as an internal error and may retry. At most one of the
// two is non-nil, and (nil, nil) means accepted. The two are kept apart because a refusal is
// an answer, recorded and audited, while a failure is not: the message may still be admitted
// on a retry.
package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/acl"
	"github.com/sw4rm/sw4rm-temporal/protocol/hlc"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/telemetry"
)

// Defaults of the router's configuration (§11, §13, §20).
const (
	// DefaultBufferCapacity is the inbound buffer size per agent (§13, §20).
	DefaultBufferCapacity = 10
	// DefaultLease is how long a delivered, unconfirmed row waits before it is redelivered on
	// the same stream.
	DefaultLease = 30 * time.Second
	// DefaultAckTimeout is the time a message may stay SENT before it is TIMED_OUT (§11, §20).
	DefaultAckTimeout = 10 * time.Second
	// DefaultMaxRetries is the retry budget: a message TIMED_OUT at this retry_count or more
	// goes to the dead-letter queue (§21.1).
	DefaultMaxRetries = 3
	// DefaultDedupWindow is the idempotency window (§11.2, §20).
	DefaultDedupWindow = store.DefaultDedupWindow
	// DefaultStreamRetention is how long confirmed rows are kept for offset resumption (§5.5).
	DefaultStreamRetention = time.Hour
	// DefaultDLQRetention bounds the dead-letter queue (§21.1).
	DefaultDLQRetention = 7 * 24 * time.Hour
	// DefaultPrivilegedRate and DefaultPrivilegedBurst rate-limit each producer's PRIVILEGED
	// lane; overflow goes to STANDARD (§7.3, §23).
	DefaultPrivilegedRate  = 50.0
	DefaultPrivilegedBurst = 100
	// DefaultSweepInterval is how often the sweep runs.
	DefaultSweepInterval = 250 * time.Millisecond
	// claimBatch bounds how many rows one claim hands to a stream.
	claimBatch = 64
	// pollInterval is the safety net under notifications: lease expiries produce no
	// notification, and a lost notification must not strand a message.
	pollInterval = time.Second
	// starvationAge is the age at which a STANDARD or BULK delivery dispatched behind urgent
	// traffic is warned about (§19).
	starvationAge = 5 * time.Second
)

// DefaultLaneWeights are the weighted-fair shares of PRIVILEGED, STANDARD and BULK (§7.3).
var DefaultLaneWeights = store.LaneWeights{Privileged: 6, Standard: 3, Bulk: 1}

// Config tunes the router.
type Config struct {
	// BufferCapacity is the per-agent inbound buffer size; zero means DefaultBufferCapacity.
	BufferCapacity int
	// Lease is the redelivery lease; zero means DefaultLease.
	Lease time.Duration
	// MaxPayloadBytes is the payload limit; zero means protocol.DefaultMaxPayloadBytes.
	MaxPayloadBytes int
	// AckTimeout is the SENT → TIMED_OUT timeout; zero means DefaultAckTimeout.
	AckTimeout time.Duration
	// MaxRetries is the retry budget; zero means DefaultMaxRetries.
	MaxRetries int
	// DedupWindow is the idempotency window; zero means DefaultDedupWindow.
	DedupWindow time.Duration
	// StreamRetention keeps confirmed rows for resumption; zero means DefaultStreamRetention.
	StreamRetention time.Duration
	// DLQRetention bounds dead letters; zero means DefaultDLQRetention.
	DLQRetention time.Duration
	// AuditRetention, MessageRetention, HandoffRetention, HITLRetention and
	// ToolCallRetention are how long housekeeping keeps finished records of each kind
	// (retention.go); zero means the kind's default, a negative duration keeps them forever.
	AuditRetention, MessageRetention, HandoffRetention, HITLRetention, ToolCallRetention time.Duration
	// PrivilegedRate (messages/s) and PrivilegedBurst limit each producer's PRIVILEGED lane;
	// zero means the defaults.
	PrivilegedRate  float64
	PrivilegedBurst int
	// LaneWeights interleave the lanes on delivery; zero means DefaultLaneWeights.
	LaneWeights store.LaneWeights
	// SweepInterval is how often Run sweeps; zero means DefaultSweepInterval.
	SweepInterval time.Duration
	// ACL is the §6.3 access-control policy checked for every data message (the producer
	// may send its type, the recipient may receive it); nil allows everything.
	ACL *acl.Policy
	// Access logs the ACL's decisions (§6.5, SW4RM_AUDIT_ACCESS); refusals are audited as the
	// message's rejection whatever it says. Nil logs no allowed decision.
	Access *audit.AccessLog
	// Clock is the process's HLC (§4), which stamps every envelope the router admits (hlc.go);
	// nil means the audit sink's, or else a clock of the router's own.
	Clock *hlc.Clock
}

func (c Config) withDefaults() Config {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.BufferCapacity <= 0 {
		c.BufferCapacity = DefaultBufferCapacity
	}
	def(&c.Lease, DefaultLease)
	def(&c.AckTimeout, DefaultAckTimeout)
	def(&c.DedupWindow, DefaultDedupWindow)
	def(&c.StreamRetention, DefaultStreamRetention)
	def(&c.DLQRetention, DefaultDLQRetention)
	// A negative retention keeps its records forever, so only zero takes the default.
	for _, r := range []struct {
		v *time.Duration
		d time.Duration
	}{{&c.AuditRetention, DefaultAuditRetention}, {&c.MessageRetention, DefaultMessageRetention},
		{&c.HandoffRetention, DefaultHandoffRetention}, {&c.HITLRetention, DefaultHITLRetention},
		{&c.ToolCallRetention, DefaultToolCallRetention}} {
		if *r.v == 0 {
			*r.v = r.d
		}
	}
	def(&c.SweepInterval, DefaultSweepInterval)
	if c.MaxRetries <= 0 {
		c.MaxRetries = DefaultMaxRetries
	}
	if c.PrivilegedRate <= 0 {
		c.PrivilegedRate = DefaultPrivilegedRate
	}
	if c.PrivilegedBurst <= 0 {
		c.PrivilegedBurst = DefaultPrivilegedBurst
	}
	if c.LaneWeights == (store.LaneWeights{}) {
		c.LaneWeights = DefaultLaneWeights
	}
	return c
}

// Metrics receives the router's back-pressure observations (§13); nil means none.
type Metrics interface {
	// Rejected counts an admission rejected for agentID with an error code.
	Rejected(agentID string, code commonpb.ErrorCode)
	// Nacked counts a NACK sent to agentID.
	Nacked(agentID string, code commonpb.ErrorCode)
	// Enqueued observes the time from receipt to enqueue.
	Enqueued(agentID string, d time.Duration)
	// Dequeued observes the time from enqueue to a stream's fetch.
	Dequeued(agentID string, d time.Duration, lane commonpb.CommunicationClass)
	// Processed observes the time from enqueue to the consumer's terminal ACK.
	Processed(agentID string, d time.Duration)
	// PrivilegedOverflow counts a PRIVILEGED message demoted to STANDARD.
	PrivilegedOverflow(producerID string)
}

// Router admits, acknowledges and streams messages.
type Router struct {
	st      store.Store
	cfg     Config
	sink    *audit.Sink
	metrics Metrics
	// schedHandlers and schedOutbox are the scheduler's side of the message plane (SetScheduler).
	schedHandlers SchedulerHandlers
	schedOutbox   SchedulerOutbox
	// checks and reactions are Send's steps before and after admission (send.go).
	checks    []check
	reactions []reaction

	limitersMu sync.Mutex
	limiters   map[string]*rate.Limiter
	agents     agentCache
	records    recordCache
	confirms   controlConfirms
	fenceCache fenceCache
	// streams numbers the streams Stream serves, for confirms.
	streams atomic.Uint64
	// clock stamps hlc_timestamp (hlc.go).
	clock *hlc.Clock
}

// New builds a router over a store.
func New(st store.Store, cfg Config, sink *audit.Sink) *Router {
	r := &Router{st: st, cfg: cfg.withDefaults(), sink: sink, limiters: map[string]*rate.Limiter{}}
	r.checks, r.reactions = r.admissionChecks(), r.admissionReactions()
	r.clock = clockFor(cfg.Clock, sink)
	return r
}

// SetMetrics installs the metrics sink; call before serving.
func (r *Router) SetMetrics(m Metrics) { r.metrics = m }

// Config returns the effective configuration.
func (r *Router) Config() Config { return r.cfg }

// answerResent answers a message_id its producer sends again — typically because it lost the
// first answer (a frontend or the store failed after the admission or rejection was written)
// — with the message's recorded state, and never executes it twice (§11.3: a message_id names
// one transmission). A message in flight or FULFILLED is accepted, as it was; one that is
// REJECTED (at admission: buffer_full, already_in_progress, duplicate_detected; or by its
// consumer), FAILED or TIMED_OUT is refused with its recorded error_code and note, and its
// producer is NACKed again with them, since that NACK may be what the producer lost (a
// repeated NACK changes nothing, §11.1). A message_id that names no tracked message of
// this producer (control traffic, another producer's message) is refused as a duplicate
// without saying more.
func (r *Router) answerResent(ctx context.Context, env *commonpb.Envelope, route string) (*protocol.Error, error) {
	id := env.GetMessageId()
	rec, err := r.st.Messages().GetMessage(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && rec.ProducerID != env.GetProducerId()) {
		return r.reject(ctx, env, route, protocol.Errorf(commonpb.ErrorCode_DUPLICATE_DETECTED,
			"message_id %s is already used by another message; every message needs a new message_id (§11.3)", id))
	}
	if err != nil {
		return nil, fmt.Errorf("look up the re-sent message: %w", err)
	}
	details := map[string]any{"state": rec.State.String()}
	if rec.ErrorCode != commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
		details["error_code"] = rec.ErrorCode.String()
	}
	r.sink.Record(ctx, audit.Event{CorrelationID: rec.CorrelationID, Actor: env.GetProducerId(), Type: "message.resent",
		AgentID: rec.RecipientID, MessageID: id, Details: details})
	switch rec.State {
	case commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED, commonpb.EnvelopeState_ENVELOPE_STATE_FAILED, commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT:
	default:
		return nil, nil // in flight or FULFILLED: accepted, the first answer
	}
	code := rec.ErrorCode
	if code == commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
		code = commonpb.ErrorCode_INTERNAL_ERROR // as a NACK without a code is recorded
	}
	perr := protocol.Errorf(code, "message_id %s was sent before and is %s: %s; a retry needs a new message_id (§11.3)",
		id, strings.TrimPrefix(rec.State.String(), "ENVELOPE_STATE_"), rec.Note)
	if err := r.nack(ctx, rec.ProducerID, rec.CorrelationID, id, protocol.StageForState(rec.State), code, perr.Msg); err != nil {
		return nil, err
	}
	return perr, nil
}

// laneFor returns the lane of a producer's messages: its registered communication class,
// with PRIVILEGED rate-limited per producer and its overflow demoted to STANDARD (§7.3).
func (r *Router) laneFor(ctx context.Context, producerID string) commonpb.CommunicationClass {
	rec, err := r.agent(ctx, producerID)
	if err != nil {
		return commonpb.CommunicationClass_STANDARD
	}
	switch class := rec.Descriptor.GetCommunicationClass(); class {
	case commonpb.CommunicationClass_BULK:
		return class
	case commonpb.CommunicationClass_PRIVILEGED:
		if r.limiter(producerID).Allow() {
			return class
		}
		if r.metrics != nil {
			r.metrics.PrivilegedOverflow(producerID)
		}
		r.sink.Record(ctx, audit.Event{Actor: producerID, AgentID: producerID, Type: "router.privileged_overflow", Level: slog.LevelWarn,
			Details: map[string]any{"rate_per_s": r.cfg.PrivilegedRate, "burst": r.cfg.PrivilegedBurst, "demoted_to": "STANDARD"}})
		return commonpb.CommunicationClass_STANDARD
	}
	return commonpb.CommunicationClass_STANDARD
}

func (r *Router) limiter(producerID string) *rate.Limiter {
	r.limitersMu.Lock()
	defer r.limitersMu.Unlock()
	l, ok := r.limiters[producerID]
	if !ok {
		l = rate.NewLimiter(rate.Limit(r.cfg.PrivilegedRate), r.cfg.PrivilegedBurst)
		r.limiters[producerID] = l
	}
	return l
}

// advance applies one lifecycle transition and records it.
func (r *Router) advance(ctx context.Context, messageID string, to commonpb.EnvelopeState, code commonpb.ErrorCode, note, actor string) (store.MessageRecord, bool, error) {
	after, applied, err := r.st.Messages().Advance(ctx, store.Transition{MessageID: messageID, To: to, ErrorCode: code, Note: note}, protocol.MessageTransitionLegal)
	if err != nil {
		return after, false, fmt.Errorf("advance message %s: %w", messageID, err)
	}
	if applied {
		r.recordTransition(ctx, after, to, code, note, actor)
	}
	return after, applied, nil
}

// recordTransition audits an applied lifecycle transition; after is the record after it.
func (r *Router) recordTransition(ctx context.Context, after store.MessageRecord, to commonpb.EnvelopeState, code commonpb.ErrorCode, note, actor string) {
	details := map[string]any{"state": to.String()}
	if code != commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
		details["error_code"] = code.String()
	}
	if note != "" {
		details["note"] = note
	}
	r.sink.Record(ctx, audit.Event{
		CorrelationID: after.CorrelationID, Actor: actor, Type: "message.state",
		AgentID: after.RecipientID, MessageID: after.MessageID, Details: details,
	})
}

// reject records a rejection, sends the NACK (§13: never a silent drop; §21: the NACK names
// the message, the failed stage and the error_code) and dead-letters what cannot succeed
// (§21.1). The NACK goes only to a registered producer with a usable message_id: anyone else
// gets the synchronous answer alone.
func (r *Router) reject(ctx context.Context, env *commonpb.Envelope, route string, perr *protocol.Error) (*protocol.Error, error) {
	r.sink.Record(ctx, audit.Event{
		CorrelationID: env.GetCorrelationId(), Actor: env.GetProducerId(), Type: "message.rejected",
		AgentID: route, MessageID: env.GetMessageId(), Level: slog.LevelWarn,
		Details: map[string]any{"error_code": perr.Code.String(), "reason": perr.Msg},
	})
	if r.metrics != nil {
		r.metrics.Rejected(route, perr.Code)
	}
	if class := admissionDLQClass(perr.Code); class != "" && env.GetMessageType() != commonpb.MessageType_ACKNOWLEDGEMENT {
		if err := r.deadLetter(ctx, deadLetterInput{env: env, route: route, code: perr.Code, class: class, reason: perr.Msg, state: commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED}); err != nil {
			return nil, err
		}
	}
	if env.GetMessageId() == "" || env.GetProducerId() == "" || env.GetMessageType() == commonpb.MessageType_ACKNOWLEDGEMENT {
		return perr, nil // a NACK of an ACK would invite ping-pong; the caller has the answer
	}
	if err := r.nack(ctx, env.GetProducerId(), env.GetCorrelationId(), env.GetMessageId(), commonpb.AckStage_REJECTED, perr.Code, perr.Msg); err != nil {
		return nil, err
	}
	return perr, nil
}

// nack sends a router-originated ACK/NACK to a producer.
func (r *Router) nack(ctx context.Context, producerID, correlationID, messageID string, stage commonpb.AckStage, code commonpb.ErrorCode, note string) error {
	env := nackEnvelope(correlationID, messageID, stage, code, note)
	if code != commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED && r.metrics != nil {
		r.metrics.Nacked(producerID, code)
	}
	return r.deliverControl(ctx, producerID, env)
}

// nackEnvelope builds a router-originated ACK/NACK of messageID.
func nackEnvelope(correlationID, messageID string, stage commonpb.AckStage, code commonpb.ErrorCode, note string) *commonpb.Envelope {
	return protocol.NewAckEnvelope(protocol.AckEnvelopeInput{
		MessageID: uuid.NewString(), ProducerID: protocol.SchedulerID, CorrelationID: correlationID,
		Ack: protocol.AckPayload{AckForMessageID: messageID, Stage: stage, ErrorCode: code, Note: note},
	})
}

// deliverControl puts router control traffic (ACK forwards, NACKs, notifications) into an
// agent's buffer. It is admitted without a capacity, so it neither meets the capacity check
// nor takes a slot (§13: the capacity is about data): a full buffer must not swallow the NACK
// that tells its owner about a rejection, a consumer that has not confirmed its ACKs yet can
// still take a full buffer of data, and this traffic is bounded by what the agent itself
// sent. Control traffic rides the PRIVILEGED lane: it is small and unblocks the
// agent's own work. An agent that is not registered (any more) gets nothing, which is logged.
// ACKs addressed to the scheduler go to its inbox instead (see toSchedulerAck).
func (r *Router) deliverControl(ctx context.Context, agentID string, env *commonpb.Envelope) error {
	c, err := r.prepareControl(ctx, agentID, env)
	if err != nil {
		return err
	}
	if c.admit != nil {
		if _, err := r.st.Messages().Admit(ctx, *c.admit); err != nil {
			return fmt.Errorf("deliver control envelope to %s: %w", agentID, err)
		}
	}
	return r.finishControl(ctx, c)
}

// control is one piece of router control traffic prepared by prepareControl: the admission
// to make, if any, and what finishControl does once it is made. Splitting the two lets the
// admission join a store step (Step.FollowUp), in the transaction of the transition it
// reports.
type control struct {
	agentID string
	env     *commonpb.Envelope
	// admit is the admission into agentID's buffer; nil when there is none to make.
	admit *store.AdmitRequest
	// toScheduler marks an ACK for the scheduler, handed to its inbox instead.
	toScheduler bool
	// handoff carries a toScheduler ACK to the agent's lifecycle workflow; written with the
	// step the ACK reports (see withSchedulerEntry), nil when the ACK came without one.
	outbox *store.OutboxEntry
}

// prepareControl decides how deliverControl delivers env to agentID. It only reads (the
// registry, through the cache), so it may run inside a store's PlanFunc.
func (r *Router) prepareControl(ctx context.Context, agentID string, env *commonpb.Envelope) (control, error) {
	c := control{agentID: agentID, env: env}
	if agentID == protocol.SchedulerID && env.GetMessageType() == commonpb.MessageType_ACKNOWLEDGEMENT {
		c.toScheduler = true
		return c, nil
	}
	if _, err := r.agent(ctx, agentID); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return c, nil // not registered: finishControl logs it
		}
		return c, fmt.Errorf("look up control recipient: %w", err)
	}
	env = proto.Clone(env).(*commonpb.Envelope)
	env.State = commonpb.EnvelopeState_ENVELOPE_STATE_SENT
	r.stampControl(env)
	if env.GetMessageType() == commonpb.MessageType_ACKNOWLEDGEMENT && env.GetProducerId() != protocol.SchedulerID {
		// A forwarded ACK keeps the acknowledging agent as producer, but the copy placed in the
		// producer's buffer needs its own message_id: the acknowledging agent's ACK has one
		// already, and every stored row must be unique (§11.3: unique per transmission).
		env.MessageId = uuid.NewString()
	}
	// The span in ctx (an "ack", a "confirm") is the trace the control envelope's delivery joins.
	c.admit = &store.AdmitRequest{Envelope: env, RecipientID: agentID, Lane: commonpb.CommunicationClass_PRIVILEGED,
		TraceParent: telemetry.TraceParent(ctx)}
	return c, nil
}

// finishControl completes a delivery prepared by prepareControl once its admission, if any,
// was made: a scheduler ACK goes to the inbox, and an agent that is not registered is logged.
func (r *Router) finishControl(ctx context.Context, c control) error {
	switch {
	case c.toScheduler && c.outbox != nil:
		r.deliverEntry(ctx, *c.outbox)
	case c.toScheduler:
		return r.toSchedulerAck(ctx, c.env)
	case c.admit == nil:
		r.sink.Record(ctx, audit.Event{
			CorrelationID: c.env.GetCorrelationId(), Actor: protocol.SchedulerID, Type: "message.control_undeliverable",
			AgentID: c.agentID, MessageID: c.env.GetMessageId(), Level: slog.LevelWarn,
			Details: map[string]any{"reason": "agent not registered", "message_type": c.env.GetMessageType().String()},
		})
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

// Announcement is one envelope NotifyAll sends to one agent.
type Announcement struct {
	// AgentID is the recipient.
	AgentID string
	// Envelope is sent as Notify sends it (a copy, from the scheduler).
	Envelope *commonpb.Envelope
}

// NotifyAll sends every announcement as Notify would and admits them together
// (store.MessagePlane.AdmitBatch: one transaction and one commit on PostgreSQL), so a fan-out
// to N agents costs one write instead of N; announcements to one agent keep their order. It
// returns one error per announcement, nil when it was delivered or, its agent not being registered,
// logged as undeliverable (as Notify does).
func (r *Router) NotifyAll(ctx context.Context, notices []Announcement) []error {
	errs := make([]error, len(notices))
	cs := make([]control, len(notices))
	var (
		reqs []store.AdmitRequest
		at   []int // at[j] is the announcement of reqs[j]
	)
	for i, n := range notices {
		env := proto.Clone(n.Envelope).(*commonpb.Envelope)
		env.ProducerId = protocol.SchedulerID
		if cs[i], errs[i] = r.prepareControl(ctx, n.AgentID, env); errs[i] == nil && cs[i].admit != nil {
			reqs = append(reqs, *cs[i].admit)
			at = append(at, i)
		}
	}
	if len(reqs) > 0 {
		for j, res := range r.st.Messages().AdmitBatch(ctx, reqs) {
			if res.Err != nil {
				errs[at[j]] = fmt.Errorf("deliver control envelope to %s: %w", notices[at[j]].AgentID, res.Err)
			}
		}
	}
	for i := range notices {
		if errs[i] == nil {
			errs[i] = r.finishControl(ctx, cs[i])
		}
	}
	return errs
}

// ConfirmDelivery handles RouterService.AckDelivery: it confirms the stream row, which frees
// its buffer slot, and moves a tracked message from SENT to RECEIVED (the consumer has it)
// or, for a permanent failure, to FAILED — telling the producer in both cases.
//
// The confirmation, the move to RECEIVED and the producer's ACK RECEIVED are one store step
// (MessagePlane.ConfirmAndAdvance): written in one transaction, or not at all.
//
// With tracing on it is the span "confirm", under the `traceparent` the consumer sent.
func (r *Router) ConfirmDelivery(ctx context.Context, agentID string, seq int64, messageID string, permanentFailure bool) (bool, error) {
	if permanentFailure {
		r.confirms.drop(agentID, seq)
	} else if handled, recorded := r.confirms.take(agentID, seq, messageID); handled {
		// Control traffic this frontend delivered: written behind, and no step of a message's
		// life worth a span.
		return recorded, nil
	}
	if !telemetry.Enabled() {
		return r.confirmDelivery(ctx, agentID, seq, messageID, permanentFailure)
	}
	ctx, span := startSpan(ctx, "confirm", trace.SpanKindConsumer, attrSystem.String("sw4rm"), attrOperation.String("settle"),
		attrMessageID.String(messageID), attrDestination.String(agentID), attrSeq.Int64(seq))
	recorded, err := r.confirmDelivery(ctx, agentID, seq, messageID, permanentFailure)
	endSpan(span, nil, err)
	return recorded, err
}

// confirmDelivery is ConfirmDelivery of a row the store confirms.
func (r *Router) confirmDelivery(ctx context.Context, agentID string, seq int64, messageID string, permanentFailure bool) (bool, error) {
	note := "delivery confirmed by " + agentID
	var ack control // the producer's ACK RECEIVED, as the plan that was written prepared it
	req := store.ConfirmRequest{AgentID: agentID, Seq: seq, MessageID: messageID, Plan: func(rec store.MessageRecord) (*store.Step, error) {
		ack = control{}
		// SENT → RECEIVED is the only legal move to RECEIVED: if the consumer's own ACK got
		// there first, or the message timed out, nothing changes.
		if permanentFailure || !followsDelivery(rec.Envelope) ||
			!protocol.MessageTransitionLegal(rec.State, commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED) {
			return nil, nil
		}
		received := nackEnvelope(rec.CorrelationID, rec.MessageID, commonpb.AckStage_RECEIVED, 0, note)
		c, err := r.prepareControl(ctx, rec.ProducerID, received)
		if err != nil {
			return nil, err
		}
		if c, err = r.withSchedulerEntry(c, rec, protocol.AckPayload{AckForMessageID: rec.MessageID, Stage: commonpb.AckStage_RECEIVED, Note: note}); err != nil {
			return nil, err
		}
		ack = c
		return &store.Step{To: commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, Note: note, FollowUp: c.admit, Outbox: c.outbox}, nil
	}}
	if messageID != "" && !permanentFailure {
		req.Known = r.records.recall(messageID)
	}
	res, err := r.st.Messages().ConfirmAndAdvance(ctx, req)
	if err != nil || !res.Confirmed {
		return res.Confirmed, err
	}
	if !res.Tracked || !followsDelivery(res.Record.Envelope) {
		return true, nil // control traffic is not tracked; the scheduler's CONTROL messages are (see SendControl)
	}
	linkMessage(ctx, res.Record)
	r.records.remember(res.Record)
	if permanentFailure {
		return true, r.consumerFailed(ctx, res.Record, commonpb.EnvelopeState_ENVELOPE_STATE_FAILED, commonpb.ErrorCode_INTERNAL_ERROR,
			"consumer "+agentID+" reported a permanent delivery failure", agentID, true)
	}
	if !res.Applied {
		return true, nil
	}
	r.recordTransition(ctx, res.Record, commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, 0, note, agentID)
	return true, r.finishControl(ctx, ack)
}

// followsDelivery reports whether a delivered message's lifecycle follows its delivery
// confirmation: not for control traffic (ACKs, the scheduler's notifications), which is not
// tracked, but for the scheduler's CONTROL messages, which are (see SendControl).
func followsDelivery(env *commonpb.Envelope) bool {
	return env.GetMessageType() != commonpb.MessageType_ACKNOWLEDGEMENT &&
		(env.GetProducerId() != protocol.SchedulerID || env.GetMessageType() == commonpb.MessageType_CONTROL)
}

// consumerFailed applies a consumer's terminal failure of a message, tells the producer and,
// with deadLetter, dead-letters the message (§21.1: a terminal error means it cannot succeed).
func (r *Router) consumerFailed(ctx context.Context, rec store.MessageRecord, to commonpb.EnvelopeState, code commonpb.ErrorCode, note, actor string, deadLetter bool) error {
	after, applied, err := r.advance(ctx, rec.MessageID, to, code, note, actor)
	if err != nil || !applied {
		return err
	}
	// Dead-letter first: a producer that hears of the failure finds the message in the DLQ.
	if deadLetter {
		if err := r.deadLetter(ctx, deadLetterInput{env: after.Envelope, route: rec.RecipientID, code: code, class: store.DLQTerminalError,
			reason: note, state: to, firstSeen: rec.CreatedAt}); err != nil {
			return err
		}
	}
	return r.nack(ctx, rec.ProducerID, rec.CorrelationID, rec.MessageID, protocol.StageForState(to), code, note)
}

// Stream feeds agentID's inbound buffer to send until ctx ends or send fails. On open, rows a
// previous stream received but never confirmed become deliverable again (wire contract:
// redelivered on the consumer's next stream), after applying the consumer's resume offset
// when it gives one (§5.5); rows unconfirmed past the lease are redelivered on the same
// stream. Lanes are interleaved by weighted round robin (§7.3).
func (r *Router) Stream(ctx context.Context, agentID string, resumeAfter *int64, send func(store.Delivery) error) error {
	msgs := r.st.Messages()
	wake, cancel := msgs.Subscribe(ctx, agentID)
	defer cancel()
	if resumeAfter != nil {
		if err := msgs.ResumeAfter(ctx, agentID, *resumeAfter); err != nil {
			var expired *store.PositionExpiredError
			switch {
			case errors.As(err, &expired):
				return &ResumeError{Offset: *resumeAfter, Horizon: expired.Horizon}
			case errors.Is(err, store.ErrInvalidPosition):
				return &ResumeError{Offset: *resumeAfter, Invalid: true}
			}
			return fmt.Errorf("resume: %w", err)
		}
	}
	// Confirmations answered but not yet written must not be undone by the release.
	r.confirms.flush(ctx, msgs)
	if err := msgs.ReleaseLeases(ctx, agentID); err != nil {
		return fmt.Errorf("release leases: %w", err)
	}
	stream := r.streams.Add(1)
	defer r.confirms.forget(stream)
	// Attached only after the release, which would otherwise hand a row over and then make
	// it claimable again: rows admitted from now on while nothing else is deliverable come
	// straight to this stream, leased, with no claim and no wake-up.
	inbox, detach := msgs.Attach(agentID, r.cfg.Lease)
	defer detach()
	deliver := func(batch []store.Delivery) error {
		r.observeDispatch(ctx, agentID, batch)
		for _, d := range batch {
			if followsDelivery(d.Envelope) {
				r.records.guess(agentID, d.Envelope)
			} else {
				r.confirms.track(stream, agentID, d)
			}
		}
		for _, d := range batch {
			if err := send(d); err != nil {
				return err
			}
		}
		return nil
	}
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		// Rows handed over before the claim precede what it finds, which came later.
		if err := deliver(inbox.Take()); err != nil {
			return err
		}
		batch, err := msgs.Claim(ctx, store.ClaimRequest{AgentID: agentID, Limit: claimBatch, Lease: r.cfg.Lease, Weights: r.cfg.LaneWeights})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("claim deliveries: %w", err)
		}
		if err := deliver(batch); err != nil {
			return err
		}
		if len(batch) == claimBatch {
			continue // more may be waiting
		}
		// Wait for a wake-up or the poll, delivering whatever is handed over meanwhile: a
		// handed row was admitted when nothing else was deliverable, so it needs no claim.
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-inbox.Ready():
				if err := deliver(inbox.Take()); err != nil {
					return err
				}
			case <-wake:
				waiting = false
			case <-ticker.C:
				waiting = false
			}
		}
	}
}

// observeDispatch flags urgent-lane dispatches and warns of starvation risk (§19, §7.3).
func (r *Router) observeDispatch(ctx context.Context, agentID string, batch []store.Delivery) {
	urgent := 0
	var oldestOther time.Duration
	now := time.Now()
	for _, d := range batch {
		age := now.Sub(d.EnqueuedAt)
		if r.metrics != nil {
			r.metrics.Dequeued(agentID, age, d.Lane)
		}
		if d.Lane == commonpb.CommunicationClass_PRIVILEGED && d.Envelope.GetProducerId() != protocol.SchedulerID {
			urgent++
		} else if d.Lane != commonpb.CommunicationClass_PRIVILEGED && age > oldestOther {
			oldestOther = age
		}
	}
	if urgent > 0 {
		slog.Default().Debug("urgent-lane dispatch", "agent_id", agentID, "urgent", urgent, "batch", len(batch))
	}
	if urgent > 0 && oldestOther > starvationAge {
		r.sink.Record(ctx, audit.Event{Actor: protocol.SchedulerID, AgentID: agentID, Type: "router.starvation_risk", Level: slog.LevelWarn,
			Details: map[string]any{"urgent_in_batch": urgent, "oldest_non_urgent_age_s": oldestOther.Seconds()}})
	}
}

// ResumeError is a resume offset the stream cannot honour (§5.5).
type ResumeError struct {
	// Offset is the requested position.
	Offset int64
	// Horizon is the highest pruned seq when the position expired.
	Horizon int64
	// Invalid marks an offset beyond the stream.
	Invalid bool
}

// Error says what went wrong and how to recover.
func (e *ResumeError) Error() string {
	if e.Invalid {
		return fmt.Sprintf("resume position %d is beyond the last seq ever delivered; reconnect without sw4rm-resume-after", e.Offset)
	}
	return fmt.Sprintf("resume position %d expired: confirmed rows up to seq %d were pruned after the retention window; "+
		"reconnect without sw4rm-resume-after to receive every unconfirmed message (unconfirmed rows are never pruned), or resume from %d", e.Offset, e.Horizon, e.Horizon)
}

// originalOf names a request's logical operation for the response token: its idempotency
// token, which every attempt shares.
func originalOf(rec store.MessageRecord) string {
	if t := rec.Envelope.GetIdempotencyToken(); t != "" {
		return t
	}
	return rec.MessageID
}

// recordCache remembers, for a while, the last record of the messages this frontend streamed
// or moved on, so that a message's next step can be planned on it without the store reading
// the record first (store.ConfirmRequest.Known, store.StepRequest.Known). An entry is only a
// guess — the store writes a step planned on it only if the message is still in its state,
// and decides again on the stored record otherwise — so a stale or missing entry costs a read,
// never a wrong decision. An entry keeps of the envelope only what the router's plans read
// (message_id, producer, correlation, type; never the payload), ends with the message's
// terminal state or after recordCacheTTL, and the cache is bounded like the agent cache.
type recordCache struct {
	mu      sync.Mutex
	entries map[string]cachedRecord
	swept   time.Time // when expired entries were last removed
}

type cachedRecord struct {
	rec  store.MessageRecord
	seen time.Time
}

const (
	recordCacheTTL = 5 * time.Minute
	recordCacheMax = 50_000
)

// remember stores a record the store returned, or forgets the message once it is terminal.
func (c *recordCache) remember(rec store.MessageRecord) {
	if protocol.MessageStateTerminal(rec.State) {
		c.forget(rec.MessageID)
		return
	}
	rec.Envelope = planFields(rec.Envelope)
	c.put(rec, true)
}

// guess stores what a stream's delivery of a tracked message tells: its record as admitted
// (SENT, to agentID), unless a record of the message is remembered already.
func (c *recordCache) guess(agentID string, env *commonpb.Envelope) {
	c.put(store.MessageRecord{
		MessageID: env.GetMessageId(), ProducerID: env.GetProducerId(), RecipientID: agentID,
		CorrelationID: env.GetCorrelationId(), MessageType: env.GetMessageType(),
		State: commonpb.EnvelopeState_ENVELOPE_STATE_SENT, Envelope: planFields(env),
	}, false)
}

// planFields copies the envelope fields the router's plans read.
func planFields(env *commonpb.Envelope) *commonpb.Envelope {
	return &commonpb.Envelope{MessageId: env.GetMessageId(), ProducerId: env.GetProducerId(),
		CorrelationId: env.GetCorrelationId(), MessageType: env.GetMessageType()}
}

func (c *recordCache) put(rec store.MessageRecord, replace bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[rec.MessageID]; ok && !replace {
		return
	}
	now := time.Now()
	// Entries that are never recalled (the message ended on another frontend) would stay
	// until the crude bound below: a soak saw a frontend's heap grow by a megabyte a minute.
	// Removing the expired ones once per fraction of the TTL keeps the cache at what the TTL
	// covers, for a pass over the map a few times per TTL.
	if now.Sub(c.swept) > recordCacheTTL/4 {
		for id, e := range c.entries {
			if now.Sub(e.seen) > recordCacheTTL {
				delete(c.entries, id)
			}
		}
		c.swept = now
	}
	if c.entries == nil || len(c.entries) >= recordCacheMax {
		c.entries = map[string]cachedRecord{} // crude bound; a miss only costs a read
	}
	c.entries[rec.MessageID] = cachedRecord{rec: rec, seen: now}
}

// recall returns the remembered record of a message, or nil.
func (c *recordCache) recall(messageID string) *store.MessageRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[messageID]
	if !ok {
		return nil
	}
	if time.Since(e.seen) > recordCacheTTL {
		delete(c.entries, messageID)
		return nil
	}
	rec := e.rec
	return &rec
}

func (c *recordCache) forget(messageID string) {
	c.mu.Lock()
	delete(c.entries, messageID)
	c.mu.Unlock()
}
