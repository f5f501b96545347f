package router

import (
	"context"
	"encoding/json"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/acl"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
)

// checkACL applies the §6.3 rules to a data message: its producer must be allowed to send its
// type and its recipient to receive it, and a TOOL_CALL must be a call its producer may make
// of the recipient's tool. A refusal is the message's rejection with permission_denied —
// recorded, NACKed and audited like any other (§13: never a silent drop); an allowed
// decision goes to the access log (§6.5: every access decision logged). The producer is the
// proven caller: the frontend's authorization already checked that producer_id is the agent
// that signed the call (docs/security.md).
func (r *Router) checkACL(ctx context.Context, s *sending) (*protocol.Error, error) {
	if r.cfg.ACL == nil {
		return nil, nil
	}
	env, recipient := s.env, s.agent
	var caps []string
	if producer, err := r.agent(ctx, env.GetProducerId()); err == nil {
		caps = producer.Descriptor.GetCapabilities()
	}
	requests := []acl.Request{
		{Agent: env.GetProducerId(), Capabilities: caps, Action: acl.SendMessage, MessageType: env.GetMessageType()},
		{Agent: recipient.Descriptor.GetAgentId(), Capabilities: recipient.Descriptor.GetCapabilities(), Action: acl.ReceiveMessage, MessageType: env.GetMessageType()},
	}
	if env.GetMessageType() == commonpb.MessageType_TOOL_CALL {
		// An agent calling another agent's tool directly, not through ToolService (which
		// decides its calls itself, and whose offers come from the scheduler, never here):
		// the same CallTool decision, the recipient being the provider.
		requests = append(requests, directToolCall(env, recipient.Descriptor.GetAgentId(), caps))
	}
	for _, req := range requests {
		d := r.cfg.ACL.Decide(req)
		if !d.Allowed {
			return protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "acl: %s", d.Reason), nil
		}
		details := map[string]any{"action": string(req.Action), "decided_by": "acl", "rule": d.Rule, "reason": d.Reason}
		if name := r.cfg.ACL.RuleName(d); name != "" {
			details["rule_name"] = name
		}
		r.cfg.Access.Allowed(ctx, "access", audit.Event{Type: "access.allowed", Actor: env.GetProducerId(), AgentID: req.Agent,
			CorrelationID: env.GetCorrelationId(), MessageID: env.GetMessageId(), Details: details})
	}
	return nil, nil
}

// directToolCall is the CallTool request of a TOOL_CALL envelope sent to provider: the tool
// and execution policy its payload names (tool.CallPayload). A payload that names none asks
// for the tool "", which only a rule for every tool ("*") allows.
func directToolCall(env *commonpb.Envelope, provider string, caps []string) acl.Request {
	var p tool.CallPayload
	_ = json.Unmarshal(env.GetPayload(), &p) // what does not decode names nothing
	return acl.Request{Agent: env.GetProducerId(), Capabilities: caps, Action: acl.CallTool, Tool: p.ToolName, Provider: provider,
		NetworkPolicy: p.Policy.NetworkPolicy, PrivilegeLevel: p.Policy.PrivilegeLevel}
}
