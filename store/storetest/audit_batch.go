package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// runAuditBatch checks store.BatchAuditLog where a store implements it: events are appended
// in slice order with increasing IDs and read back unchanged.
func runAuditBatch(t *testing.T, newStore func(t *testing.T) store.Store) {
	st := newStore(t)
	b, ok := st.Audit().(store.BatchAuditLog)
	if !ok {
		t.Skip("this store's audit log has no batch append")
	}
	ctx := t.Context()
	events := []store.Event{
		{CorrelationID: "batch", Actor: "a", Type: "x.one", Details: []byte(`{"n":1}`)},
		{CorrelationID: "batch", Actor: "b", Type: "x.two", AgentID: "agent", MessageID: "m"},
		{CorrelationID: "batch", Actor: "c", Type: "x.three", Details: []byte(`{"n":3}`)},
	}
	require.NoError(t, b.AppendBatch(ctx, events))
	require.NoError(t, b.AppendBatch(ctx, nil))
	got, err := st.Audit().List(ctx, store.AuditFilter{CorrelationID: "batch"})
	require.NoError(t, err)
	require.Len(t, got, 3)
	for i, e := range got {
		require.Equal(t, events[i].Type, e.Type)
		require.Equal(t, events[i].Actor, e.Actor)
		require.False(t, e.Time.IsZero())
		if i > 0 {
			require.Greater(t, e.ID, got[i-1].ID)
		}
	}
	require.JSONEq(t, `{"n":3}`, string(got[2].Details))
	require.Equal(t, "m", got[1].MessageID)
	require.Error(t, b.AppendBatch(ctx, []store.Event{{Type: "bad", Details: []byte(`{not json`)}}))
}
