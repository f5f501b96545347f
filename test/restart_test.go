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

// TestServerOutageTimesNothingOut stops the only sw4rm process for longer than the ACK
// timeout while one message is delivered but not confirmed (the consumer's confirmation went
// down with the server) and another was never delivered. A new process starts on the same
// database and the consumers reconnect a moment later, as agents do: both messages reach
// RECEIVED, the producer gets ACK RECEIVED for both and no TIMED_OUT NACK — the time the
// plane was down does not count against the consumers (§11).
func TestServerOutageTimesNothingOut(t *testing.T) {
	ctx := context.Background()
	cfg := newConfig(t, "postgres")
	cfg.AckTimeout = 3 * time.Second
	first := start(t, cfg)
	a := dialAgent(t, first, "a")
	b := dialAgent(t, first, "b")
	c := dialAgent(t, first, "c") // no stream: what it is sent is never delivered
	bIn := openInbox(t, b)

	delivered, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"n":1}`)})
	require.NoError(t, err)
	undelivered, err := a.Send(ctx, sdk.Message{To: c.ID(), Payload: []byte(`{"n":2}`)})
	require.NoError(t, err)
	bIn.next(t, false, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == delivered.GetMessageId() })

	first.app.Stop()
	time.Sleep(cfg.AckTimeout + time.Second)

	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	second := start(t, cfg)
	time.Sleep(600 * time.Millisecond) // agents reconnect after a backoff
	for _, reconnect := range []struct {
		id, want string
	}{{b.ID(), delivered.GetMessageId()}, {c.ID(), undelivered.GetMessageId()}} {
		agent, err := sdk.Dial(second.app.GRPCAddr(), reconnect.id)
		require.NoError(t, err)
		t.Cleanup(func() { _ = agent.Close() })
		d := openInbox(t, agent).next(t, false, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == reconnect.want })
		ok, err := d.Confirm(ctx)
		require.NoError(t, err)
		require.True(t, ok, "confirmation of %s recorded", reconnect.want)
	}
	for _, id := range []string{delivered.GetMessageId(), undelivered.GetMessageId()} {
		rec, err := second.app.Store().Messages().GetMessage(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, rec.State, id)
	}

	a2, err := sdk.Dial(second.app.GRPCAddr(), a.ID())
	require.NoError(t, err)
	t.Cleanup(func() { _ = a2.Close() })
	aIn := openInbox(t, a2)
	received := map[string]bool{}
	for len(received) < 2 {
		d := aIn.next(t, true, func(d *sdk.Delivery) bool { _, ok := d.AckPayload(); return ok })
		p, _ := d.AckPayload()
		require.NotEqual(t, commonpb.AckStage_TIMED_OUT, p.Stage, "NACK for %s: %s", p.AckForMessageID, p.Note)
		if p.Stage == commonpb.AckStage_RECEIVED {
			received[p.AckForMessageID] = true
		}
	}
}
