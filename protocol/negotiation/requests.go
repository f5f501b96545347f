package negotiation

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationpb"
	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// The checks of NegotiationService requests that need nothing but the request: the frontend
// runs them before it looks anything up or reaches the negotiation's workflow.

// ValidateID checks a negotiation_id: it becomes part of a Temporal workflow id and of task
// ids, so it has the shape of an agent id.
func ValidateID(id string) *protocol.Error {
	if id == "" {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "negotiation_id is required")
	}
	if perr := protocol.ValidateAgentID(id); perr != nil {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "negotiation_id: %s", perr.Msg)
	}
	return nil
}

// ValidateOpen checks a NegotiationOpen (§17): its id, a correlation_id equal to it, a topic,
// two or more distinct participants with agent ids, a known intensity and a valid debate
// timeout, which it returns (0 when none is given).
func ValidateOpen(req *negotiationpb.NegotiationOpen) (time.Duration, *protocol.Error) {
	id := req.GetNegotiationId()
	if perr := ValidateID(id); perr != nil {
		return 0, perr
	}
	if c := req.GetCorrelationId(); c != "" && c != id {
		return 0, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "correlation_id %q must equal negotiation_id %q (§17: a negotiation is scoped by its own id)", c, id)
	}
	if strings.TrimSpace(req.GetTopic()) == "" {
		return 0, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "topic is required (§17)")
	}
	parts := req.GetParticipants()
	if len(parts) < 2 {
		return 0, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "a negotiation needs at least two participants (§17), got %d", len(parts))
	}
	for i, p := range parts {
		if perr := protocol.ValidateAgentID(p); perr != nil {
			return 0, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "participants[%d]: %s", i, perr.Msg)
		}
		if slices.Contains(parts[:i], p) {
			return 0, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "participant %q is listed twice", p)
		}
	}
	if _, err := GuardrailsFor(req.GetIntensity()); err != nil {
		return 0, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "intensity: %v", err)
	}
	d := req.GetDebateTimeout()
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil || d.AsDuration() < 0 {
		return 0, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "debate_timeout is not a valid positive duration")
	}
	return d.AsDuration(), nil
}

// ValidateDraft checks a Proposal or CounterProposal: the negotiation, the drafting agent, a
// content type, and a payload within limit bytes (0: no limit).
func ValidateDraft(id, from, contentType string, payload []byte, limit int) *protocol.Error {
	if perr := ValidateID(id); perr != nil {
		return perr
	}
	if perr := protocol.ValidateAgentID(from); perr != nil {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "from_agent: %s", perr.Msg)
	}
	if contentType == "" {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "content_type is required")
	}
	if limit > 0 && len(payload) > limit {
		return protocol.Errorf(commonpb.ErrorCode_OVERSIZE_PAYLOAD, "payload is %d bytes; this server's limit is %d (SW4RM_MAX_PAYLOAD_BYTES)", len(payload), limit)
	}
	return nil
}

// ValidateEvaluation checks an Evaluation's negotiation and agent.
func ValidateEvaluation(req *negotiationpb.Evaluation) *protocol.Error {
	if perr := ValidateID(req.GetNegotiationId()); perr != nil {
		return perr
	}
	if perr := protocol.ValidateAgentID(req.GetFromAgent()); perr != nil {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "from_agent: %s", perr.Msg)
	}
	return nil
}

// ParseOpenPreferences reads an Open's wire.AgentPreferencesKey: a JSON object agent_id →
// AgentPreferences (protojson field names) naming participants only. Unlike
// ParsePreferences it leaves the guardrails to Derive, which clamps to them (§17.2).
func ParseOpenPreferences(raw string, participants []string) (map[string]*policypb.AgentPreferences, *protocol.Error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s is not a JSON object: %v", wire.AgentPreferencesKey, err)
	}
	out := make(map[string]*policypb.AgentPreferences, len(m))
	for agent, v := range m {
		if !slices.Contains(participants, agent) {
			return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s names %q, who is not a participant", wire.AgentPreferencesKey, agent)
		}
		var p policypb.AgentPreferences
		if err := protojson.Unmarshal(v, &p); err != nil {
			return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s[%q]: %v", wire.AgentPreferencesKey, agent, err)
		}
		out[agent] = &p
	}
	return out, nil
}
