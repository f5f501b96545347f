package test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// TestSDKRetriesTimedOutMessage: A sends B a message with an idempotency token; B receives it
// but never confirms, so the router NACKs it TIMED_OUT. A's SDK, reading its stream, sends it
// again itself as §11.2 documents — same token, new message_id, retry_count 1 — the server
// admits the retry as the operation's next attempt and B receives it.
func TestSDKRetriesTimedOutMessage(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			cfg := newConfig(t, kind)
			cfg.AckTimeout = time.Second
			sys := start(t, cfg)
			a, b, aIn, bIn := twoAgents(t, sys)
			ctx := context.Background()
			token := a.ID() + ":create:abc"
			first, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"user":"alice"}`), IdempotencyToken: token})
			require.NoError(t, err)
			bIn.next(t, false, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == first.GetMessageId() })

			aIn.next(t, true, ackFor(first.GetMessageId(), commonpb.AckStage_TIMED_OUT))
			retry := bIn.next(t, false, func(d *sdk.Delivery) bool {
				return d.Envelope.GetIdempotencyToken() == token && d.Envelope.GetRetryCount() == 1
			})
			assert.NotEqual(t, first.GetMessageId(), retry.Envelope.GetMessageId())
			assert.Equal(t, first.GetCorrelationId(), retry.Envelope.GetCorrelationId())
			assert.Equal(t, first.GetPayload(), retry.Envelope.GetPayload())
			ok, err := retry.Confirm(ctx)
			require.NoError(t, err)
			require.True(t, ok)
			aIn.next(t, true, ackFor(retry.Envelope.GetMessageId(), commonpb.AckStage_RECEIVED))
			rec, err := sys.app.Store().Messages().GetMessage(ctx, retry.Envelope.GetMessageId())
			require.NoError(t, err)
			assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, rec.State)
		})
	}
}
