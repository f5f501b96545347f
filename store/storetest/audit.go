package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/store"
)

func eventIDs(events []store.Event) []int64 {
	out := make([]int64, len(events))
	for i, e := range events {
		out[i] = e.ID
	}
	return out
}

// runAudit checks the append-only audit log (§19).
func runAudit(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("AppendAssignsIDAndTime", func(t *testing.T) {
		log := newStore(t).Audit()
		ctx := t.Context()
		e1, err := log.Append(ctx, store.Event{
			CorrelationID: "c1", Actor: "bob", Type: "message.admitted", AgentID: "bob", MessageID: "m1",
			Details: []byte(`{"capacity":10}`),
		})
		require.NoError(t, err)
		require.Positive(t, e1.ID)
		requireRecent(t, e1.Time)
		require.Equal(t, time.UTC, e1.Time.Location())
		require.Equal(t, "c1", e1.CorrelationID)
		require.Equal(t, "bob", e1.Actor)
		require.JSONEq(t, `{"capacity":10}`, string(e1.Details))

		at := time.Date(2024, 1, 2, 3, 4, 5, 6000, time.UTC)
		e2, err := log.Append(ctx, store.Event{Type: "agent.state", Time: at})
		require.NoError(t, err)
		require.Greater(t, e2.ID, e1.ID)
		require.True(t, at.Equal(e2.Time), "a set Time is kept")

		e3, err := log.Append(ctx, store.Event{Type: "agent.state"})
		require.NoError(t, err)
		require.Greater(t, e3.ID, e2.ID)

		events, err := log.List(ctx, store.AuditFilter{})
		require.NoError(t, err)
		require.Equal(t, []int64{e1.ID, e2.ID, e3.ID}, eventIDs(events))
		got := events[0]
		require.Equal(t, e1.ID, got.ID)
		require.True(t, e1.Time.Equal(got.Time))
		require.Equal(t, "c1", got.CorrelationID)
		require.Equal(t, "bob", got.Actor)
		require.Equal(t, "message.admitted", got.Type)
		require.Equal(t, "bob", got.AgentID)
		require.Equal(t, "m1", got.MessageID)
		require.JSONEq(t, `{"capacity":10}`, string(got.Details))
		require.True(t, at.Equal(events[1].Time))
		require.Empty(t, events[1].Details)
	})

	t.Run("ListFilters", func(t *testing.T) {
		log := newStore(t).Audit()
		ctx := t.Context()
		base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		seed := []store.Event{
			{CorrelationID: "c1", AgentID: "a", MessageID: "m1", Type: "message.admitted"},
			{CorrelationID: "c1", AgentID: "b", MessageID: "m2", Type: "message.acked"},
			{CorrelationID: "c2", AgentID: "a", MessageID: "m3", Type: "agent.state"},
			{CorrelationID: "c2", AgentID: "b", MessageID: "m1", Type: "message.admitted"},
			{CorrelationID: "c1", AgentID: "a", Type: "message_x"},
			{CorrelationID: "c3", Type: "messages.y"},
		}
		var ids []int64
		for i, e := range seed {
			e.Actor = "test"
			e.Time = base.Add(time.Duration(i) * time.Second)
			got, err := log.Append(ctx, e)
			require.NoError(t, err)
			ids = append(ids, got.ID)
		}
		list := func(f store.AuditFilter) []int64 {
			t.Helper()
			events, err := log.List(ctx, f)
			require.NoError(t, err)
			return eventIDs(events)
		}
		pick := func(idx ...int) []int64 {
			out := []int64{}
			for _, i := range idx {
				out = append(out, ids[i])
			}
			return out
		}
		require.Equal(t, pick(0, 1, 2, 3, 4, 5), list(store.AuditFilter{}))
		require.Equal(t, pick(0, 1, 4), list(store.AuditFilter{CorrelationID: "c1"}))
		require.Equal(t, pick(0, 2, 4), list(store.AuditFilter{AgentID: "a"}))
		require.Equal(t, pick(0, 3), list(store.AuditFilter{MessageID: "m1"}))
		require.Equal(t, pick(0, 1, 3), list(store.AuditFilter{TypePrefix: "message."}))
		require.Equal(t, pick(4), list(store.AuditFilter{TypePrefix: "message_"}), "the prefix is literal, not a pattern")
		require.Equal(t, pick(0, 1, 3, 4, 5), list(store.AuditFilter{TypePrefix: "message"}))
		require.Equal(t, pick(2, 3, 4, 5), list(store.AuditFilter{Since: base.Add(2 * time.Second)}), "Since is inclusive")
		require.Equal(t, pick(0, 4), list(store.AuditFilter{CorrelationID: "c1", AgentID: "a"}))
		require.Equal(t, pick(4, 5), list(store.AuditFilter{Limit: 2}), "the limit keeps the newest, oldest first")
		require.Equal(t, pick(1, 4), list(store.AuditFilter{CorrelationID: "c1", Limit: 2}))
		require.Equal(t, pick(3), list(store.AuditFilter{MessageID: "m1", Since: base.Add(time.Second)}))
		require.Empty(t, list(store.AuditFilter{CorrelationID: "none"}))
	})

	t.Run("DefaultLimitIs1000", func(t *testing.T) {
		log := newStore(t).Audit()
		ctx := t.Context()
		var ids []int64
		for range 1005 {
			e, err := log.Append(ctx, store.Event{Type: "bulk"})
			require.NoError(t, err)
			ids = append(ids, e.ID)
		}
		events, err := log.List(ctx, store.AuditFilter{})
		require.NoError(t, err)
		require.Equal(t, ids[5:], eventIDs(events))
	})
}

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
