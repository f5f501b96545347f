package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/sw4rm/sw4rm-temporal/observe"
	"github.com/sw4rm/sw4rm-temporal/outbox"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// RegisterHandoffs installs on rel the handlers of the handoffs the frontend writes: the
// start of an agent's lifecycle after its registration, its end after its deregistration,
// the ACKs of the scheduler's CONTROL messages, the beginning and end of an agent's wait
// on a response, the start of an agent-to-agent handoff's workflow (§17.6) and the events
// messages deliver to DAG runs (§17.7). Every process that runs a relay registers them, so
// any process can deliver what another wrote. sink records what a handler decides that
// nobody else sees (an event for a run that is not open).
func RegisterHandoffs(rel *outbox.Relay, tc client.Client, st store.Store, sink *observe.Sink, taskQueue string) {
	// An ACK for a lifecycle that has ended concerns nobody: nothing is left to schedule.
	rel.Handle(workflows.HandoffAgentControlAck, signalHandoff(tc, func(p workflows.AgentControlAckHandoff) (string, string, any) {
		return workflows.AgentWorkflowID(p.AgentID), workflows.AgentControlAckSignal, p.Ack
	}))
	// No lifecycle left to end is the deregistration done.
	rel.Handle(workflows.HandoffAgentDeregister, signalHandoff(tc, func(p workflows.AgentDeregisterHandoff) (string, string, any) {
		return workflows.AgentWorkflowID(p.AgentID), workflows.AgentDeregisterSignal, p.Deregistration
	}))
	// A producer without a lifecycle (not registered, or gone) has no state to change.
	rel.Handle(workflows.HandoffAgentResponseWait, signalHandoff(tc, func(p workflows.AgentResponseWaitHandoff) (string, string, any) {
		return workflows.AgentWorkflowID(p.AgentID), workflows.AgentResponseWaitSignal, p.Wait
	}))
	rel.Handle(workflows.HandoffAgentRegister, func(ctx context.Context, h store.Handoff) error {
		var p workflows.AgentRegisterHandoff
		if err := json.Unmarshal(h.Payload, &p); err != nil {
			return outbox.Permanent(fmt.Errorf("decode %s handoff: %w", h.Kind, err))
		}
		// A registration delivered late must not start the lifecycle of an agent that has
		// deregistered since.
		if _, err := st.Registry().GetAgent(ctx, p.Input.AgentID); errors.Is(err, store.ErrNotFound) {
			return outbox.Permanent(fmt.Errorf("agent %s deregistered before its lifecycle started", p.Input.AgentID))
		} else if err != nil {
			return err
		}
		_, err := tc.SignalWithStartWorkflow(ctx, workflows.AgentWorkflowID(p.Input.AgentID), workflows.AgentRegisterSignal, p.Registration,
			workflows.AgentStartOptions(p.Input.AgentID, taskQueue), workflows.AgentLifecycle, p.Input)
		return err
	})
	rel.Handle(workflows.HandoffDAGEvent, func(ctx context.Context, h store.Handoff) error {
		var p workflows.DAGEventHandoff
		if err := json.Unmarshal(h.Payload, &p); err != nil {
			return outbox.Permanent(fmt.Errorf("decode %s handoff: %w", h.Kind, err))
		}
		wid := workflows.DAGWorkflowID(p.WorkflowID)
		err := tc.SignalWorkflow(ctx, wid, "", workflows.DAGEventSignal, p.Event)
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			// A closed run, or one never started: no node waits any more. The message itself
			// was delivered to its recipient as usual; only the event has nowhere to go.
			sink.Record(ctx, observe.Event{CorrelationID: wid, Actor: p.Event.By, Type: "workflow.event_unclaimed", MessageID: p.Event.MessageID,
				Details: map[string]any{"workflow_id": p.WorkflowID, "event": p.Event.Name, "reason": "no open run of the workflow"}})
			return nil
		}
		return err
	})
	rel.Handle(workflows.HandoffStart, func(ctx context.Context, h store.Handoff) error {
		var p workflows.HandoffStartHandoff
		if err := json.Unmarshal(h.Payload, &p); err != nil {
			return outbox.Permanent(fmt.Errorf("decode %s handoff: %w", h.Kind, err))
		}
		in := p.Input
		_, err := tc.ExecuteWorkflow(ctx, workflows.HandoffStartOptions(in.RequestID, taskQueue, in.From, in.To), workflows.HandoffWorkflow, in)
		// A request_id's workflow runs once, ever (RejectDuplicate): one that was started, by
		// this delivery's first attempt or another relay, is the promise kept.
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &started) {
			return nil
		}
		return err
	})
	// A call that ended (its deadline, a cancel) has nothing left to hear.
	rel.Handle(workflows.HandoffToolProvided, signalHandoff(tc, func(p workflows.ToolProvidedHandoff) (string, string, any) {
		return workflows.ToolWorkflowID(p.CallID), workflows.ToolProvidedSignal, p.Provided
	}))
	rel.Handle(workflows.HandoffToolStart, func(ctx context.Context, h store.Handoff) error {
		var p workflows.ToolStartHandoff
		if err := json.Unmarshal(h.Payload, &p); err != nil {
			return outbox.Permanent(fmt.Errorf("decode %s handoff: %w", h.Kind, err))
		}
		in := p.Input
		_, err := tc.ExecuteWorkflow(ctx, workflows.ToolStartOptions(in.Request.CallID, in.Caller, taskQueue), workflows.ToolCall, in)
		// A request_id's workflow runs once, ever (RejectDuplicate): one that was started, by
		// this delivery's first attempt or another relay, is the promise kept.
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &started) {
			return nil
		}
		return err
	})
}

// signalHandoff is the handler of a handoff that signals one workflow: target decodes the
// payload P into the workflow ID, the signal name and its argument. A workflow that no
// longer exists has nothing left to hear, so the handoff is done.
func signalHandoff[P any](tc client.Client, target func(P) (workflowID, signal string, arg any)) outbox.Handler {
	return func(ctx context.Context, h store.Handoff) error {
		var p P
		if err := json.Unmarshal(h.Payload, &p); err != nil {
			return outbox.Permanent(fmt.Errorf("decode %s handoff: %w", h.Kind, err))
		}
		wid, signal, arg := target(p)
		err := tc.SignalWorkflow(ctx, wid, "", signal, arg)
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return nil
		}
		return err
	}
}

// newHandoff builds a handoff of kind for workflowID with payload encoded as JSON.
func newHandoff(kind, workflowID string, payload any) (store.Handoff, error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return store.Handoff{}, fmt.Errorf("encode %s handoff: %w", kind, err)
	}
	return store.Handoff{ID: uuid.NewString(), Kind: kind, WorkflowID: workflowID, Payload: b}, nil
}
