package hitl

import (
	"encoding/json"
	"mime"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// The HITL agent's door (§15: "The Scheduler MUST issue HITL_INVOCATION messages"; §15.2's
// message shapes). When the deployment names a HITL agent (hitl.Policy.Agent,
// SW4RM_HITL_AGENT), every invocation is also sent to it on the message plane as a
// HITL_INVOCATION envelope from the scheduler, and the agent decides by sending the
// scheduler the §15.2 HITL_DECISION object. The canonical MessageType has no HITL_DECISION,
// so the reply travels as a HITL_INVOCATION too, addressed to the scheduler (the recipient
// metadata "scheduler"), optionally naming the invocation's envelope in the content_type
// parameter sw4rm-in-response-to.

// ViaMessage is the Via of a decision a HITL agent sent on the message plane.
const ViaMessage = "message"

// invocationNamespace derives the message_ids of invocation envelopes.
var invocationNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("sw4rm:hitl-invocation"))

// InvocationMessageID is the message_id of the HITL_INVOCATION envelope of an invocation: a
// UUID derived from the invocation id (name-based, RFC 9562 version 5), so that an activity
// retry or a second send of one invocation is the same message, admitted once, and the
// agent's reply can name it.
func InvocationMessageID(invocationID string) string {
	return uuid.NewSHA1(invocationNamespace, []byte(invocationID)).String()
}

// InvocationPayload is the payload of a HITL_INVOCATION envelope: §15.2's HITL_INVOCATION
// object, with the context inline (what context_uri would point to) and the options offered.
type InvocationPayload struct {
	// InvocationID names the invocation; the decision must name it too.
	InvocationID string `json:"invocation_id"`
	// ReasonType is one of the eight §15 reason types, by enum name.
	ReasonType string `json:"reason_type"`
	// CorrelationID links the invocation to the flow that raised it.
	CorrelationID string `json:"correlation_id,omitempty"`
	// RequestedBy is the workflow or agent that raised it.
	RequestedBy string `json:"requested_by,omitempty"`
	// Subject is what it is about.
	Subject Subject `json:"subject"`
	// Context is what a human needs to decide (§15.1: facts, diffs, risk notes, prior
	// attempts, inference metadata).
	Context Context `json:"context"`
	// ProposedActions are the options offered.
	ProposedActions []string `json:"proposed_actions,omitempty"`
	// SuggestedAction is the requester's recommendation.
	SuggestedAction string `json:"suggested_action,omitempty"`
	// Priority orders invocations (lower is more urgent).
	Priority int32 `json:"priority"`
	// DeadlineTS is when the fallback applies unless a decision arrives, RFC 3339 in UTC.
	DeadlineTS string `json:"deadline_ts"`
}

// InvocationEnvelope is the HITL_INVOCATION envelope that tells a HITL agent of inv, whose
// fallback applies at deadline: message_id InvocationMessageID, correlation_id the
// invocation's (its workflow id when it has none), content_type application/json and the
// InvocationPayload. The router sets the producer, the scheduler.
func InvocationEnvelope(inv Invocation, deadline time.Time) (*commonpb.Envelope, error) {
	payload, err := json.Marshal(InvocationPayload{
		InvocationID: inv.InvocationID, ReasonType: inv.ReasonType, CorrelationID: inv.CorrelationID, RequestedBy: inv.RequestedBy,
		Subject: inv.Subject, Context: inv.Context, ProposedActions: inv.ProposedActions, SuggestedAction: inv.SuggestedAction,
		Priority: inv.Priority, DeadlineTS: deadline.UTC().Format(time.RFC3339),
	})
	if err != nil {
		return nil, err
	}
	correlation := inv.CorrelationID
	if correlation == "" {
		correlation = WorkflowID(inv.InvocationID)
	}
	return &commonpb.Envelope{
		MessageId: InvocationMessageID(inv.InvocationID), CorrelationId: correlation, MessageType: commonpb.MessageType_HITL_INVOCATION,
		ContentType: "application/json", ContentLength: uint64(len(payload)), Payload: payload,
	}, nil
}

// DecisionPayload is the payload of a HITL agent's reply: §15.2's HITL_DECISION object.
type DecisionPayload struct {
	// InvocationID names the invocation decided.
	InvocationID string `json:"invocation_id"`
	// Decision is approve, deny, modify or defer, in any case.
	Decision string `json:"decision"`
	// Rationale says why; required (§15.1).
	Rationale string `json:"rationale"`
	// Patch is a modify's patch, base64 in JSON; null or absent otherwise.
	Patch []byte `json:"patch_b64,omitempty"`
}

// DecisionOfEnvelope reads a HITL agent's reply — a HITL_INVOCATION envelope addressed to the
// scheduler whose application/json payload is a DecisionPayload — as the decision of its
// producer through the message door (ViaMessage), not yet attested. A reply that names an
// envelope in sw4rm-in-response-to must name the invocation's (InvocationMessageID). Whether
// the producer may decide is not checked here. Every refusal is VALIDATION_ERROR.
func DecisionOfEnvelope(env *commonpb.Envelope) (Decision, *protocol.Error) {
	invalid := func(format string, args ...any) (Decision, *protocol.Error) {
		return Decision{}, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, format, args...)
	}
	mt, _, err := mime.ParseMediaType(env.GetContentType())
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return invalid("a HITL decision is application/json (§15.2 HITL_DECISION), not %q", env.GetContentType())
	}
	link, perr := protocol.ParseLinkage(env.GetContentType())
	if perr != nil {
		return Decision{}, perr
	}
	var p DecisionPayload
	if err := json.Unmarshal(env.GetPayload(), &p); err != nil {
		return invalid("the payload is not §15.2's HITL_DECISION {invocation_id, decision, rationale, patch_b64}: %v", err)
	}
	action, err := ParseAction(p.Decision)
	if err != nil {
		return invalid("%v", err)
	}
	d := Decision{InvocationID: p.InvocationID, Decision: action, Rationale: p.Rationale, Patch: p.Patch, Operator: env.GetProducerId(), Via: ViaMessage}
	if err := d.Check(); err != nil {
		// Check's reasons already start with the code they refuse with.
		return invalid("%s", strings.TrimPrefix(err.Error(), "validation_error: "))
	}
	if strings.ContainsAny(d.InvocationID, " \t\r\n") {
		return invalid("invocation_id %q is not an invocation id", d.InvocationID)
	}
	if link.InResponseTo != "" && link.InResponseTo != InvocationMessageID(d.InvocationID) {
		return invalid("%s=%s is not the HITL_INVOCATION of invocation %s (its message_id is %s)",
			wire.InResponseToParam, link.InResponseTo, d.InvocationID, InvocationMessageID(d.InvocationID))
	}
	return d, nil
}
