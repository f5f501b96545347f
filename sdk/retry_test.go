package sdk

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// ackOf builds the ACK (or NACK) from producer of message id at stage.
func ackOf(producer, id string, stage commonpb.AckStage, code commonpb.ErrorCode) *commonpb.Envelope {
	return protocol.NewAckEnvelope(protocol.AckEnvelopeInput{MessageID: uuid.NewString(), ProducerID: producer, CorrelationID: uuid.NewString(),
		Ack: protocol.AckPayload{AckForMessageID: id, Stage: stage, ErrorCode: code}})
}

// timedOut is the router's NACK for a message not RECEIVED within the ACK timeout.
func timedOut(id string) *commonpb.Envelope {
	return ackOf(protocol.SchedulerID, id, commonpb.AckStage_TIMED_OUT, commonpb.ErrorCode_ACK_TIMEOUT)
}

// retryFixture dials a fake server and opens the agent's stream.
func retryFixture(t *testing.T) (*fakeServer, *Agent, *Stream) {
	t.Helper()
	f, a := dialFake(t)
	s, err := a.Receive(context.Background())
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return f, a, s
}

// next pushes env on the stream and returns its delivery.
func next(t *testing.T, f *fakeServer, s *Stream, env *commonpb.Envelope) *Delivery {
	t.Helper()
	f.push <- env
	d, err := s.Next()
	require.NoError(t, err)
	require.Equal(t, env.GetMessageId(), d.Envelope.GetMessageId())
	return d
}

func (f *fakeServer) sentEnvelopes() []sentMsg {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sentMsg(nil), f.sent...)
}

// TestTimedOutMessageIsRetried: a message sent with an idempotency token that the router
// NACKs TIMED_OUT is sent again by the SDK — same token, payload, recipient and
// correlation_id, a new message_id, retry_count+1 (§11.2, §11.3, App. D C.2) — and reported
// on the NACK's delivery; after DefaultMaxRetries retries the next NACK is not retried.
func TestTimedOutMessageIsRetried(t *testing.T) {
	f, a, s := retryFixture(t)
	env, err := a.Send(context.Background(), Message{To: "agent-c", Payload: []byte(`{"op":"create"}`), IdempotencyToken: "agent-b:create:abc"})
	require.NoError(t, err)

	attempt := env
	for i := 1; i <= DefaultMaxRetries; i++ {
		d := next(t, f, s, timedOut(attempt.GetMessageId()))
		require.NoError(t, d.RetryErr)
		require.NotNil(t, d.Retry, "retry %d", i)
		sent := f.sentEnvelopes()
		require.Len(t, sent, i+1)
		got := sent[i]
		assert.Equal(t, "agent-c", got.to)
		assert.Equal(t, d.Retry.GetMessageId(), got.env.GetMessageId())
		assert.NotEqual(t, attempt.GetMessageId(), got.env.GetMessageId(), "a new message_id")
		assert.Equal(t, "agent-b:create:abc", got.env.GetIdempotencyToken())
		assert.Equal(t, uint32(i), got.env.GetRetryCount())
		assert.Equal(t, env.GetCorrelationId(), got.env.GetCorrelationId())
		assert.Equal(t, env.GetPayload(), got.env.GetPayload())
		assert.Greater(t, got.env.GetSequenceNumber(), attempt.GetSequenceNumber(), "sequence numbers stay monotonic")
		attempt = got.env
	}
	d := next(t, f, s, timedOut(attempt.GetMessageId()))
	assert.Nil(t, d.Retry, "the retries are bounded")
	assert.Len(t, f.sentEnvelopes(), DefaultMaxRetries+1)
}

// TestRetryOnlyWhatCanTimeOut: no retry for a message without a token, for one already
// RECEIVED, for a TIMED_OUT ACK that is not the router's, for a request (the server re-sends
// those itself), nor once the agent turned retries off.
func TestRetryOnlyWhatCanTimeOut(t *testing.T) {
	f, a, s := retryFixture(t)
	ctx := context.Background()
	noToken, err := a.Send(ctx, Message{To: "agent-c", Payload: []byte(`{}`)})
	require.NoError(t, err)
	received, err := a.Send(ctx, Message{To: "agent-c", Payload: []byte(`{}`), IdempotencyToken: "t-received"})
	require.NoError(t, err)
	forged, err := a.Send(ctx, Message{To: "agent-c", Payload: []byte(`{}`), IdempotencyToken: "t-forged"})
	require.NoError(t, err)
	request, err := a.Send(ctx, Message{To: "agent-c", Payload: []byte(`{}`), IdempotencyToken: "t-request", ResponseTimeout: 5 * time.Second})
	require.NoError(t, err)
	a.SetMaxRetries(0)
	off, err := a.Send(ctx, Message{To: "agent-c", Payload: []byte(`{}`), IdempotencyToken: "t-off"})
	require.NoError(t, err)

	assert.Nil(t, next(t, f, s, timedOut(noToken.GetMessageId())).Retry, "no token")
	next(t, f, s, ackOf(protocol.SchedulerID, received.GetMessageId(), commonpb.AckStage_RECEIVED, 0))
	assert.Nil(t, next(t, f, s, timedOut(received.GetMessageId())).Retry, "already RECEIVED")
	assert.Nil(t, next(t, f, s, ackOf("agent-c", forged.GetMessageId(), commonpb.AckStage_TIMED_OUT, commonpb.ErrorCode_ACK_TIMEOUT)).Retry, "not the router's NACK")
	assert.Nil(t, next(t, f, s, timedOut(request.GetMessageId())).Retry, "a request")
	assert.Nil(t, next(t, f, s, timedOut(off.GetMessageId())).Retry, "retries off")
	assert.Len(t, f.sentEnvelopes(), 5, "nothing was sent again")
}

// TestRetryRejected: a retry the server rejects (here: a late completion made the operation
// terminal, §11.1 rule 4) is reported with its error_code and not retried again.
func TestRetryRejected(t *testing.T) {
	f, a, s := retryFixture(t)
	env, err := a.Send(context.Background(), Message{To: "agent-c", Payload: []byte(`{}`), IdempotencyToken: "t"})
	require.NoError(t, err)
	f.mu.Lock()
	f.refuse = func(*commonpb.Envelope) string { return `duplicate_detected: {"status":"DUPLICATE_DETECTED"}` }
	f.mu.Unlock()
	d := next(t, f, s, timedOut(env.GetMessageId()))
	require.NotNil(t, d.Retry)
	assert.Equal(t, commonpb.ErrorCode_DUPLICATE_DETECTED, CodeOf(d.RetryErr))
	assert.Nil(t, next(t, f, s, timedOut(d.Retry.GetMessageId())).Retry, "a rejected retry is not tracked")
	assert.Len(t, f.sentEnvelopes(), 2)
}
