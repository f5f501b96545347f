package bridge

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/sw4rm/sw4rm-temporal/outbox"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/dag"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// SchedulerInbox translates what agents send the scheduler through the message plane onto
// their lifecycle workflows, which schedule their tasks (§7): ACKs of the scheduler's CONTROL
// messages become AgentControlAckSignal — through the outbox, as outbox entries the router writes
// with the ACK — a request that requires a response, and its end, become
// AgentResponseWaitSignal — as handoffs written with the pending response — and
// non-preemptible section declarations become AgentControlSignal. Events that messages carry
// on a DAG run's correlation become the run's DAGEventSignal, as handoffs written with the
// message's admission (§17.7). Install
// it with router.SetSchedulerInbox in every process whose router receives agents' ACKs (the
// frontend) or times messages out (the sweep).
type SchedulerInbox struct {
	temporal client.Client
	relay    *outbox.Relay
	// store keeps the answers of provider agents to tool calls (tool_inbox.go); nil refuses
	// them.
	store store.Store
}

var _ router.SchedulerInbox = (*SchedulerInbox)(nil)

// NewSchedulerInbox builds the inbox over a Temporal client and the relay that delivers its
// handoffs (with RegisterOutboxHandlers installed), and the store that keeps provider agents'
// answers to tool calls.
func NewSchedulerInbox(tc client.Client, relay *outbox.Relay, st store.Store) *SchedulerInbox {
	return &SchedulerInbox{temporal: tc, relay: relay, store: st}
}

// AckEntry returns the handoff that signals the lifecycle of msg's recipient with the ACK
// of its CONTROL message. An agent whose lifecycle has ended by the time it is delivered has
// nothing left to schedule: the handoff is then dropped (the router has recorded the ACK).
func (in *SchedulerInbox) AckEntry(msg store.MessageRecord, ack protocol.AckPayload) (store.OutboxEntry, error) {
	return NewOutboxEntry(workflows.OutboxAgentControlAck, workflows.AgentWorkflowID(msg.RecipientID), workflows.AgentControlAckPayload{
		AgentID: msg.RecipientID,
		Ack:     workflows.ControlAck{MessageID: msg.MessageID, Stage: ack.Stage, ErrorCode: ack.ErrorCode, Note: ack.Note},
	})
}

// WaitEntry returns the handoff that tells the lifecycle of the request's producer that it
// waits on a response, or that the wait ended (004 §2).
func (in *SchedulerInbox) WaitEntry(rw router.ResponseWait) (store.OutboxEntry, error) {
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

// EventEntry returns the handoff that signals DAGEventSignal to the DAG run ev names with
// the event env carries (§17.7), its message_id and producer. A run that is closed or was
// never started by the time it is delivered has no node to release: the handoff's handler
// records that (workflow.event_unclaimed) and drops it.
func (in *SchedulerInbox) EventEntry(env *commonpb.Envelope, ev dag.MessageEvent) (store.OutboxEntry, error) {
	return NewOutboxEntry(workflows.OutboxDAGEvent, workflows.DAGWorkflowID(ev.WorkflowID), workflows.DAGEventPayload{
		WorkflowID: ev.WorkflowID,
		Event:      workflows.DAGEvent{Name: ev.Name, MessageID: env.GetMessageId(), By: env.GetProducerId()},
	})
}

// Deliver makes the in-line attempt of handoffs the router wrote.
func (in *SchedulerInbox) Deliver(ctx context.Context, hs ...store.OutboxEntry) error {
	return in.relay.Deliver(ctx, hs...)
}

// Control signals the sending agent's lifecycle workflow with a non-preemptible section's
// BEGIN or END (§7.2).
func (in *SchedulerInbox) Control(ctx context.Context, env *commonpb.Envelope, c protocol.Control) (*protocol.Error, error) {
	err := in.temporal.SignalWorkflow(ctx, workflows.AgentWorkflowID(env.GetProducerId()), "", workflows.AgentControlSignal,
		workflows.AgentControl{Type: c.Type, TaskID: c.TaskID, MaxDuration: c.MaxDuration()})
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "agent %q has no running lifecycle; register first", env.GetProducerId()), nil
	}
	if err != nil {
		return nil, fmt.Errorf("signal the scheduler of %s: %w", env.GetProducerId(), err)
	}
	return nil, nil
}
