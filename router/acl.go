package router

import (
	"context"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/acl"
)

// checkACL applies the §6.3 message-type rules to a data message: its producer must be
// allowed to send its type and its recipient to receive it. A refusal is the message's
// rejection with permission_denied — recorded, NACKed and audited like any other (§13: never a
// silent drop). The producer is the proven caller: the frontend's authorization already
// checked that producer_id is the agent that signed the call (docs/security.md).
func (r *Router) checkACL(ctx context.Context, s *sending) (*protocol.Error, error) {
	if r.cfg.ACL == nil {
		return nil, nil
	}
	env, recipient := s.env, s.agent
	var caps []string
	if producer, err := r.agent(ctx, env.GetProducerId()); err == nil {
		caps = producer.Descriptor.GetCapabilities()
	}
	send := r.cfg.ACL.Decide(acl.Request{Agent: env.GetProducerId(), Capabilities: caps, Action: acl.SendMessage, MessageType: env.GetMessageType()})
	if !send.Allowed {
		return protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "acl: %s", send.Reason), nil
	}
	recv := r.cfg.ACL.Decide(acl.Request{Agent: recipient.Descriptor.GetAgentId(), Capabilities: recipient.Descriptor.GetCapabilities(),
		Action: acl.ReceiveMessage, MessageType: env.GetMessageType()})
	if !recv.Allowed {
		return protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "acl: %s", recv.Reason), nil
	}
	return nil, nil
}
