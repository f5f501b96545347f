package bridge

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/outbox"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// Scheduler is the scheduler's side of the message plane. The scheduler's state lives in
// Temporal workflows, so Scheduler translates what reaches it through the router onto them:
//
//   - non-preemptible section declarations become the sender's AgentControlSignal, and
//     provider agents' answers to tool calls are stored and reach the call's workflow
//     (tool_replies.go), and the HITL agent's decisions reach the invocation's wait
//     (hitl_replies.go) — the router's dispatch table for messages to the scheduler, Handlers;
//   - the router's notices become outbox entries the router writes with the step they report
//     (Entry): the ACKs of the scheduler's CONTROL messages become AgentControlAckSignal, an
//     agent's wait on a response and its end AgentResponseWaitSignal, and the event a message
//     carries on a DAG run's correlation the run's DAGEventSignal (§17.7).
//
// Install it with router.SetScheduler in every process whose router receives agents'
// messages and ACKs (the frontend) or times messages out (the sweep).
type Scheduler struct {
	temporal client.Client
	relay    *outbox.Relay
	// store keeps the answers of provider agents to tool calls (tool_replies.go); nil refuses
	// them.
	store store.Store
	sink  *audit.Sink
	// hitlAgent is the deployment's HITL agent and decisionKey the key that attests its
	// decisions (SetHITLAgent, hitl_replies.go); without an agent every reply is refused.
	hitlAgent   string
	decisionKey ed25519.PrivateKey
}

var _ router.SchedulerOutbox = (*Scheduler)(nil)

// NewScheduler builds the scheduler's side over a Temporal client, the relay that delivers
// its outbox entries (with RegisterOutboxHandlers installed), the store that keeps provider
// agents' answers to tool calls and the sink that records what it takes.
func NewScheduler(tc client.Client, relay *outbox.Relay, st store.Store, sink *audit.Sink) *Scheduler {
	return &Scheduler{temporal: tc, relay: relay, store: st, sink: sink}
}

// Handlers returns the router's dispatch table for the messages agents address to the
// scheduler: CONTROL declares a non-preemptible section (§7.2), TOOL_RESULT and TOOL_ERROR
// answer a tool call the scheduler routed to a provider agent (§18.2), and HITL_INVOCATION
// carries the HITL agent's decision on an invocation the scheduler sent it (§15.2).
func (s *Scheduler) Handlers() router.SchedulerHandlers {
	return router.SchedulerHandlers{
		commonpb.MessageType_CONTROL:         s.control,
		commonpb.MessageType_TOOL_RESULT:     s.toolReply,
		commonpb.MessageType_TOOL_ERROR:      s.toolReply,
		commonpb.MessageType_HITL_INVOCATION: s.hitlReply,
	}
}

// Entry returns the outbox entry that carries one of the router's notices to its workflow.
func (s *Scheduler) Entry(n router.Notice) (store.OutboxEntry, error) {
	switch n := n.(type) {
	case router.ControlAck:
		return ackEntry(n)
	case router.ResponseWait:
		return waitEntry(n)
	case router.RunEvent:
		return eventEntry(n)
	}
	return store.OutboxEntry{}, fmt.Errorf("no outbox entry carries a %T", n)
}

// Deliver makes the in-line attempt of outbox entries the router wrote.
func (s *Scheduler) Deliver(ctx context.Context, es ...store.OutboxEntry) error {
	return s.relay.Deliver(ctx, es...)
}

// ackEntry returns the entry that signals the lifecycle of the CONTROL message's recipient
// with its ACK. An agent whose lifecycle has ended by the time it is delivered has nothing
// left to schedule: the entry is then dropped (the router has recorded the ACK).
func ackEntry(n router.ControlAck) (store.OutboxEntry, error) {
	msg, ack := n.Message, n.Ack
	return NewOutboxEntry(workflows.OutboxAgentControlAck, workflows.AgentWorkflowID(msg.RecipientID), workflows.AgentControlAckPayload{
		AgentID: msg.RecipientID,
		Ack:     workflows.ControlAck{MessageID: msg.MessageID, Stage: ack.Stage, ErrorCode: ack.ErrorCode, Note: ack.Note},
	})
}

// waitEntry returns the entry that tells the lifecycle of the request's producer that it
// waits on a response, or that the wait ended (004 §2).
func waitEntry(rw router.ResponseWait) (store.OutboxEntry, error) {
	outcome := workflows.ResponseFailed
	if rw.Answered {
		outcome = workflows.ResponseAnswered
	}
	wait := workflows.ResponseWait{Key: rw.Key, RequestID: rw.RequestID, Waiting: rw.Waiting, Bound: rw.Bound}
	if !rw.Waiting {
		wait.Outcome, wait.Reason = outcome, rw.Reason
	}
	return NewOutboxEntry(workflows.OutboxAgentResponseWait, workflows.AgentWorkflowID(rw.ProducerID),
		workflows.AgentResponseWaitPayload{AgentID: rw.ProducerID, Wait: wait})
}

// eventEntry returns the entry that signals DAGEventSignal to the DAG run the event names
// with the event, its message's message_id and producer (§17.7). A run that is closed or was
// never started by the time it is delivered has no node to release: the entry's handler
// records that (workflow.event_unclaimed) and drops it.
func eventEntry(n router.RunEvent) (store.OutboxEntry, error) {
	env, ev := n.Envelope, n.Event
	return NewOutboxEntry(workflows.OutboxDAGEvent, workflows.DAGWorkflowID(ev.WorkflowID), workflows.DAGEventPayload{
		WorkflowID: ev.WorkflowID,
		Event:      workflows.DAGEvent{Name: ev.Name, MessageID: env.GetMessageId(), By: env.GetProducerId()},
	})
}

// control takes a CONTROL envelope an agent addressed to the scheduler: the BEGIN or END of
// a non-preemptible section (§7.2), which signals the sender's lifecycle workflow.
func (s *Scheduler) control(ctx context.Context, env *commonpb.Envelope) (*protocol.Error, error) {
	c, perr := protocol.ParseControl(env)
	if perr != nil {
		return perr, nil
	}
	if c.Type != protocol.ControlNonPreemptibleBegin && c.Type != protocol.ControlNonPreemptibleEnd {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR,
			"agents may send the scheduler only %s and %s, not %s", protocol.ControlNonPreemptibleBegin, protocol.ControlNonPreemptibleEnd, c.Type), nil
	}
	err := s.temporal.SignalWorkflow(ctx, workflows.AgentWorkflowID(env.GetProducerId()), "", workflows.AgentControlSignal,
		workflows.AgentControl{Type: c.Type, TaskID: c.TaskID, MaxDuration: c.MaxDuration()})
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "agent %q has no running lifecycle; register first", env.GetProducerId()), nil
	}
	if err != nil {
		return nil, fmt.Errorf("signal the scheduler of %s: %w", env.GetProducerId(), err)
	}
	s.sink.Record(ctx, audit.Event{CorrelationID: env.GetCorrelationId(), Actor: env.GetProducerId(), Type: "scheduler.control_received",
		AgentID: env.GetProducerId(), MessageID: env.GetMessageId(), Details: map[string]any{"type": c.Type, "task_id": c.TaskID, "max_duration_ms": c.MaxDurationMS}})
	return nil, nil
}
