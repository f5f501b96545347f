package workflows

import (
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
)

// KindAgent is the SW4RMKind search-attribute value of agent lifecycle runs.
const KindAgent = "agent"

// Outbox entry kinds of the agent lifecycle: what a store write promises workflow
// agent/<agent_id> through the outbox (package outbox, docs/reliability.md).
const (
	// OutboxAgentRegister starts agent/<agent_id>, or signals the running one with
	// AgentRegisterSignal, after the registration was stored. Payload: AgentRegisterPayload.
	OutboxAgentRegister = "agent.register"
	// OutboxAgentControlAck signals agent/<agent_id> with AgentControlAckSignal after the
	// ACK of one of the scheduler's CONTROL messages was stored. Payload:
	// AgentControlAckPayload.
	OutboxAgentControlAck = "agent.control_ack"
	// OutboxAgentDeregister signals agent/<agent_id> with AgentDeregisterSignal after the
	// agent was removed from the registry. Payload: AgentDeregisterPayload.
	OutboxAgentDeregister = "agent.deregister"
	// OutboxAgentResponseWait signals agent/<agent_id> with AgentResponseWaitSignal after
	// the agent's request that requires a response was tracked, or its tracking ended
	// (004 §2). Payload: AgentResponseWaitPayload.
	OutboxAgentResponseWait = "agent.response_wait"
)

// AgentRegisterPayload is the payload of an OutboxAgentRegister outbox entry.
type AgentRegisterPayload struct {
	// Input starts the lifecycle if it is not running.
	Input AgentLifecycleInput
	// Registration is the AgentRegisterSignal's payload.
	Registration AgentRegistration
}

// AgentControlAckPayload is the payload of an OutboxAgentControlAck outbox entry.
type AgentControlAckPayload struct {
	// AgentID names the lifecycle, agent/<agent_id>.
	AgentID string
	// Ack is the AgentControlAckSignal's payload.
	Ack ControlAck
}

// AgentDeregisterPayload is the payload of an OutboxAgentDeregister outbox entry.
type AgentDeregisterPayload struct {
	// AgentID names the lifecycle, agent/<agent_id>.
	AgentID string
	// Deregistration is the AgentDeregisterSignal's payload.
	Deregistration AgentDeregistration
}

// AgentResponseWaitPayload is the payload of an OutboxAgentResponseWait outbox entry.
type AgentResponseWaitPayload struct {
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
		StaticSummary: summary("lifecycle of agent %s (§8)", agentID),
	}
}
