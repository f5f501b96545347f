package router

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/telemetry"
)

// sending is one envelope on its way through Send: what the checks learn about it, and what
// its admission writes and its reactions need.
type sending struct {
	// received is when Send took the envelope, for its TTL and the enqueue latency.
	received time.Time
	// env is the producer's envelope, cloned: the checks may set its idempotency token.
	env *commonpb.Envelope
	// recipient is the addressing metadata Send was given.
	recipient string
	// route is where the envelope goes; routeErr is protocol.Resolve's refusal, which holds
	// unless the envelope is a response (a response routes by in_response_to, 004 §3).
	route    protocol.Route
	routeErr *protocol.Error
	// routed is set once route.Recipient is final: refusals are then recorded against it,
	// before against the addressing metadata.
	routed bool
	// link is the envelope's request/response linkage (004), and request the request a
	// response answers.
	link    protocol.Linkage
	request store.MessageRecord
	// agent is the recipient's registration.
	agent store.AgentRecord
	// event is the event the envelope delivers to a DAG run, if any, and eventEntry the
	// outbox entry that carries it (event.go).
	event      *RunEvent
	eventEntry store.OutboxEntry
	// outbox holds the outbox entries written in the admission's transaction.
	outbox []store.OutboxEntry
}

// rejectRoute is the route a refusal of s is recorded against.
func (s *sending) rejectRoute() string {
	if s.routed {
		return s.route.Recipient
	}
	return s.recipient
}

// check is one of Send's checks before admission. It refuses the envelope with a
// *protocol.Error or fails with an error (see the package doc), and may note in s what it
// learnt for the checks after it, the admission and the reactions.
type check func(ctx context.Context, s *sending) (*protocol.Error, error)

// reaction is one of Send's steps after an admission; an error is a failure, never a
// refusal: the message is admitted.
type reaction func(ctx context.Context, s *sending) error

// admissionChecks are Send's checks in the order they run; the first refusal wins, so the
// order decides which error_code a message that breaks two rules gets. A pattern that
// constrains what may be sent adds an entry here, in its own file.
func (r *Router) admissionChecks() []check {
	return []check{
		r.checkFence,     // the producer handed the correlation away (§17.6, fence.go)
		r.checkWorktree,  // the producer names a worktree it is not bound to (§6.4, worktree.go)
		parseLinkage,     // the request/response parameters of content_type (004)
		r.checkEvent,     // the event a message on a DAG run's correlation carries (§17.7, event.go)
		r.routeResponse,  // a response goes to its request's producer (004 §3, response.go)
		r.checkRecipient, // the recipient is a registered agent (§12)
		r.checkACL,       // the producer may send the type, the recipient receive it (§6.3, acl.go)
		r.checkModality,  // the recipient declared the content type (§12)
	}
}

// admissionReactions are what Send does, in order, once a message is admitted. A pattern
// that reacts to admitted messages adds an entry here.
func (r *Router) admissionReactions() []reaction {
	return []reaction{
		r.eventAdmitted,    // deliver the DAG run's event (event.go)
		r.requestAdmitted,  // track the request and its producer's wait (response.go)
		r.responseAdmitted, // fulfil the request the response answers (response.go)
	}
}

// Send admits one envelope from a producer. recipient is the addressing metadata (see
// wire.RecipientKey). A protocol rejection comes back as a *protocol.Error with
// the spec's error_code — the producer also receives a NACK envelope when it is a registered
// agent — while a failure of the store comes back as a plain error.
//
// Send is the §11–§13 admission pipeline: validate the envelope; resolve its address (an ACK
// and a message to the scheduler leave here for their own paths); run the checks; admit it
// into the recipient's buffer with the outbox entries the checks prepared; run the reactions.
//
// With tracing on, Send is the span "send <recipient>" (or "ack"), and the message is admitted
// with its context (trace.go).
func (r *Router) Send(ctx context.Context, env *commonpb.Envelope, recipient string) (*protocol.Error, error) {
	if !telemetry.Enabled() {
		return r.send(ctx, env, recipient)
	}
	ctx, span := sendSpan(ctx, env, recipient)
	perr, err := r.send(ctx, env, recipient)
	endSpan(span, perr, err)
	return perr, err
}

