package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/dag"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// SchedulerInbox receives what reaches the scheduler through the message plane (§7): the ACKs
// and NACKs of the CONTROL messages it sent with SendControl, the CONTROL messages agents
// address to it (recipient protocol.SchedulerID), such as the declaration of a
// non-preemptible section, and the beginning and end of an agent's wait on a response
// (004 §2), and the events messages deliver to DAG runs on their correlation (§17.7). The
// scheduler's state lives in Temporal workflows, so an ACK (and an event)
// travels on as a store.OutboxEntry: the router writes it in the transaction that applies the
// ACK, so a stored ACK always reaches the agent's workflow, Temporal reachable or not
// (docs/reliability.md).
type SchedulerInbox interface {
	// AckEntry returns the handoff that carries an ACK or NACK of msg — a CONTROL message
	// the scheduler sent to msg.RecipientID — to the scheduler.
	AckEntry(msg store.MessageRecord, ack protocol.AckPayload) (store.OutboxEntry, error)
	// WaitEntry returns the handoff that tells the lifecycle of rw.ProducerID that the
	// agent waits on a response to its request, or that the wait ended (004 §2).
	WaitEntry(rw ResponseWait) (store.OutboxEntry, error)
	// Deliver makes the in-line first attempt of handoffs the router has just written; a
	// failure leaves them to the outbox relay.
	Deliver(ctx context.Context, hs ...store.OutboxEntry) error
	// Control handles a CONTROL envelope an agent addressed to the scheduler; a protocol
	// refusal comes back as a *protocol.Error, a failure to hand it on as an error.
	Control(ctx context.Context, env *commonpb.Envelope, c protocol.Control) (*protocol.Error, error)
	// EventEntry returns the handoff that delivers ev, the event env carries on a DAG
	// run's correlation, to the run (§17.7); the router writes it with env's admission.
	EventEntry(env *commonpb.Envelope, ev dag.MessageEvent) (store.OutboxEntry, error)
}

// SetSchedulerInbox installs the scheduler's inbox; call before serving. Without one, CONTROL
// messages addressed to the scheduler and messages carrying an event to a DAG run are
// refused with NO_ROUTE, and ACKs of scheduler messages are logged as undeliverable.
func (r *Router) SetSchedulerInbox(in SchedulerInbox) { r.inbox = in }

// SendControl delivers one of the scheduler's CONTROL messages (RUN, PREEMPT_REQUEST,
// TERMINATE, KILL, SHUTDOWN) to an agent. Unlike Notify the message is tracked: the agent's
// delivery confirmation and ACKs advance its lifecycle and reach the SchedulerInbox, and the
// sweep times it out like any message. Like all control traffic it rides the PRIVILEGED lane
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
	_, err := r.st.Messages().Admit(ctx, store.AdmitRequest{Envelope: env, RecipientID: agentID, Track: true, Lane: commonpb.CommunicationClass_PRIVILEGED})
	if errors.Is(err, store.ErrDuplicateMessage) {
		return nil // an activity retry after a lost answer: the message is already there
	}
	if err != nil {
		return fmt.Errorf("deliver CONTROL to %s: %w", agentID, err)
	}
	r.sink.Record(ctx, audit.Event{CorrelationID: env.GetCorrelationId(), Actor: protocol.SchedulerID, Type: "message.admitted",
		AgentID: agentID, MessageID: env.GetMessageId(), Details: map[string]any{"state": "SENT", "message_type": "CONTROL", "lane": "PRIVILEGED"}})
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
	if !c.toScheduler || r.inbox == nil || msg.ProducerID != protocol.SchedulerID || msg.Envelope.GetMessageType() != commonpb.MessageType_CONTROL {
		return c, nil
	}
	h, err := r.inbox.AckEntry(msg, ack)
	if err != nil {
		return c, fmt.Errorf("prepare the scheduler's outbox entry: %w", err)
	}
	c.outbox = &h
	return c, nil
}

