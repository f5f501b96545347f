package protocol

import (
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
)

// Limits of a handoff request (§17.6).
const (
	// MinHandoffPriority is the lowest HandoffRequest.priority, as for tasks (§7.1).
	MinHandoffPriority = -19
	// MaxHandoffPriority is the highest HandoffRequest.priority.
	MaxHandoffPriority = 20
	// MaxHandoffTimeout bounds HandoffRequest.timeout, the wait for acceptance.
	MaxHandoffTimeout = 24 * time.Hour
	// DefaultHandoffContentType is the context snapshot's content type when none is given.
	DefaultHandoffContentType = "application/json"
)

// HandoffContentTypes are the context snapshot's content types (004 item 8).
var HandoffContentTypes = []string{"application/json", "application/protobuf", "text/plain"}

// ValidateHandoffRequest checks a HandoffRequest (§17.6) whose context snapshot has the
// content type contentType (004 item 8; empty means DefaultHandoffContentType): request_id
// shaped like an agent id (it names workflow handoff/<request_id>), from_agent, to_agent or
// capabilities_required, to_agent other than from_agent, priority in −19..20, a timeout in
// (0, 24h], a delegation depth below the budget's max_delegation_depth, a known content type
// and a snapshot within DefaultMaxPayloadBytes. Every refusal is VALIDATION_ERROR.
func ValidateHandoffRequest(req *handoffpb.HandoffRequest, contentType string) *Error {
	bad := func(format string, args ...any) *Error {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, format, args...)
	}
	if req == nil {
		return bad("handoff request is required")
	}
	if id := req.GetRequestId(); id == "" {
		return bad("request_id is required (§17.6)")
	} else if !agentIDPattern.MatchString(id) {
		return bad("request_id %q must be 1-128 characters of letters, digits and . _ : @ - starting with a letter or digit", truncate(id))
	}
	if req.GetFromAgent() == "" {
		return bad("from_agent is required (§17.6)")
	}
	if err := ValidateAgentID(req.GetFromAgent()); err != nil {
		return bad("from_agent: %s", err.Msg)
	}
	if to := req.GetToAgent(); to != "" {
		if err := ValidateAgentID(to); err != nil {
			return bad("to_agent: %s", err.Msg)
		}
		if to == req.GetFromAgent() {
			return bad("to_agent %q is from_agent: an agent cannot hand off to itself", to)
		}
	} else if len(req.GetCapabilitiesRequired()) == 0 {
		return bad("to_agent or capabilities_required is required: name the target or the capabilities to route by (§17.6)")
	}
	for _, c := range req.GetCapabilitiesRequired() {
		if c == "" {
			return bad("capabilities_required holds an empty capability")
		}
	}
	if p := req.GetPriority(); p < MinHandoffPriority || p > MaxHandoffPriority {
		return bad("priority %d is outside %d..%d", p, MinHandoffPriority, MaxHandoffPriority)
	}
	if req.GetTimeout() == nil {
		return bad("timeout is required: the maximum wait for acceptance (§17.6)")
	}
	if err := req.GetTimeout().CheckValid(); err != nil {
		return bad("timeout: %v", err)
	}
	if d := req.GetTimeout().AsDuration(); d <= 0 || d > MaxHandoffTimeout {
		return bad("timeout %s must be positive and at most %s", d, MaxHandoffTimeout)
	}
	if b := req.GetBudget(); b.GetMaxDelegationDepth() > 0 && b.GetCurrentDepth() >= b.GetMaxDelegationDepth() {
		return bad("delegation depth %d reaches max %d", b.GetCurrentDepth(), b.GetMaxDelegationDepth())
	}
	if contentType == "" {
		contentType = DefaultHandoffContentType
	}
	mt, err := parseMIME(contentType)
	known := false
	for _, ct := range HandoffContentTypes {
		known = known || (err == nil && mt == ct)
	}
	if !known {
		return bad("context content type %q is not one of %v (004 item 8)", truncate(contentType), HandoffContentTypes)
	}
	if n := len(req.GetContextSnapshot()); n > DefaultMaxPayloadBytes {
		return bad("context_snapshot is %d bytes; the limit is %d", n, DefaultMaxPayloadBytes)
	}
	return nil
}