// send is Send.
func (r *Router) send(ctx context.Context, env *commonpb.Envelope, recipient string) (*protocol.Error, error) {
	received := time.Now()
	if perr := protocol.ValidateEnvelope(env, protocol.Limits{MaxPayloadBytes: r.cfg.MaxPayloadBytes}); perr != nil {
		return r.reject(ctx, env, recipient, perr)
	}
	s := &sending{received: received, recipient: recipient, env: proto.Clone(env).(*commonpb.Envelope)}
	// The lifecycle state is the server's to keep; whatever the producer put there is replaced.
	s.env.State = commonpb.EnvelopeState_ENVELOPE_STATE_SENT
	// §4, §5.2: every envelope admitted carries the router's HLC, merged with the producer's.
	if perr := r.stamp(s.env); perr != nil {
		return r.reject(ctx, s.env, recipient, perr)
	}
	s.route, s.routeErr = protocol.Resolve(s.env, recipient)
	switch {
	case s.routeErr == nil && s.route.AckFor != "":
		return r.applyAck(ctx, s.env)
	case s.routeErr == nil && s.route.Recipient == protocol.SchedulerID:
		// Control traffic to the scheduler is not work on a correlation: no check applies.
		return r.toScheduler(ctx, s.env)
	}
	for _, c := range r.checks {
		if perr, err := c(ctx, s); err != nil {
			return nil, err
		} else if perr != nil {
			return r.reject(ctx, s.env, s.rejectRoute(), perr)
		}
	}
	if admitted, perr, err := r.admit(ctx, s); !admitted {
		return perr, err
	}
	for _, react := range r.reactions {
		if err := react(ctx, s); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// admit writes the checked envelope into its recipient's buffer, with the outbox entries
// the checks prepared, and records the admission. A message the store does not admit is
// answered here — from the idempotency cache, as a full buffer, or from the record of the
// message_id sent before — and admitted is false.
func (r *Router) admit(ctx context.Context, s *sending) (admitted bool, perr *protocol.Error, err error) {
	env, to := s.env, s.route.Recipient
	req := store.AdmitRequest{
		Envelope: env, RecipientID: to, Capacity: r.cfg.BufferCapacity, Track: true,
		Lane: r.laneFor(ctx, env.GetProducerId()), Outbox: s.outbox, TraceParent: telemetry.TraceParent(ctx),
	}
	if ttl := env.GetTtlMs(); ttl > 0 {
		req.ExpiresAt = s.received.Add(time.Duration(ttl) * time.Millisecond)
	}
	if key := protocol.DedupKey(env, to); key != "" {
		req.Dedup = &store.Dedup{ProducerID: env.GetProducerId(), Key: key, Window: r.cfg.DedupWindow}
	}
	// The admission's audit row is written in its transaction (§19): a crash cannot leave an
	// admitted message unaudited, and the row costs no write of its own. The store adds the
	// delivery's seq to the stored details; the log line gets it below.
	details := map[string]any{"state": "SENT", "message_type": env.GetMessageType().String(),
		"content_type": env.GetContentType(), "content_length": env.GetContentLength(), "lane": req.Lane.String(), "retry_count": env.GetRetryCount()}
	if req.Dedup != nil {
		details["dedup_key"] = req.Dedup.Key
	}
	var logAdmitted func(seq int64)
	req.Audit, logAdmitted = r.admissionAudit(ctx, env, to, details)
	seq, err := r.st.Messages().Admit(ctx, req)
	var dup *store.DedupError
	switch {
	case errors.As(err, &dup):
		perr, err = r.answerFromCache(ctx, env, dup)
		return false, perr, err
	case errors.Is(err, store.ErrBufferFull):
		// 004 §7: a rejected request never leaves its sender waiting: no pending entry exists.
		perr, err = r.reject(ctx, env, to, protocol.Errorf(commonpb.ErrorCode_BUFFER_FULL,
			"inbound buffer capacity (%d) exceeded for agent=%s (§13)", r.cfg.BufferCapacity, to))
		return false, perr, err
	case errors.Is(err, store.ErrDuplicateMessage):
		perr, err = r.answerResent(ctx, env, to)
		return false, perr, err
	case err != nil:
		return false, nil, fmt.Errorf("admit message: %w", err)
	}
	if r.metrics != nil {
		r.metrics.Enqueued(to, time.Since(s.received))
	}
	logAdmitted(seq)
	return true, nil, nil
}

// admissionAudit prepares the message.admitted event of env's admission to recipient: the
// row for store.AdmitRequest.Audit, which the store writes in the admission's transaction,
// and the function that logs the event's line with the delivery's seq once admitted.
func (r *Router) admissionAudit(ctx context.Context, env *commonpb.Envelope, recipient string, details map[string]any) (*store.Event, func(seq int64)) {
	// The row is the admission's own event: it carries the HLC the envelope was stamped with,
	// which is what the recipient's reply will follow (§4), not a later reading.
	ev := r.sink.Stamped(ctx, r.sink.Attributed(ctx, audit.Event{CorrelationID: env.GetCorrelationId(), Actor: env.GetProducerId(), Type: "message.admitted",
		AgentID: recipient, MessageID: env.GetMessageId(), Details: details, HLC: env.GetHlcTimestamp()}))
	stored := audit.Stored(ev)
	return &stored, func(seq int64) {
		ev.Details["seq"] = seq
		r.sink.Log(ctx, ev)
	}
}

// parseLinkage reads the envelope's request/response linkage from its content_type (004).
func parseLinkage(_ context.Context, s *sending) (*protocol.Error, error) {
	link, perr := protocol.ParseLinkage(s.env.GetContentType())
	s.link = link
	return perr, nil
}

// checkRecipient looks the recipient up: only a registered agent has a buffer (§12). From
// here on refusals are recorded against the recipient.
func (r *Router) checkRecipient(ctx context.Context, s *sending) (*protocol.Error, error) {
	s.routed = true
	agent, err := r.agent(ctx, s.route.Recipient)
	if errors.Is(err, store.ErrNotFound) {
		return protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "recipient %q is not a registered agent", s.route.Recipient), nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up recipient: %w", err)
	}
	s.agent = agent
	return nil, nil
}

// checkModality refuses a payload whose content type the recipient did not declare (§12).
func (r *Router) checkModality(_ context.Context, s *sending) (*protocol.Error, error) {
	env, declared := s.env, s.agent.Descriptor.GetModalitiesSupported()
	if len(env.GetPayload()) > 0 && !protocol.AcceptsContentType(declared, env.GetContentType()) {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR,
			"content_type %q is not among the modalities agent %q declared %v (§12)", env.GetContentType(), s.route.Recipient, declared), nil
	}
	return nil, nil
}
