package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/dag"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/telemetry"
)

// SchedulerHandler takes one message an agent addressed to the scheduler (recipient
// protocol.SchedulerID). A refusal comes back as a *protocol.Error, which the router makes the
// message's rejection (recorded, NACKed, audited); a failure to hand the message on comes back
// as an error.
type SchedulerHandler func(ctx context.Context, env *commonpb.Envelope) (*protocol.Error, error)

// SchedulerHandlers is the dispatch table of the messages agents address to the scheduler,
// keyed by message type: the declaration of a non-preemptible section (CONTROL, §7.2), a
// provider agent's answer to a tool call (TOOL_RESULT, TOOL_ERROR, §18.2). A pattern that
// lets agents tell the scheduler something adds an entry; a type without one is refused.
type SchedulerHandlers map[commonpb.MessageType]SchedulerHandler

// Notice is what the router tells the scheduler's side, whose state lives in Temporal
// workflows: a ControlAck, a ResponseWait or a RunEvent. A SchedulerOutbox turns it into the
// outbox entry that carries it, and the router writes that entry in the transaction of the
// step it reports, so a stored step always reaches its workflow, Temporal reachable or not
// (docs/reliability.md).
type Notice interface{ notice() }

// ControlAck is the ACK or NACK of Message, one of the scheduler's CONTROL messages, which
// reaches the lifecycle workflow of Message's recipient (§7).
type ControlAck struct {
	// Message is the acknowledged CONTROL message.
	Message store.MessageRecord
	// Ack is the stage reached, with its error_code and note.
	Ack protocol.AckPayload
}

// RunEvent is the event a message admitted on a DAG run's correlation delivers to the run
// (§17.7); it is written with the message's admission.
type RunEvent struct {
	// Envelope is the admitted message.
	Envelope *commonpb.Envelope
	// Event names the run and the event.
	Event dag.MessageEvent
}

func (ControlAck) notice()   {}
func (ResponseWait) notice() {}
func (RunEvent) notice()     {}

// SchedulerOutbox carries the router's notices to the scheduler's workflows through the
// outbox.
type SchedulerOutbox interface {
	// Entry returns the outbox entry that carries n to the workflow it concerns.
	Entry(n Notice) (store.OutboxEntry, error)
	// Deliver makes the in-line first attempt of entries the router has just written; a
	// failure leaves them to the outbox relay.
	Deliver(ctx context.Context, es ...store.OutboxEntry) error
}

// SetScheduler installs the scheduler's side of the message plane; call before serving.
// handlers take what agents address to the scheduler, out carries the router's notices to
// Temporal. Without handlers every message addressed to the scheduler is refused with
// NO_ROUTE; without out, a message carrying an event to a DAG run is refused with NO_ROUTE,
// ACKs of the scheduler's CONTROL messages are logged as undeliverable and agents' waits on
// responses are not reported (their requests are still tracked and retried).
func (r *Router) SetScheduler(handlers SchedulerHandlers, out SchedulerOutbox) {
	r.schedHandlers, r.schedOutbox = handlers, out
}

// SendControl delivers one of the scheduler's CONTROL messages (RUN, PREEMPT_REQUEST,
// TERMINATE, KILL, SHUTDOWN) to an agent. Unlike Notify the message is tracked: the agent's
// delivery confirmation and ACKs advance its lifecycle and reach the scheduler as ControlAck
// notices, and the sweep times it out like any message. Like all control traffic it rides the PRIVILEGED lane
// and bypasses the buffer's capacity: a full buffer must not hold back a preemption (§7.3).
// Sending a message_id twice is a no-op, so an activity that retries is safe.
func (r *Router) SendControl(ctx context.Context, agentID string, env *commonpb.Envelope) error {
	if env.GetMessageType() != commonpb.MessageType_CONTROL {
		return fmt.Errorf("SendControl sends CONTROL envelopes, not %s", env.GetMessageType())
	}
	if _, err := r.agent(ctx, agentID); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "agent %q is not registered", agentID)
		}
		return fmt.Errorf("look up control recipient: %w", err)
	}
	env = proto.Clone(env).(*commonpb.Envelope)
	env.ProducerId = protocol.SchedulerID
	env.State = commonpb.EnvelopeState_ENVELOPE_STATE_SENT
	r.stampControl(env)
	// Audited in the admission's transaction, as SendMessage's admissions are.
	stored, logAdmitted := r.admissionAudit(ctx, env, agentID, map[string]any{"state": "SENT", "message_type": "CONTROL", "lane": "PRIVILEGED"})
	seq, err := r.st.Messages().Admit(ctx, store.AdmitRequest{Envelope: env, RecipientID: agentID, Track: true, TraceParent: telemetry.TraceParent(ctx),
		Lane: commonpb.CommunicationClass_PRIVILEGED, Audit: stored})
	if errors.Is(err, store.ErrDuplicateMessage) {
		return nil // an activity retry after a lost answer: the message is already there
	}
	if err != nil {
		return fmt.Errorf("deliver CONTROL to %s: %w", agentID, err)
	}
	logAdmitted(seq)
	return nil
}

