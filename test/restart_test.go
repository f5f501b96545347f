package test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/workflows"
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

// freeAddr returns a 127.0.0.1 address with a port that was free a moment ago, for a server
// that must come back on the address its clients already dialled.
func freeAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	return addr
}

// TestTaskRunsOnThroughServerRestart stops the whole sw4rm process while an SDK agent runs a
// task, and starts a new one on the same gRPC address and PostgreSQL database. The agent's
// Serve rides out the broken stream: the task keeps running, its result reaches the new
// server once the handler returns, the task completes with its handler having run once, and
// the agent's next task runs. Before Serve reopened its stream it cancelled the task and
// returned, nothing was acknowledged and the task stayed RUNNING forever.
func TestTaskRunsOnThroughServerRestart(t *testing.T) {
	cfg := newConfig(t, "postgres")
	cfg.GRPCAddr = freeAddr(t)
	first := start(t, cfg)
	b := dialAgent(t, first, "b")
	sc := schedulerpb.NewSchedulerServiceClient(b.Conn())
	held, next := uniq(t, "held"), uniq(t, "next")
	release := make(chan struct{})
	var (
		mu   sync.Mutex
		runs = map[string]int{}
	)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	var serveErr error
	go func() {
		defer close(served)
		serveErr = b.Serve(ctx, func(ctx context.Context, run *sdk.TaskRun) ([]byte, error) {
			id := run.Task().ID
			mu.Lock()
			runs[id]++
			mu.Unlock()
			if id == held {
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return []byte("done " + id), nil
		}, &sdk.ServeOptions{Logf: t.Logf})
	}()
	t.Cleanup(func() { cancel(); <-served })
	waitState(t, first, b.ID(), commonpb.AgentState_RUNNABLE)
	require.True(t, submit(t, sc, b.ID(), held, 0, "repo:app path:src/held/**").GetAccepted())
	waitTask(t, first, held, workflows.TaskRunning)

	first.app.Stop() // frontend and worker go away; the agent's stream breaks mid-task
	second := start(t, cfg)
	close(release)

	st := waitTask(t, second, held, workflows.TaskCompleted)
	assert.Equal(t, "done "+held, st.Result)
	require.True(t, submit(t, sc, b.ID(), next, 0, "repo:app path:src/next/**").GetAccepted())
	assert.Equal(t, "done "+next, waitTask(t, second, next, workflows.TaskCompleted).Result)
	select {
	case <-served:
		t.Fatalf("Serve returned across the restart: %v", serveErr)
	default:
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[string]int{held: 1, next: 1}, runs, "each handler ran once")
}
