package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/dag"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// eventInbox is a SchedulerOutbox that builds event outbox entries and records the in-line
// attempts the router makes; failing makes every attempt fail, as when Temporal is
// unreachable.
type eventInbox struct {
	failing   bool
	mu        sync.Mutex
	delivered []store.OutboxEntry
}

func (in *eventInbox) Entry(n Notice) (store.OutboxEntry, error) {
	e, ok := n.(RunEvent)
	if !ok {
		return store.OutboxEntry{}, fmt.Errorf("only events: %T", n)
	}
	env, ev := e.Envelope, e.Event
	b, err := json.Marshal(map[string]string{"workflow_id": ev.WorkflowID, "event": ev.Name, "message_id": env.GetMessageId(), "by": env.GetProducerId()})
	return store.OutboxEntry{ID: uuid.NewString(), Kind: "dag.event", WorkflowID: dag.RunCorrelationPrefix + ev.WorkflowID, Payload: b}, err
}

func (in *eventInbox) Deliver(_ context.Context, hs ...store.OutboxEntry) error {
	if in.failing {
		return errors.New("temporal unreachable")
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.delivered = append(in.delivered, hs...)
	return nil
}

func eventMessage(correlation, payload string) *commonpb.Envelope {
	env := message("p", correlation)
	env.Payload, env.ContentLength = []byte(payload), uint64(len(payload))
	return env
}

// TestEventOnARunsCorrelation: a message admitted on a DAG run's correlation that carries an
// event writes the event's outbox entry with its admission (even when the in-line attempt fails,
// the handoff is stored for the relay) and is delivered to its recipient as any message; a
// message on the correlation without an event, or one refused, writes none; a malformed
// event is refused with validation_error; a router without the scheduler's inbox refuses an
// event with no_route rather than dropping it.
func TestEventOnARunsCorrelation(t *testing.T) {
	st := memory.New()
	t.Cleanup(st.Close)
	r := sweepFixture(t, st, time.Minute)
	in := &eventInbox{}
	r.SetScheduler(nil, in)
	ctx := t.Context()
	pending := func() []store.OutboxEntry {
		t.Helper()
		hs, err := st.Outbox().Pending(ctx, 100)
		require.NoError(t, err)
		return hs
	}

	env := eventMessage("dag/release", `{"event":"approved","by":"ops"}`)
	perr, err := r.Send(ctx, env, "c")
	require.NoError(t, err)
	require.Nil(t, perr)
	hs := pending()
	require.Len(t, hs, 1, "the event is handed off with the admission")
	assert.Equal(t, "dag.event", hs[0].Kind)
	assert.Equal(t, "dag/release", hs[0].WorkflowID)
	assert.JSONEq(t, `{"workflow_id":"release","event":"approved","message_id":"`+env.GetMessageId()+`","by":"p"}`, string(hs[0].Payload))
	assert.Len(t, in.delivered, 1, "the in-line attempt")
	got, err := st.Messages().Claim(ctx, store.ClaimRequest{AgentID: "c", Limit: 10, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, env.GetMessageId(), got[0].Envelope.GetMessageId(), "the message reaches its recipient whole")

	// The same message_id again is answered from its record: no second event.
	perr, err = r.Send(ctx, env, "c")
	require.NoError(t, err)
	require.Nil(t, perr)
	assert.Len(t, pending(), 1, "a re-sent message_id hands off nothing")

	// Temporal unreachable: the message is still admitted and its event stays in the outbox.
	in.failing = true
	perr, err = r.Send(ctx, eventMessage("dag/release", `{"event":"shipped"}`), "c")
	require.NoError(t, err)
	require.Nil(t, perr)
	assert.Len(t, pending(), 2)
	in.failing = false

	// No event: other correlations, other payloads.
	for _, env := range []*commonpb.Envelope{
		eventMessage("release", `{"event":"approved"}`),
		eventMessage("dag/release", `{"status":"approved"}`),
		eventMessage("dag/release", `["approved"]`),
	} {
		perr, err := r.Send(ctx, env, "c")
		require.NoError(t, err)
		require.Nil(t, perr, "%s %s", env.GetCorrelationId(), env.GetPayload())
	}
	assert.Len(t, pending(), 2, "messages without an event hand off nothing")

	// A malformed event is refused, not admitted as a message without one.
	for payload, want := range map[string]string{
		`{"event":7}`:           `must be the event's name`,
		`{"event":"approved"`:   `not JSON`,
		`{"event":""}`:          `must be the event's name`,
		`{"event":"approved"} `: ``,
	} {
		perr, err := r.Send(ctx, eventMessage("dag/release", payload), "c")
		require.NoError(t, err)
		if want == "" {
			require.Nil(t, perr, payload)
			continue
		}
		require.NotNil(t, perr, payload)
		assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, perr.Code, payload)
		assert.Contains(t, perr.Msg, want, payload)
	}
	assert.Len(t, pending(), 3)

	// A refused admission writes no event: an unknown recipient.
	perr, err = r.Send(ctx, eventMessage("dag/release", `{"event":"approved"}`), "nobody")
	require.NoError(t, err)
	require.NotNil(t, perr)
	assert.Equal(t, commonpb.ErrorCode_NO_ROUTE, perr.Code)
	assert.Len(t, pending(), 3)

	// Without the scheduler's inbox an event cannot be handed on: refused, never dropped.
	bare := sweepFixture(t, st, time.Minute)
	perr, err = bare.Send(ctx, eventMessage("dag/release", `{"event":"approved"}`), "c")
	require.NoError(t, err)
	require.NotNil(t, perr)
	assert.Equal(t, commonpb.ErrorCode_NO_ROUTE, perr.Code)
	assert.Contains(t, perr.Msg, "scheduler's inbox")
	perr, err = bare.Send(ctx, eventMessage("dag/release", `{"status":"x"}`), "c")
	require.NoError(t, err)
	require.Nil(t, perr, "a message without an event needs no inbox")
}
