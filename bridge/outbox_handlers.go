package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/outbox"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// RegisterOutboxHandlers installs on rel the handlers of the entries the frontend writes: the
// start of an agent's lifecycle after its registration, its end after its deregistration,
// the ACKs of the scheduler's CONTROL messages, the beginning and end of an agent's wait
// on a response, the start of an agent-to-agent handoff's workflow (§17.6) and the events
// messages deliver to DAG runs (§17.7). Every process that runs a relay registers them, so
// any process can deliver what another wrote. sink records what a handler decides that
// nobody else sees (an event for a run that is not open).
func RegisterOutboxHandlers(rel *outbox.Relay, tc client.Client, st store.Store, sink *audit.Sink, taskQueue string) {
	// A RECEIVED waits up to AckLinger for the FULFILLED (or NACK) of the same message that a
	// fast agent sends moments later, so that both cost the agent's lifecycle one signal.
	rel.Coalesce(workflows.OutboxAgentControlAck, outbox.Coalescing{Linger: AckLinger, MayWait: ackMayWait, Deliver: deliverAcks(tc)})
	// No lifecycle left to end is the deregistration done.
	rel.Handle(workflows.OutboxAgentDeregister, signalEntry(tc, func(p workflows.AgentDeregisterPayload) (string, string, any) {
		return workflows.AgentWorkflowID(p.AgentID), workflows.AgentDeregisterSignal, p.Deregistration
	}))
	// A producer without a lifecycle (not registered, or gone) has no state to change.
	rel.Handle(workflows.OutboxAgentResponseWait, signalEntry(tc, func(p workflows.AgentResponseWaitPayload) (string, string, any) {
		return workflows.AgentWorkflowID(p.AgentID), workflows.AgentResponseWaitSignal, p.Wait
	}))
	rel.Handle(workflows.OutboxAgentRegister, func(ctx context.Context, h store.OutboxEntry) error {
		p, err := decodeEntry[workflows.AgentRegisterPayload](h)
		if err != nil {
			return err
		}
		// A registration delivered late must not start the lifecycle of an agent that has
		// deregistered since.
		if _, err := st.Registry().GetAgent(ctx, p.Input.AgentID); errors.Is(err, store.ErrNotFound) {
			return outbox.Permanent(fmt.Errorf("agent %s deregistered before its lifecycle started", p.Input.AgentID))
		} else if err != nil {
			return err
		}
		_, err = tc.SignalWithStartWorkflow(ctx, workflows.AgentWorkflowID(p.Input.AgentID), workflows.AgentRegisterSignal, p.Registration,
			workflows.AgentStartOptions(p.Input.AgentID, taskQueue), workflows.AgentLifecycle, p.Input)
		return err
	})
	rel.Handle(workflows.OutboxDAGEvent, func(ctx context.Context, h store.OutboxEntry) error {
		p, err := decodeEntry[workflows.DAGEventPayload](h)
		if err != nil {
			return err
		}
		wid := workflows.DAGWorkflowID(p.WorkflowID)
		err = tc.SignalWorkflow(ctx, wid, "", workflows.DAGEventSignal, p.Event)
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			// A closed run, or one never started: no node waits any more. The message itself
			// was delivered to its recipient as usual; only the event has nowhere to go.
			sink.Record(ctx, audit.Event{CorrelationID: wid, Actor: p.Event.By, Type: "workflow.event_unclaimed", MessageID: p.Event.MessageID,
				Details: map[string]any{"workflow_id": p.WorkflowID, "event": p.Event.Name, "reason": "no open run of the workflow"}})
			return nil
		}
		return err
	})
	rel.Handle(workflows.OutboxHandoffStart, startEntry(tc, func(p workflows.HandoffStartPayload) (client.StartWorkflowOptions, any, any) {
		in := p.Input
		return workflows.HandoffStartOptions(in.RequestID, taskQueue, in.From, in.To), workflows.HandoffWorkflow, in
	}))
	// A call that ended (its deadline, a cancel) has nothing left to hear.
	rel.Handle(workflows.OutboxToolProvided, signalEntry(tc, func(p workflows.ToolProvidedPayload) (string, string, any) {
		return workflows.ToolWorkflowID(p.CallID), workflows.ToolProvidedSignal, p.Provided
	}))
	rel.Handle(workflows.OutboxToolStart, startEntry(tc, func(p workflows.ToolStartPayload) (client.StartWorkflowOptions, any, any) {
		in := p.Input
		opts := workflows.ToolStartOptions(in.Request.CallID, in.Caller, taskQueue)
		opts.StaticSummary = workflows.ToolSummary(in) // what the Temporal UI lists the run as
		return opts, workflows.ToolCall, in
	}))
}

