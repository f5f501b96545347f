package router

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// errOutage is what the message plane answers while the database is away.
var errOutage = errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")

// flakyStore is a store whose database can be taken away: while down, every call of the
// router's sweep fails.
type flakyStore struct {
	store.Store
	down atomic.Bool
	// hang, while set, makes Expire wait — as on a database that is unreachable rather
	// than refusing — until it is cleared (then the call goes through) or the call's ctx ends.
	hang atomic.Pointer[chan struct{}]
}

func (f *flakyStore) Messages() store.MessagePlane {
	return flakyPlane{MessagePlane: f.Store.Messages(), f: f}
}

// hangUntil makes Expire calls hang until the returned function is called.
func (f *flakyStore) hangUntil() (release func()) {
	ch := make(chan struct{})
	f.hang.Store(&ch)
	return func() { f.hang.Store(nil); close(ch) }
}

type flakyPlane struct {
	store.MessagePlane
	f *flakyStore
}

func (p flakyPlane) Expire(ctx context.Context, ackTimeout time.Duration, limit int) ([]store.ExpiredMessage, error) {
	if p.f.down.Load() {
		return nil, errOutage
	}
	if ch := p.f.hang.Load(); ch != nil {
		select {
		case <-*ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return p.MessagePlane.Expire(ctx, ackTimeout, limit)
}

func (p flakyPlane) ExpirePendingResponses(ctx context.Context, limit int) ([]store.PendingResponse, error) {
	if p.f.down.Load() {
		return nil, errOutage
	}
	return p.MessagePlane.ExpirePendingResponses(ctx, limit)
}

// sweepFixture is a router over st with producer p and consumer c registered.
func sweepFixture(t *testing.T, st store.Store, ackTimeout time.Duration) *Router {
	t.Helper()
	for _, id := range []string{"p", "c"} {
		require.NoError(t, st.Registry().PutAgent(t.Context(), store.AgentRecord{
			Descriptor: &registrypb.AgentDescriptor{AgentId: id, Name: id}, State: commonpb.AgentState_RUNNABLE,
		}))
	}
	return New(st, Config{AckTimeout: ackTimeout, SweepInterval: 10 * time.Millisecond}, audit.New(slog.New(slog.DiscardHandler), st.Audit()))
}

// sendToC admits one DATA message from p to c and returns its message_id.
func sendToC(t *testing.T, r *Router, ttl time.Duration) string {
	t.Helper()
	env := &commonpb.Envelope{
		MessageId: uuid.NewString(), ProducerId: "p", CorrelationId: uuid.NewString(), SequenceNumber: uint64(time.Now().UnixNano()),
		MessageType: commonpb.MessageType_DATA, ContentType: "application/json", Payload: []byte(`{}`), ContentLength: 2,
		TtlMs: uint64(ttl.Milliseconds()),
	}
	perr, err := r.Send(t.Context(), env, "c")
	require.NoError(t, err)
	require.Nil(t, perr)
	return env.GetMessageId()
}

func stateOf(t *testing.T, st store.Store, id string) commonpb.EnvelopeState {
	t.Helper()
	rec, err := st.Messages().GetMessage(context.Background(), id)
	require.NoError(t, err)
	return rec.State
}

// runSweeps runs r's timers until the test ends.
func runSweeps(t *testing.T, r *Router) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestAckTimeoutDiscountsDatabaseOutage: the database goes away for longer than the ACK
// timeout while messages are in flight. When it is back, the consumer gets a full ACK timeout
// to confirm before anything times out: a message it confirms then ends RECEIVED, not
// TIMED_OUT; one it never confirms times out only an ACK timeout after the plane came back.
// TTLs, which the producer set as deadlines of their own, still apply at once.
func TestAckTimeoutDiscountsDatabaseOutage(t *testing.T) {
	const ackTimeout = time.Second
	st := newTestStore()
	t.Cleanup(st.Close)
	fs := &flakyStore{Store: st}
	r := sweepFixture(t, fs, ackTimeout)
	runSweeps(t, r)
	time.Sleep(ackTimeout) // the plane has been up for a full ACK timeout

	confirmed, unconfirmed := sendToC(t, r, 0), sendToC(t, r, 0)
	expiring := sendToC(t, r, 300*time.Millisecond)
	fs.down.Store(true)
	time.Sleep(ackTimeout + ackTimeout/2)
	fs.down.Store(false)
	back := time.Now()

	time.Sleep(ackTimeout / 3) // the consumer reconnects
	assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_SENT, stateOf(t, st, confirmed), "the outage does not count against the consumer")
	assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_SENT, stateOf(t, st, unconfirmed))
	assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_FAILED, stateOf(t, st, expiring), "TTLs apply at once")
	batch, err := st.Messages().Claim(t.Context(), store.ClaimRequest{AgentID: "c", Limit: 10, Lease: time.Minute})
	require.NoError(t, err)
	for _, d := range batch {
		if d.Envelope.GetMessageId() == confirmed {
			ok, err := r.ConfirmDelivery(t.Context(), "c", d.Seq, confirmed, false)
			require.NoError(t, err)
			require.True(t, ok)
		}
	}
	assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, stateOf(t, st, confirmed), "a confirmed message never ends TIMED_OUT")

	require.Eventually(t, func() bool {
		return stateOf(t, st, unconfirmed) == commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT
	}, 5*time.Second, 10*time.Millisecond, "an unconfirmed message still times out")
	assert.GreaterOrEqual(t, time.Since(back), ackTimeout, "but only an ACK timeout after the plane came back")
}

