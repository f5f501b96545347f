package protocol

import (
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// The addressing rule (§12 requires unicast; the canonical Envelope has no recipient field
// and canonical messages must not change, §5.1):
//  1. An ACKNOWLEDGEMENT envelope is routed to the producer of the message it acknowledges
//     (looked up by ack_for_message_id); a recipient in metadata is ignored for it.
//  2. Any other envelope is routed to the agent named by the wire.RecipientKey metadata
//     ("sw4rm-recipient"), which must be a registered agent.
//  3. Without a recipient the message is rejected with no_route; the reason says how to
//     address it. Nothing is ever broadcast: §4 and §12 define unicast only.

// Route is the routing decision for one envelope.
type Route struct {
	// Recipient is the destination agent for a unicast route.
	Recipient string
	// AckFor is set for ACKNOWLEDGEMENT envelopes: the message whose producer receives it.
	AckFor string
}

// Resolve applies the addressing rule to an envelope that already passed ValidateEnvelope.
// recipient is the value of wire.RecipientKey ("" when absent).
func Resolve(env *commonpb.Envelope, recipient string) (Route, *Error) {
	if env.GetMessageType() == commonpb.MessageType_ACKNOWLEDGEMENT {
		ack, err := ParseAck(env)
		if err != nil {
			return Route{}, err
		}
		return Route{AckFor: ack.AckForMessageID}, nil
	}
	if recipient != "" {
		if recipient == env.GetProducerId() {
			return Route{}, Errorf(commonpb.ErrorCode_NO_ROUTE, "recipient %q is the producer itself", truncate(recipient))
		}
		return Route{Recipient: recipient}, nil
	}
	return Route{}, Errorf(commonpb.ErrorCode_NO_ROUTE,
		"no recipient: set gRPC metadata %q to the target agent_id (§12 unicast; see docs/architecture.md, Addressing)", wire.RecipientKey)
}