// signalEntry is the handler of an entry that signals one workflow: target decodes the
// payload P into the workflow ID, the signal name and its argument. A workflow that no
// longer exists has nothing left to hear, so the entry is done.
func signalEntry[P any](tc client.Client, target func(P) (workflowID, signal string, arg any)) outbox.Handler {
	return func(ctx context.Context, h store.OutboxEntry) error {
		p, err := decodeEntry[P](h)
		if err != nil {
			return err
		}
		wid, signal, arg := target(p)
		err = tc.SignalWorkflow(ctx, wid, "", signal, arg)
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return nil
		}
		return err
	}
}

// startEntry is the handler of an entry that starts one workflow whose ID runs once, ever
// (RejectDuplicate): target decodes the payload P into the start options, the workflow and
// its input. A run already started — by this delivery's first attempt or another relay — is
// the promise kept.
func startEntry[P any](tc client.Client, target func(P) (opts client.StartWorkflowOptions, workflow, input any)) outbox.Handler {
	return func(ctx context.Context, h store.OutboxEntry) error {
		p, err := decodeEntry[P](h)
		if err != nil {
			return err
		}
		opts, wf, in := target(p)
		_, err = tc.ExecuteWorkflow(ctx, opts, wf, in)
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &started) {
			return nil
		}
		return err
	}
}

// decodeEntry decodes an entry's payload; one that does not decode can never be delivered,
// so the error is permanent.
func decodeEntry[P any](h store.OutboxEntry) (P, error) {
	var p P
	if err := json.Unmarshal(h.Payload, &p); err != nil {
		return p, outbox.Permanent(fmt.Errorf("decode %s entry: %w", h.Kind, err))
	}
	return p, nil
}

// NewOutboxEntry builds an entry of kind for workflowID with payload encoded as JSON.
func NewOutboxEntry(kind, workflowID string, payload any) (store.OutboxEntry, error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return store.OutboxEntry{}, fmt.Errorf("encode %s entry: %w", kind, err)
	}
	return store.OutboxEntry{ID: uuid.NewString(), Kind: kind, WorkflowID: workflowID, Payload: b}, nil
}

// AckLinger is how long the in-line delivery of a CONTROL message's RECEIVED (or READ) ACK
// waits for a later ACK to the same lifecycle, so that the two reach it in one signal
// (outbox.Coalescing). It delays the task's RUNNING by at most this long; a task whose agent
// answers within it is reported RUNNING and COMPLETED in one step.
const AckLinger = 20 * time.Millisecond

// ackMayWait reports whether an ACK entry may wait for a later one: its stage is RECEIVED
// or READ, which a later stage of the same message supersedes in moments.
func ackMayWait(h store.OutboxEntry) bool {
	p, err := decodeEntry[workflows.AgentControlAckPayload](h)
	if err != nil {
		return false // delivered at once, where its handler drops it
	}
	return p.Ack.Stage == commonpb.AckStage_RECEIVED || p.Ack.Stage == commonpb.AckStage_READ
}

// deliverAcks signals the ACKs of entries bound for one lifecycle: AgentControlAckSignal
// for one, AgentControlAcksSignal carrying them in order for several. An ACK for a
// lifecycle that has ended concerns nobody: nothing is left to schedule.
func deliverAcks(tc client.Client) func(ctx context.Context, es []store.OutboxEntry) error {
	return func(ctx context.Context, es []store.OutboxEntry) error {
		acks := make([]workflows.ControlAck, 0, len(es))
		var agentID string
		var bad error
		for _, h := range es {
			p, err := decodeEntry[workflows.AgentControlAckPayload](h)
			if err != nil {
				bad = err // never deliverable; the others still are
				continue
			}
			agentID = p.AgentID
			acks = append(acks, p.Ack)
		}
		if len(acks) == 0 {
			return bad
		}
		var err error
		if len(acks) == 1 {
			err = tc.SignalWorkflow(ctx, workflows.AgentWorkflowID(agentID), "", workflows.AgentControlAckSignal, acks[0])
		} else {
			err = tc.SignalWorkflow(ctx, workflows.AgentWorkflowID(agentID), "", workflows.AgentControlAcksSignal, workflows.ControlAcks{Acks: acks})
		}
		var gone *serviceerror.NotFound
		if errors.As(err, &gone) {
			return nil
		}
		return err
	}
}