// deliverEntry makes the in-line attempt of a handoff the router wrote. A failure is not
// the caller's: the handoff is stored, and the relay delivers it once Temporal takes it.
func (r *Router) deliverEntry(ctx context.Context, h store.OutboxEntry) {
	if err := r.inbox.Deliver(ctx, h); err != nil {
		slog.Default().Warn("outbox entry for the scheduler stored; its delivery to Temporal is retried by the outbox relay", "kind", h.Kind,
			"entry_id", h.ID, "workflow_id", h.WorkflowID, "error", err)
	}
}

// controlUndeliverable records an ACK for the scheduler that no inbox takes.
func (r *Router) controlUndeliverable(ctx context.Context, env *commonpb.Envelope, ack protocol.AckPayload) {
	reason := "no scheduler inbox in this process"
	if r.inbox != nil {
		reason = "not an ACK of a CONTROL message"
	}
	r.sink.Record(ctx, audit.Event{CorrelationID: env.GetCorrelationId(), Actor: protocol.SchedulerID, Type: "message.control_undeliverable",
		AgentID: protocol.SchedulerID, MessageID: ack.AckForMessageID, Level: slog.LevelWarn,
		Details: map[string]any{"reason": reason, "ack_stage": ack.Stage.String()}})
}

// toSchedulerControl hands a CONTROL envelope an agent addressed to the scheduler to the
// inbox, after validating it.
func (r *Router) toSchedulerControl(ctx context.Context, env *commonpb.Envelope) (*protocol.Error, error) {
	if mt := env.GetMessageType(); mt == commonpb.MessageType_TOOL_RESULT || mt == commonpb.MessageType_TOOL_ERROR {
		return r.toSchedulerToolReply(ctx, env)
	}
	if r.inbox == nil {
		return r.reject(ctx, env, protocol.SchedulerID, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "this server does not run the scheduler's inbox"))
	}
	c, perr := protocol.ParseControl(env)
	if perr != nil {
		return r.reject(ctx, env, protocol.SchedulerID, perr)
	}
	if c.Type != protocol.ControlNonPreemptibleBegin && c.Type != protocol.ControlNonPreemptibleEnd {
		return r.reject(ctx, env, protocol.SchedulerID, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR,
			"agents may send the scheduler only %s and %s, not %s", protocol.ControlNonPreemptibleBegin, protocol.ControlNonPreemptibleEnd, c.Type))
	}
	perr, err := r.inbox.Control(ctx, env, c)
	switch {
	case err != nil:
		return nil, err
	case perr != nil:
		return r.reject(ctx, env, protocol.SchedulerID, perr)
	}
	r.sink.Record(ctx, audit.Event{CorrelationID: env.GetCorrelationId(), Actor: env.GetProducerId(), Type: "scheduler.control_received",
		AgentID: env.GetProducerId(), MessageID: env.GetMessageId(), Details: map[string]any{"type": c.Type, "task_id": c.TaskID, "max_duration_ms": c.MaxDurationMS}})
	return nil, nil
}

// ToolReplier is the part of a SchedulerInbox that takes provider agents' answers to the tool
// calls the scheduler routed to them (§18.2).
type ToolReplier interface {
	// ToolReply stores a TOOL_RESULT or TOOL_ERROR envelope addressed to the scheduler; a
	// protocol refusal comes back as a *protocol.Error.
	ToolReply(ctx context.Context, env *commonpb.Envelope) (*protocol.Error, error)
}

// toSchedulerToolReply hands a provider agent's TOOL_RESULT or TOOL_ERROR to the inbox.
func (r *Router) toSchedulerToolReply(ctx context.Context, env *commonpb.Envelope) (*protocol.Error, error) {
	tr, ok := r.inbox.(ToolReplier)
	if !ok {
		return r.reject(ctx, env, protocol.SchedulerID, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "this server does not take tool replies"))
	}
	perr, err := tr.ToolReply(ctx, env)
	switch {
	case err != nil:
		return nil, err
	case perr != nil:
		return r.reject(ctx, env, protocol.SchedulerID, perr)
	}
	r.sink.Record(ctx, audit.Event{CorrelationID: env.GetCorrelationId(), Actor: env.GetProducerId(), Type: "tool.reply_received",
		AgentID: env.GetProducerId(), MessageID: env.GetMessageId(), Details: map[string]any{"message_type": env.GetMessageType().String()}})
	return nil, nil
}