// TestAckTimeoutDiscountsFrontendRestart: messages admitted by a frontend that then went away
// for longer than the ACK timeout are not timed out the moment a frontend starts again on the
// same store: consumers reconnecting to it get a full ACK timeout to confirm.
func TestAckTimeoutDiscountsFrontendRestart(t *testing.T) {
	const ackTimeout = time.Second
	st := newTestStore()
	t.Cleanup(st.Close)
	first := sweepFixture(t, st, ackTimeout)
	id := sendToC(t, first, 0)
	time.Sleep(ackTimeout + ackTimeout/2) // no frontend runs

	second := sweepFixture(t, st, ackTimeout)
	started := time.Now()
	runSweeps(t, second)
	time.Sleep(ackTimeout / 3)
	assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_SENT, stateOf(t, st, id), "the restart does not count against the consumer")
	require.Eventually(t, func() bool {
		return stateOf(t, st, id) == commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT
	}, 5*time.Second, 10*time.Millisecond, "an unconfirmed message still times out")
	assert.GreaterOrEqual(t, time.Since(started), ackTimeout)
}

// TestAckTimeoutDiscountsHangingDatabase: a database that is unreachable rather than refusing
// makes the sweep's call hang instead of fail. The outage must count all the same: when the
// database is back, the call does not go through with ACK timeouts decided before the outage.
func TestAckTimeoutDiscountsHangingDatabase(t *testing.T) {
	const ackTimeout = time.Second
	st := newTestStore()
	t.Cleanup(st.Close)
	fs := &flakyStore{Store: st}
	r := sweepFixture(t, fs, ackTimeout)
	runSweeps(t, r)
	time.Sleep(ackTimeout) // the plane has been up for a full ACK timeout

	id := sendToC(t, r, 0)
	release := fs.hangUntil()
	time.Sleep(3 * ackTimeout)
	release()
	back := time.Now()
	time.Sleep(ackTimeout / 3)
	assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_SENT, stateOf(t, st, id), "the outage does not count against the consumer")
	require.Eventually(t, func() bool {
		return stateOf(t, st, id) == commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT
	}, 5*time.Second, 10*time.Millisecond, "an unconfirmed message still times out")
	assert.GreaterOrEqual(t, time.Since(back), ackTimeout)
}
