package protocol

import (
	"strconv"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// ParseResumeAfter reads the values of a StreamIncoming call's wire.ResumeAfterKey metadata
// (§5.5): nil when there are none, else the first, the non-negative seq of the last delivery
// the consumer processed.
func ParseResumeAfter(values []string) (*int64, *Error) {
	if len(values) == 0 {
		return nil, nil
	}
	n, err := strconv.ParseInt(values[0], 10, 64)
	if err != nil || n < 0 {
		return nil, Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s=%q must be the non-negative seq of the last message you processed", wire.ResumeAfterKey, values[0])
	}
	return &n, nil
}

// ValidateDeliveryAck checks an AckDelivery request: a valid agent_id and the positive seq of
// the StreamItem being confirmed.
func ValidateDeliveryAck(req *routerpb.DeliveryAckRequest) *Error {
	if perr := ValidateAgentID(req.GetAgentId()); perr != nil {
		return perr
	}
	if req.GetSeq() <= 0 {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "seq must be the positive StreamItem.seq being confirmed, got %d", req.GetSeq())
	}
	return nil
}
