package router

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// TestRequeueRevalidates: a dead letter that admission refused (here an oversize payload,
// as a policy violation holds it) is not let in by a requeue; the entry stays requeueable
// and nothing reaches the recipient.
func TestRequeueRevalidates(t *testing.T) {
	st := memory.New()
	t.Cleanup(st.Close)
	r := sweepFixture(t, st, time.Minute)
	r.cfg.MaxPayloadBytes = 1024
	payload := bytes.Repeat([]byte("x"), 2048)
	env := &commonpb.Envelope{MessageId: uuid.NewString(), ProducerId: "p", CorrelationId: uuid.NewString(), SequenceNumber: 1,
		MessageType: commonpb.MessageType_DATA, ContentType: "text/plain", Payload: payload, ContentLength: uint64(len(payload))}
	e, err := st.DLQ().PutDeadLetter(t.Context(), store.DLQEntry{MessageID: env.GetMessageId(), Envelope: env, RecipientID: "c",
		Class: store.DLQPolicyViolation, ErrorCode: commonpb.ErrorCode_OVERSIZE_PAYLOAD, FailedAt: time.Now()})
	require.NoError(t, err)

	_, err = r.Requeue(t.Context(), e.ID)
	require.Error(t, err)
	require.Equal(t, commonpb.ErrorCode_OVERSIZE_PAYLOAD, protocol.CodeOf(err), "%v", err)
	depth, err := st.Messages().Depth(t.Context(), "c")
	require.NoError(t, err)
	require.Zero(t, depth, "nothing was admitted")
	after, err := st.DLQ().GetDeadLetter(t.Context(), e.ID)
	require.NoError(t, err)
	require.Empty(t, after.RequeuedAs, "the entry stays requeueable")
}
