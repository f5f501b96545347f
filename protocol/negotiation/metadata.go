package negotiation

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// Negotiation modes, the values of wire.NegotiationModeKey.
const (
	// ModeContract is the propose/counter/evaluate negotiation of §17.
	ModeContract = "contract"
	// ModeDebate is the round-robin debate of ADR-011 (package protocol/debate).
	ModeDebate = "debate"
)

// ParseMode reads wire.NegotiationModeKey's value: "" is ModeContract; anything but the two modes is
// refused (ErrInvalidConfig).
func ParseMode(v string) (string, error) {
	switch m := strings.ToLower(strings.TrimSpace(v)); m {
	case "":
		return ModeContract, nil
	case ModeContract, ModeDebate:
		return m, nil
	}
	return "", fmt.Errorf("%w: %s %q is not %q or %q", ErrInvalidConfig, wire.NegotiationModeKey, v, ModeContract, ModeDebate)
}

// ParsePreferences reads wire.AgentPreferencesKey' value, a JSON object agent_id →
// AgentPreferences in protojson form (max_rounds or maxRounds, ...). Empty text means none
// (nil). It refuses (ErrInvalidPolicy) text that is not such an object, unknown fields, an
// empty agent id and values ValidatePreferences refuses; it does not check that the agents
// are participants.
func ParsePreferences(text string) (map[string]*policypb.AgentPreferences, error) {
	if strings.TrimSpace(text) == "" {
		return nil, nil
	}
	var raw map[string]json.RawMessage
	// Decoding bytes in memory is deterministic; workflowcheck flags encoding/json only
	// because its reflection reaches runtime internals.
	//workflowcheck:ignore
	if err := json.Unmarshal([]byte(text), &raw); err != nil || raw == nil {
		if err == nil {
			err = fmt.Errorf("it is null")
		}
		return nil, fmt.Errorf("%w: %s is not a JSON object of agent id to preferences: %v", ErrInvalidPolicy, wire.AgentPreferencesKey, err)
	}
	agents := make([]string, 0, len(raw))
	// Collected, then sorted: the order of the map does not leak out.
	//workflowcheck:ignore
	for a := range raw {
		agents = append(agents, a)
	}
	slices.Sort(agents)
	out := make(map[string]*policypb.AgentPreferences, len(raw))
	for _, a := range agents {
		if a == "" {
			return nil, fmt.Errorf("%w: %s has an empty agent id", ErrInvalidPolicy, wire.AgentPreferencesKey)
		}
		p := &policypb.AgentPreferences{}
		//workflowcheck:ignore
		if err := protojson.Unmarshal(raw[a], p); err != nil {
			return nil, fmt.Errorf("%w: %s: preferences of %q: %v", ErrInvalidPolicy, wire.AgentPreferencesKey, a, err)
		}
		if err := ValidatePreferences(p); err != nil {
			return nil, fmt.Errorf("%s: preferences of %q: %w", wire.AgentPreferencesKey, a, err)
		}
		out[a] = p
	}
	return out, nil
}
