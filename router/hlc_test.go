package router

import (
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/hlc"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// TestSendStampsHLC: every envelope the router admits carries its HLC (§4, §5.2), after the
// producer's when it sent one; the ACK forwarded to the producer carries one too, and the
// admission's audit row carries the envelope's HLC. A malformed hlc_timestamp and
// one beyond the skew budget are refused with VALIDATION_ERROR.
func TestSendStampsHLC(t *testing.T) {
	st := memory.New()
	t.Cleanup(st.Close)
	sweepFixture(t, st, time.Minute) // registers p and c
	physical := time.Unix(1725552000, 0)
	clock, err := hlc.NewClock("router-a", func() time.Time { return physical }, 5*time.Second)
	require.NoError(t, err)
	sink := audit.New(slog.New(slog.DiscardHandler), st.Audit())
	sink.SetClock(clock)
	r := New(st, Config{AckTimeout: time.Minute}, sink)

	send := func(hlcText string) (*commonpb.Envelope, *protocol.Error) {
		t.Helper()
		env := &commonpb.Envelope{MessageId: uuid.NewString(), ProducerId: "p", CorrelationId: "corr", SequenceNumber: uint64(time.Now().UnixNano()),
			MessageType: commonpb.MessageType_DATA, ContentType: "application/json", Payload: []byte(`{}`), ContentLength: 2, HlcTimestamp: hlcText}
		perr, err := r.Send(t.Context(), env, "c")
		require.NoError(t, err)
		return env, perr
	}
	stored := func(id string) hlc.Timestamp {
		t.Helper()
		rec, err := st.Messages().GetMessage(t.Context(), id)
		require.NoError(t, err)
		ts, err := hlc.Parse(rec.Envelope.GetHlcTimestamp())
		require.NoError(t, err, "the stored envelope carries an HLC")
		return ts
	}

	plain, perr := send("")
	require.Nil(t, perr)
	first := stored(plain.GetMessageId())
	require.Equal(t, "router-a", first.Node)
	require.Equal(t, physical.UnixMicro(), first.Physical)

	// A producer whose clock is 2 s ahead: the admission orders after its send.
	producer := hlc.Timestamp{Physical: physical.Add(2 * time.Second).UnixMicro(), Logical: 3, Node: "agent-p"}
	merged, perr := send(producer.String())
	require.Nil(t, perr)
	second := stored(merged.GetMessageId())
	require.True(t, producer.Before(second), "%s after the producer's %s", second, producer)
	require.True(t, first.Before(second))
	// §4's unpadded example shape is accepted too.
	_, perr = send("1725552000.000001.node-a")
	require.Nil(t, perr)

	events, err := st.Audit().List(t.Context(), store.AuditFilter{MessageID: merged.GetMessageId(), TypePrefix: "message.admitted"})
	require.NoError(t, err)
	require.Len(t, events, 1)
	row, err := hlc.Parse(events[0].HLC)
	require.NoError(t, err)
	require.Equal(t, second, row, "the admission's row carries the HLC its envelope was stamped with")

	// The consumer's ACK is stamped too, and its forward to the producer carries the stamp.
	perr, err = r.Send(t.Context(), protocol.NewAckEnvelope(protocol.AckEnvelopeInput{MessageID: uuid.NewString(), ProducerID: "c",
		CorrelationID: "corr", Ack: protocol.AckPayload{AckForMessageID: plain.GetMessageId(), Stage: commonpb.AckStage_RECEIVED}}), "")
	require.NoError(t, err)
	require.Nil(t, perr)
	got, err := st.Messages().Claim(t.Context(), store.ClaimRequest{AgentID: "p", Limit: 10, Lease: time.Minute, Weights: DefaultLaneWeights})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, commonpb.MessageType_ACKNOWLEDGEMENT, got[0].Envelope.GetMessageType())
	ackTS, err := hlc.Parse(got[0].Envelope.GetHlcTimestamp())
	require.NoError(t, err)
	require.True(t, row.Before(ackTS), "the ACK %s orders after what came before it", ackTS)

	for name, bad := range map[string]string{
		"malformed":          "yesterday",
		"beyond skew budget": hlc.Timestamp{Physical: physical.Add(time.Minute).UnixMicro(), Node: "runaway"}.String(),
	} {
		before := clock.Now()
		_, perr := send(bad)
		require.NotNil(t, perr, name)
		require.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, perr.Code, name)
		require.Contains(t, perr.Msg, "hlc_timestamp", name)
		require.Less(t, clock.Now().Physical-before.Physical, int64(time.Second/time.Microsecond), "%s: the refused HLC did not drag the clock", name)
	}
}
