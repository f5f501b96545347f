package router

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// TestNotifyAll: a fan-out reaches every registered agent from the scheduler, in order per
// agent; an agent that is not registered is logged, as Notify does, and a member whose
// message_id is already known fails alone.
func TestNotifyAll(t *testing.T) {
	st := memory.New()
	t.Cleanup(st.Close)
	r := sweepFixture(t, st, time.Minute) // registers p and c
	event := func(id string) *commonpb.Envelope {
		return &commonpb.Envelope{MessageId: id, ProducerId: "someone", CorrelationId: "neg-1", MessageType: commonpb.MessageType_NEGOTIATION,
			ContentType: "application/json", Payload: []byte(`{}`), ContentLength: 2}
	}
	known := uuid.NewString()
	require.NoError(t, r.Notify(t.Context(), "c", event(known)))
	ids := []string{uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()}
	errs := r.NotifyAll(t.Context(), []Announcement{
		{AgentID: "p", Envelope: event(ids[0])},
		{AgentID: "c", Envelope: event(ids[1])},
		{AgentID: "ghost", Envelope: event(ids[2])},
		{AgentID: "c", Envelope: event(known)},
		{AgentID: "p", Envelope: event(ids[3])},
	})
	require.Len(t, errs, 5)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.NoError(t, errs[2], "an unregistered agent is logged, not an error")
	require.ErrorIs(t, errs[3], store.ErrDuplicateMessage)
	require.NoError(t, errs[4])

	got := func(agent string) []string {
		ds, err := st.Messages().Claim(t.Context(), store.ClaimRequest{AgentID: agent, Limit: 10, Lease: time.Minute})
		require.NoError(t, err)
		var out []string
		for _, d := range ds {
			require.Equal(t, protocol.SchedulerID, d.Envelope.GetProducerId(), "sent by the scheduler")
			out = append(out, d.Envelope.GetMessageId())
		}
		return out
	}
	require.Equal(t, []string{ids[0], ids[3]}, got("p"), "in order")
	require.Equal(t, []string{known, ids[1]}, got("c"))
}
