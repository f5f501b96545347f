package protocol_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// TestAckIn: an ACK is rewritten into the other dialect with the same meaning, and left as
// it is when already in the asked dialect, malformed, or not an ACK.
func TestAckIn(t *testing.T) {
	named := protocol.NewAckEnvelope(protocol.AckEnvelopeInput{MessageID: "m-ack", ProducerID: protocol.SchedulerID, CorrelationID: "c",
		Ack: protocol.AckPayload{AckForMessageID: "m-1", Stage: commonpb.AckStage_REJECTED, ErrorCode: commonpb.ErrorCode_BUFFER_FULL, Note: "full"}})

	numbered := protocol.AckIn(named, protocol.AckEnumNumbers)
	assert.JSONEq(t, `{"ack_for_message_id":"m-1","ack_stage":4,"error_code":1,"note":"full"}`, string(numbered.GetPayload()))
	assert.Equal(t, uint64(len(numbered.GetPayload())), numbered.GetContentLength())
	assert.Equal(t, "m-ack", numbered.GetMessageId())
	assert.Contains(t, string(named.GetPayload()), `"REJECTED"`, "the original is not modified")
	e, ok := protocol.AckEnumsOf(numbered.GetPayload())
	assert.True(t, ok)
	assert.Equal(t, protocol.AckEnumNumbers, e)

	back := protocol.AckIn(numbered, protocol.AckEnumNames)
	assert.JSONEq(t, string(named.GetPayload()), string(back.GetPayload()))
	a, perr := protocol.ParseAck(back)
	require.Nil(t, perr)
	assert.Equal(t, commonpb.ErrorCode_BUFFER_FULL, a.ErrorCode)

	// A RECEIVED without an error code writes error_code 0, as the published SDKs do.
	received := protocol.NewAckEnvelope(protocol.AckEnvelopeInput{MessageID: "m-r", Ack: protocol.AckPayload{AckForMessageID: "m-1", Stage: commonpb.AckStage_RECEIVED}})
	assert.JSONEq(t, `{"ack_for_message_id":"m-1","ack_stage":1,"error_code":0}`, string(protocol.AckIn(received, protocol.AckEnumNumbers).GetPayload()))

	assert.Same(t, named, protocol.AckIn(named, protocol.AckEnumNames), "already in the dialect")
	data := &commonpb.Envelope{MessageType: commonpb.MessageType_DATA, ContentType: "application/json", Payload: []byte(`{"ack_stage":"RECEIVED"}`)}
	assert.Same(t, data, protocol.AckIn(data, protocol.AckEnumNumbers), "not an ACK")
	bad := &commonpb.Envelope{MessageType: commonpb.MessageType_ACKNOWLEDGEMENT, ContentType: "application/json", Payload: []byte(`{"ack_stage":"NOPE"}`)}
	assert.Same(t, bad, protocol.AckIn(bad, protocol.AckEnumNumbers), "malformed: delivered as written")
}

func TestParseAckEnums(t *testing.T) {
	for v, want := range map[string]protocol.AckEnums{"names": protocol.AckEnumNames, "numbers": protocol.AckEnumNumbers} {
		got, perr := protocol.ParseAckEnums(v)
		require.Nil(t, perr)
		assert.Equal(t, want, got)
		assert.Equal(t, v, got.String())
	}
	_, perr := protocol.ParseAckEnums("Numbers")
	require.NotNil(t, perr)
	assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, perr.Code)
	_, ok := protocol.AckEnumsOf([]byte(`{"ack_for_message_id":"m"}`))
	assert.False(t, ok, "no ack_stage says nothing")
}
