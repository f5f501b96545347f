package workflows

import (
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
)

// KindAgent is the SW4RMKind search-attribute value of agent lifecycle runs.
const KindAgent = "agent"

// Handoff kinds of the agent lifecycle: what a store write promises workflow
// agent/<agent_id> through the outbox (package outbox, docs/reliability.md).
const (
	// HandoffAgentRegister starts agent/<agent_id>, or signals the running one with
	// AgentRegisterSignal, after the registration was stored. Payload: AgentRegisterHandoff.
	HandoffAgentRegister = "agent.register"
	// HandoffAgentControlAck signals agent/<agent_id> with AgentControlAckSignal after the
	// ACK of one of the scheduler's CONTROL messages was stored. Payload:
	// AgentControlAckHandoff.
	HandoffAgentControlAck = "agent.control_ack"
	// HandoffAgentDeregister signals agent/<agent_id> with AgentDeregisterSignal after the
	// agent was removed from the registry. Payload: AgentDeregisterHandoff.
	HandoffAgentDeregister = "agent.deregister"
	// HandoffAgentResponseWait signals agent/<agent_id> with AgentResponseWaitSignal after
	// the agent's request that requires a response was tracked, or its tracking ended
	// (004 §2). Payload: AgentResponseWaitHandoff.
	HandoffAgentResponseWait = "agent.response_wait"
)

// AgentRegisterHandoff is the payload of a HandoffAgentRegister handoff.
type AgentRegisterHandoff struct {
	// Input starts the lifecycle if it is not running.
	Input AgentLifecycleInput
	// Registration is the AgentRegisterSignal's payload.
	Registration AgentRegistration
}

// AgentControlAckHandoff is the payload of a HandoffAgentControlAck handoff.
type AgentControlAckHandoff struct {
	// AgentID names the lifecycle, agent/<agent_id>.
	AgentID string
	// Ack is the AgentControlAckSignal's payload.
	Ack ControlAck
}

// AgentDeregisterHandoff is the payload of a HandoffAgentDeregister handoff.
type AgentDeregisterHandoff struct {
	// AgentID names the lifecycle, agent/<agent_id>.
	AgentID string
	// Deregistration is the AgentDeregisterSignal's payload.
	Deregistration AgentDeregistration
}

// AgentResponseWaitHandoff is the payload of a HandoffAgentResponseWait handoff.
type AgentResponseWaitHandoff struct {
	// AgentID names the lifecycle, agent/<agent_id>: the request's producer.
	AgentID string
	// Wait is the AgentResponseWaitSignal's payload.
	Wait ResponseWait
}

// AgentStartOptions are the start options of workflow agent/<agentID> on taskQueue: its ID
// and the search attributes the Temporal UI and the frontend filter on.
func AgentStartOptions(agentID, taskQueue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:        AgentWorkflowID(agentID),
		TaskQueue: taskQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			KindKey.ValueSet(KindAgent),
			AgentIDKey.ValueSet(agentID),
			AgentStateKey.ValueSet(commonpb.AgentState_INITIALIZING.String()),
		),
	}
}
