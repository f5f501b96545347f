package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/sw4rm/sw4rm-temporal/outbox"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// RegisterHandoffs installs on rel the handlers of the handoffs the frontend writes: the
// start of an agent's lifecycle after its registration, its end after its deregistration,
// the ACKs of the scheduler's CONTROL messages, and the beginning and end of an agent's wait
// on a response. Every process that runs a relay registers them, so any process can
// deliver what another wrote.
func RegisterHandoffs(rel *outbox.Relay, tc client.Client, st store.Store, taskQueue string) {
	rel.Handle(workflows.HandoffAgentControlAck, func(ctx context.Context, h store.Handoff) error {
		var p workflows.AgentControlAckHandoff
		if err := json.Unmarshal(h.Payload, &p); err != nil {
			return outbox.Permanent(fmt.Errorf("decode %s handoff: %w", h.Kind, err))
		}
		err := tc.SignalWorkflow(ctx, workflows.AgentWorkflowID(p.AgentID), "", workflows.AgentControlAckSignal, p.Ack)
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return nil // the lifecycle has ended: nothing is left to schedule
		}
		return err
	})
	rel.Handle(workflows.HandoffAgentDeregister, func(ctx context.Context, h store.Handoff) error {
		var p workflows.AgentDeregisterHandoff
		if err := json.Unmarshal(h.Payload, &p); err != nil {
			return outbox.Permanent(fmt.Errorf("decode %s handoff: %w", h.Kind, err))
		}
		err := tc.SignalWorkflow(ctx, workflows.AgentWorkflowID(p.AgentID), "", workflows.AgentDeregisterSignal, p.Deregistration)
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return nil // no lifecycle left to end
		}
		return err
	})
	rel.Handle(workflows.HandoffAgentResponseWait, func(ctx context.Context, h store.Handoff) error {
		var p workflows.AgentResponseWaitHandoff
		if err := json.Unmarshal(h.Payload, &p); err != nil {
			return outbox.Permanent(fmt.Errorf("decode %s handoff: %w", h.Kind, err))
		}
		err := tc.SignalWorkflow(ctx, workflows.AgentWorkflowID(p.AgentID), "", workflows.AgentResponseWaitSignal, p.Wait)
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return nil // a producer without a lifecycle (not registered, or gone) has no state to change
		}
		return err
	})
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
}

// newHandoff builds a handoff of kind for workflowID with payload encoded as JSON.
func newHandoff(kind, workflowID string, payload any) (store.Handoff, error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return store.Handoff{}, fmt.Errorf("encode %s handoff: %w", kind, err)
	}
	return store.Handoff{ID: uuid.NewString(), Kind: kind, WorkflowID: workflowID, Payload: b}, nil
}
