package test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// TestServerRestartLosesNoAdmittedMessage stops the whole sw4rm process (frontend and worker)
// while B holds unconfirmed deliveries, starts a new one on the same PostgreSQL database, and
// checks that B, reconnecting, receives exactly what it had not confirmed, in order.
func TestServerRestartLosesNoAdmittedMessage(t *testing.T) {
	ctx := context.Background()
	cfg := newConfig(t, "postgres")
	first := start(t, cfg)
	a := dialAgent(t, first, "a")
	require.NoError(t, a.Heartbeat(ctx, commonpb.AgentState_RUNNABLE, map[string]string{"ok": "yes"}))
	waitState(t, first, a.ID(), commonpb.AgentState_RUNNABLE)
	b := dialAgent(t, first, "b")
	bIn := openInbox(t, b)

	var sent []string
	for i := range 3 {
		env, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"i":` + string(rune('0'+i)) + `}`)})
		require.NoError(t, err)
		sent = append(sent, env.GetMessageId())
	}
	for i := range 3 {
		d := bIn.next(t, false, func(*sdk.Delivery) bool { return true })
		require.Equal(t, sent[i], d.Envelope.GetMessageId(), "delivered in admission order")
		if i == 0 {
			ok, err := d.Confirm(ctx)
			require.NoError(t, err)
			require.True(t, ok)
		}
	}

	first.app.Stop() // the process goes away with two deliveries unconfirmed

	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	second := start(t, cfg)
	b2, err := sdk.Dial(second.app.GRPCAddr(), b.ID())
	require.NoError(t, err)
	t.Cleanup(func() { _ = b2.Close() })
	b2In := openInbox(t, b2)
	for _, want := range sent[1:] {
		d := b2In.next(t, false, func(*sdk.Delivery) bool { return true })
		assert.Equal(t, want, d.Envelope.GetMessageId())
		ok, err := d.Confirm(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}
	depth, err := second.app.Store().Messages().Depth(ctx, b.ID())
	require.NoError(t, err)
	assert.Zero(t, depth, "nothing else was pending")
	for _, id := range sent {
		rec, err := second.app.Store().Messages().GetMessage(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, rec.State, id)
	}
	// The lifecycle workflows survived too: B is still RUNNABLE under the new worker.
	waitState(t, second, b.ID(), commonpb.AgentState_RUNNABLE)
}
