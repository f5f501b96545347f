package protocol

import "github.com/sw4rm/sw4rm-temporal/proto/commonpb"

// Short local names keep the transition tables readable.
const (
	msgSent      = commonpb.EnvelopeState_ENVELOPE_STATE_SENT
	msgReceived  = commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED
	msgRead      = commonpb.EnvelopeState_ENVELOPE_STATE_READ
	msgFulfilled = commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED
	msgRejected  = commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED
	msgFailed    = commonpb.EnvelopeState_ENVELOPE_STATE_FAILED
	msgTimedOut  = commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT
)

// messageTransitions is the message lifecycle of §11 and Appendix C. ACK stages may skip
// forward (an agent that only reports FULFILLED has necessarily received and read the
// message), but never go back. TIMED_OUT is terminal for acknowledgements (§11.1: a late ACK
// is recorded but does not change it); the RETRYING path belongs to the retry machinery.
var messageTransitions = map[commonpb.EnvelopeState][]commonpb.EnvelopeState{
	msgSent:     {msgReceived, msgRead, msgFulfilled, msgRejected, msgFailed, msgTimedOut},
	msgReceived: {msgRead, msgFulfilled, msgRejected, msgFailed},
	msgRead:     {msgFulfilled, msgFailed},
}

// MessageTransitionLegal reports whether a message may move from one lifecycle state to
// another. It is the store.LegalFunc the router passes to Advance.
func MessageTransitionLegal(from, to commonpb.EnvelopeState) bool {
	for _, s := range messageTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// MessageStateTerminal reports whether a message state is terminal (§21).
func MessageStateTerminal(s commonpb.EnvelopeState) bool {
	switch s {
	case msgFulfilled, msgRejected, msgFailed, msgTimedOut:
		return true
	}
	return false
}

// agentTransitions is the agent lifecycle diagram of Appendix C plus §8.1–§8.4. Two edges
// the diagram omits are added because the prose requires them: COMPLETED → RUNNABLE (§8.1:
// "before transitioning to RUNNABLE") and SHUTTING_DOWN from an idle or scheduled agent
// (§8.4: a shutdown must be possible whatever the agent is doing, not only while RUNNING).
var agentTransitions = map[commonpb.AgentState][]commonpb.AgentState{
	commonpb.AgentState_INITIALIZING:      {commonpb.AgentState_RUNNABLE, commonpb.AgentState_FAILED_STATE, commonpb.AgentState_SHUTTING_DOWN},
	commonpb.AgentState_RUNNABLE:          {commonpb.AgentState_SCHEDULED, commonpb.AgentState_SHUTTING_DOWN, commonpb.AgentState_FAILED_STATE},
	commonpb.AgentState_SCHEDULED:         {commonpb.AgentState_RUNNING, commonpb.AgentState_SHUTTING_DOWN, commonpb.AgentState_FAILED_STATE},
	commonpb.AgentState_RUNNING:           {commonpb.AgentState_WAITING, commonpb.AgentState_WAITING_RESOURCES, commonpb.AgentState_SUSPENDED, commonpb.AgentState_COMPLETED, commonpb.AgentState_FAILED_STATE, commonpb.AgentState_SHUTTING_DOWN},
	commonpb.AgentState_WAITING:           {commonpb.AgentState_RUNNING, commonpb.AgentState_FAILED_STATE, commonpb.AgentState_SHUTTING_DOWN},
	commonpb.AgentState_WAITING_RESOURCES: {commonpb.AgentState_RUNNING, commonpb.AgentState_FAILED_STATE, commonpb.AgentState_SHUTTING_DOWN},
	commonpb.AgentState_SUSPENDED:         {commonpb.AgentState_RESUMED, commonpb.AgentState_FAILED_STATE, commonpb.AgentState_SHUTTING_DOWN},
	commonpb.AgentState_RESUMED:           {commonpb.AgentState_RUNNING, commonpb.AgentState_FAILED_STATE},
	commonpb.AgentState_COMPLETED:         {commonpb.AgentState_RUNNABLE, commonpb.AgentState_SHUTTING_DOWN},
	commonpb.AgentState_FAILED_STATE:      {commonpb.AgentState_RECOVERING, commonpb.AgentState_SHUTTING_DOWN},
	commonpb.AgentState_SHUTTING_DOWN:     {commonpb.AgentState_FAILED_STATE},
	commonpb.AgentState_RECOVERING:        {commonpb.AgentState_RUNNABLE, commonpb.AgentState_FAILED_STATE, commonpb.AgentState_SHUTTING_DOWN},
}

// AgentTransitionLegal reports whether an agent may move between two lifecycle states (§8).
func AgentTransitionLegal(from, to commonpb.AgentState) bool {
	for _, s := range agentTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}
