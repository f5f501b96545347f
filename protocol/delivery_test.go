package protocol_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

func TestParseResumeAfter(t *testing.T) {
	n, perr := protocol.ParseResumeAfter(nil)
	assert.Nil(t, perr)
	assert.Nil(t, n)
	n, perr = protocol.ParseResumeAfter([]string{"0", "9"})
	require.Nil(t, perr)
	assert.Equal(t, int64(0), *n)
	for _, bad := range []string{"-1", "x", ""} {
		_, perr := protocol.ParseResumeAfter([]string{bad})
		require.NotNil(t, perr, "%q", bad)
		assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, perr.Code)
	}
	_, perr = protocol.ParseResumeAfter([]string{"-1"})
	assert.Equal(t, `validation_error: sw4rm-resume-after="-1" must be the non-negative seq of the last message you processed`, perr.Error())
}

func TestValidateDeliveryAck(t *testing.T) {
	assert.Nil(t, protocol.ValidateDeliveryAck(&routerpb.DeliveryAckRequest{AgentId: "a", Seq: 1}))
	assert.Equal(t, "validation_error: seq must be the positive StreamItem.seq being confirmed, got 0",
		protocol.ValidateDeliveryAck(&routerpb.DeliveryAckRequest{AgentId: "a"}).Error())
	assert.NotNil(t, protocol.ValidateDeliveryAck(&routerpb.DeliveryAckRequest{Seq: 1}))
}
