package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// runBacklog checks the counts behind the scrape-time gauges: each counts the open rows only,
// and a row leaves its count when it is decided, requeued, completed or finished.
func runBacklog(t *testing.T, newStore func(t *testing.T) store.Store) {
	s := newStore(t)
	ctx := t.Context()
	backlog := func() store.Backlog {
		t.Helper()
		b, err := s.Backlog(ctx)
		require.NoError(t, err)
		return b
	}
	require.Equal(t, store.Backlog{}, backlog(), "an empty store has no backlog")

	now := time.Now().UTC().Truncate(time.Millisecond)
	require.NoError(t, s.HITL().PutInvocation(ctx, hitlRecord("b-i1", "CONFLICT", now)))
	require.NoError(t, s.HITL().PutInvocation(ctx, hitlRecord("b-i2", "CONFLICT", now)))
	d1, err := s.DLQ().PutDeadLetter(ctx, deadLetter("b-m1", now))
	require.NoError(t, err)
	_, err = s.DLQ().PutDeadLetter(ctx, deadLetter("b-m2", now))
	require.NoError(t, err)
	createHandoff(t, s.Handoffs(), handoffRec("b-h1", "corr-b", "alice", "bob"))
	createHandoff(t, s.Handoffs(), handoffRec("b-h2", "corr-b", "alice", "carol"))
	createHandoff(t, s.Handoffs(), handoffRec("b-h3", "corr-b", "alice", "dave"))
	for _, id := range []string{"b-c1", "b-c2"} {
		_, _, err := s.ToolCalls().CreateCall(ctx, store.ToolCallRecord{CallID: id, Caller: "agent-a", ProviderID: "builtin", ToolName: "echo"})
		require.NoError(t, err)
	}
	require.Equal(t, store.Backlog{PendingHITL: 2, DeadLetters: 2, OpenHandoffs: 3, OpenToolCalls: 2}, backlog())

	require.NoError(t, s.HITL().CompleteInvocation(ctx, "b-i1", []byte(`{}`), now))
	require.NoError(t, s.DLQ().MarkRequeued(ctx, d1.ID, "b-m1-again", now))
	// ACCEPTED is still open; COMPLETED and REJECTED are not.
	require.NoError(t, s.Handoffs().UpdateHandoff(ctx, "b-h1", handoffpb.HandoffStatus_ACCEPTED, "", "bob", ""))
	require.NoError(t, s.Handoffs().UpdateHandoff(ctx, "b-h2", handoffpb.HandoffStatus_COMPLETED, "", "carol", ""))
	require.NoError(t, s.Handoffs().UpdateHandoff(ctx, "b-h3", handoffpb.HandoffStatus_REJECTED, "", "", "declined"))
	_, _, err = s.ToolCalls().Finish(ctx, "b-c1", "text/plain", []byte("done"), func(uint64, uint64) []byte { return []byte(`{}`) })
	require.NoError(t, err)
	require.Equal(t, store.Backlog{PendingHITL: 1, DeadLetters: 1, OpenHandoffs: 1, OpenToolCalls: 1}, backlog())
}
