package test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// TestResentMessageIDGetsItsState covers a producer that sends the same envelope (same
// message_id) again, as it does after an answer it lost, on both stores (docs/messaging.md,
// "Sending a message_id again"): the answer is the message's recorded state, never the bare
// "already admitted". A message in flight is accepted, as it was the first time, and not
// delivered twice; one rejected with buffer_full is refused with buffer_full again and its
// producer is NACKed again (the first NACK may be what it lost); one the consumer fulfilled
// is accepted; one the consumer rejected is refused with the consumer's error code. Another
// producer reusing the message_id learns only that the id is taken.
func TestResentMessageIDGetsItsState(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := newConfig(t, kind)
			cfg.BufferCapacity = 2
			sys := start(t, cfg)
			ctx := context.Background()
			a, b, aIn, bIn := twoAgents(t, sys)
			state := func(id string) commonpb.EnvelopeState {
				rec, err := sys.app.Store().Messages().GetMessage(ctx, id)
				require.NoError(t, err)
				return rec.State
			}

			first, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"n":1}`)})
			require.NoError(t, err)
			require.NoError(t, a.SendEnvelope(ctx, first, b.ID()), "in flight: accepted, as the first time")
			second, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"n":2}`)})
			require.NoError(t, err, "the re-sent message took no second slot of the buffer")

			third, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"n":3}`)})
			require.Equal(t, commonpb.ErrorCode_BUFFER_FULL, sdk.CodeOf(err), "%v", err)
			aIn.next(t, true, ackFor(third.GetMessageId(), commonpb.AckStage_REJECTED))
			err = a.SendEnvelope(ctx, third, b.ID())
			require.Equal(t, commonpb.ErrorCode_BUFFER_FULL, sdk.CodeOf(err), "a rejected message stays rejected: %v", err)
			assert.Contains(t, err.Error(), "REJECTED")
			nack := aIn.next(t, true, ackFor(third.GetMessageId(), commonpb.AckStage_REJECTED))
			np, _ := nack.AckPayload()
			assert.Equal(t, commonpb.ErrorCode_BUFFER_FULL, np.ErrorCode, "NACKed again")
			assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED, state(third.GetMessageId()))

			// B fulfils the first message and rejects the second.
			got := bIn.next(t, true, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == first.GetMessageId() })
			require.NoError(t, got.Ack(ctx, commonpb.AckStage_FULFILLED, 0, "done"))
			got2 := bIn.next(t, true, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == second.GetMessageId() })
			require.NoError(t, got2.Ack(ctx, commonpb.AckStage_REJECTED, commonpb.ErrorCode_VALIDATION_ERROR, "n must be odd"))
			require.Eventually(t, func() bool {
				return state(first.GetMessageId()) == commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED &&
					state(second.GetMessageId()) == commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED
			}, 10*time.Second, 20*time.Millisecond)
			require.NoError(t, a.SendEnvelope(ctx, first, b.ID()), "fulfilled: accepted")
			err = a.SendEnvelope(ctx, second, b.ID())
			require.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, sdk.CodeOf(err), "rejected by its consumer: %v", err)
			assert.Contains(t, err.Error(), "n must be odd")

			// Nothing was delivered twice.
			select {
			case d := <-bIn.ch:
				t.Fatalf("unexpected delivery %s", d.Envelope.GetMessageId())
			case <-time.After(300 * time.Millisecond):
			}

			// Another producer reusing the id is told the id is taken, nothing of the message.
			stolen := proto.Clone(first).(*commonpb.Envelope)
			stolen.ProducerId = b.ID()
			err = b.SendEnvelope(ctx, stolen, a.ID())
			require.Equal(t, commonpb.ErrorCode_DUPLICATE_DETECTED, sdk.CodeOf(err), "%v", err)
			assert.NotContains(t, err.Error(), "FULFILLED")
		})
	}
}
