package test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// TestControlTrafficTakesNoSlot covers §13 on both stores: the buffer capacity (default 10) is
// about data. B sends A a message and receives, without confirming them, the two ACKs that
// come back (RECEIVED and the forwarded FULFILLED, control traffic on the PRIVILEGED lane);
// A can still send B ten messages, and only the eleventh is rejected with buffer_full.
func TestControlTrafficTakesNoSlot(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			a, b, aIn, bIn := twoAgents(t, sys)

			sent, err := b.Send(ctx, sdk.Message{To: a.ID(), Payload: []byte(`{"q":1}`)})
			require.NoError(t, err)
			got := aIn.next(t, true, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == sent.GetMessageId() })
			require.NoError(t, got.Ack(ctx, commonpb.AckStage_FULFILLED, 0, "answered"))
			bIn.next(t, false, ackFor(sent.GetMessageId(), commonpb.AckStage_RECEIVED))
			bIn.next(t, false, ackFor(sent.GetMessageId(), commonpb.AckStage_FULFILLED))

			for i := range 10 {
				_, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"n":` + strconv.Itoa(i+1) + `}`)})
				require.NoError(t, err, "message %d: B's two unconfirmed ACKs take no slot", i+1)
			}
			_, err = a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"n":11}`)})
			require.Equal(t, commonpb.ErrorCode_BUFFER_FULL, sdk.CodeOf(err), "%v", err)
			n, err := sys.app.Store().Messages().Depth(ctx, b.ID())
			require.NoError(t, err)
			assert.Equal(t, 12, n, "the depth counts the control rows as well")
		})
	}
}
