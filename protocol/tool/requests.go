package tool

import (
	"strconv"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
)

// The checks of ToolService requests that need nothing but the request: the frontend runs
// them before it reads a descriptor or records the call.

// ValidateCall checks a ToolCall's provider, tool name and the size of its arguments, at
// most maxArgs bytes (they travel in the call's workflow history).
func ValidateCall(req *toolpb.ToolCall, maxArgs int) error {
	if err := ValidateProviderID(req.GetProviderId()); err != nil {
		return err
	}
	if err := ValidateToolName(req.GetToolName()); err != nil {
		return err
	}
	if len(req.GetArgs()) > maxArgs {
		return Errorf(CodeValidation, "args are %d bytes, more than %d", len(req.GetArgs()), maxArgs)
	}
	return nil
}

// ParseResumeAfter reads the frame number a resumed stream continues after; key names the
// metadata it came in, for the refusal.
func ParseResumeAfter(key, v string) (uint64, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, Errorf(CodeValidation, "%s %q is not a frame number", key, strings.TrimSpace(v))
	}
	return n, nil
}

// ReplyEnvelope is the one value of the reply metadata: the call's result also goes to the
// calling agent as an envelope.
const ReplyEnvelope = "envelope"

// ParseReply reads the reply metadata (key, value v) of a call made for agent ("" when
// none is named; agentKey names the metadata that names it): "" means no envelope,
// ReplyEnvelope an envelope to agent, which must then be named.
func ParseReply(key, v, agentKey, agent string) (bool, error) {
	switch v = strings.TrimSpace(v); v {
	case "":
		return false, nil
	case ReplyEnvelope:
		if agent == "" {
			return false, Errorf(CodeValidation, "%s: envelope needs the calling agent (%s)", key, agentKey)
		}
		return true, nil
	}
	return false, Errorf(CodeValidation, "%s %q: the only value is envelope", key, v)
}