// toSchedulerAck hands an ACK or NACK addressed to the scheduler (the producer of the
// acknowledged message) to the inbox when no store step carried it: the sweep's NACKs of
// CONTROL messages that timed out. Its handoff is written on its own, right after the
// transition it reports.
func (r *Router) toSchedulerAck(ctx context.Context, env *commonpb.Envelope) error {
	ack, perr := protocol.ParseAck(env)
	if perr != nil {
		return fmt.Errorf("scheduler ACK: %w", perr)
	}
	rec, err := r.st.Messages().GetMessage(ctx, ack.AckForMessageID)
	if errors.Is(err, store.ErrNotFound) {
		return nil // untracked scheduler traffic (a NOTIFICATION or HEARTBEAT): nobody waits for it
	}
	if err != nil {
		return fmt.Errorf("look up the scheduler's message: %w", err)
	}
	c, err := r.withSchedulerEntry(control{agentID: protocol.SchedulerID, env: env, toScheduler: true}, rec, ack)
	if err != nil {
		return err
	}
	if c.outbox == nil {
		r.controlUndeliverable(ctx, env, ack)
		return nil
	}
	if err := r.st.Outbox().Add(ctx, []store.OutboxEntry{*c.outbox}, store.OutboxLease); err != nil {
		return fmt.Errorf("hand the scheduler's ACK to Temporal: %w", err)
	}
	r.deliverEntry(ctx, *c.outbox)
	return nil
}

// withSchedulerEntry adds to c, an ACK for the scheduler, the handoff that carries it to
// the lifecycle workflow of msg's recipient, when msg is one of the scheduler's CONTROL
// messages and this process has the scheduler's inbox. Other ACKs addressed to the scheduler
// (of its notifications and heartbeats) concern nobody.
func (r *Router) withSchedulerEntry(c control, msg store.MessageRecord, ack protocol.AckPayload) (control, error) {
	if !c.toScheduler || r.schedOutbox == nil || msg.ProducerID != protocol.SchedulerID || msg.Envelope.GetMessageType() != commonpb.MessageType_CONTROL {
		return c, nil
	}
	h, err := r.schedOutbox.Entry(ControlAck{Message: msg, Ack: ack})
	if err != nil {
		return c, fmt.Errorf("prepare the scheduler's outbox entry: %w", err)
	}
	c.outbox = &h
	return c, nil
}

// deliverEntry makes the in-line attempt of a handoff the router wrote. A failure is not
// the caller's: the handoff is stored, and the relay delivers it once Temporal takes it.
func (r *Router) deliverEntry(ctx context.Context, h store.OutboxEntry) {
	if err := r.schedOutbox.Deliver(ctx, h); err != nil {
		slog.Default().Warn("outbox entry for the scheduler stored; its delivery to Temporal is retried by the outbox relay", "kind", h.Kind,
			"entry_id", h.ID, "workflow_id", h.WorkflowID, "error", err)
	}
}

// controlUndeliverable records an ACK for the scheduler that no inbox takes.
func (r *Router) controlUndeliverable(ctx context.Context, env *commonpb.Envelope, ack protocol.AckPayload) {
	reason := "no scheduler inbox in this process"
	if r.schedOutbox != nil {
		reason = "not an ACK of a CONTROL message"
	}
	r.sink.Record(ctx, audit.Event{CorrelationID: env.GetCorrelationId(), Actor: protocol.SchedulerID, Type: "message.control_undeliverable",
		AgentID: protocol.SchedulerID, MessageID: ack.AckForMessageID, Level: slog.LevelWarn,
		Details: map[string]any{"reason": reason, "ack_stage": ack.Stage.String()}})
}

// toScheduler hands a message an agent addressed to the scheduler to the handler of its
// message type.
func (r *Router) toScheduler(ctx context.Context, env *commonpb.Envelope) (*protocol.Error, error) {
	h, ok := r.schedHandlers[env.GetMessageType()]
	if !ok {
		return r.reject(ctx, env, protocol.SchedulerID, r.noSchedulerHandler(env.GetMessageType()))
	}
	perr, err := h(ctx, env)
	switch {
	case err != nil:
		return nil, err
	case perr != nil:
		return r.reject(ctx, env, protocol.SchedulerID, perr)
	}
	return nil, nil
}

// noSchedulerHandler is the refusal of a message to the scheduler whose type has no handler.
func (r *Router) noSchedulerHandler(mt commonpb.MessageType) *protocol.Error {
	if len(r.schedHandlers) == 0 {
		return protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "this server does not run the scheduler's inbox")
	}
	taken := make([]string, 0, len(r.schedHandlers))
	for t := range r.schedHandlers {
		taken = append(taken, t.String())
	}
	slices.Sort(taken)
	return protocol.Errorf(commonpb.ErrorCode_UNSUPPORTED_MESSAGE_TYPE, "the scheduler takes %s from agents, not %s", strings.Join(taken, ", "), mt)
}
