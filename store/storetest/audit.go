package storetest

import (
	"fmt"
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

	t.Run("UntilIsExclusive", func(t *testing.T) {
		log := newStore(t).Audit()
		ctx := t.Context()
		base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		var ids []int64
		for i := range 4 {
			e, err := log.Append(ctx, store.Event{Type: "t", Time: base.Add(time.Duration(i) * time.Second)})
			require.NoError(t, err)
			ids = append(ids, e.ID)
		}
		got, err := log.List(ctx, store.AuditFilter{Since: base.Add(time.Second), Until: base.Add(3 * time.Second)})
		require.NoError(t, err)
		require.Equal(t, ids[1:3], eventIDs(got))
	})

	// HLC and trace id (§4, §19): stored as given, ordered by on request, and the highest HLC
	// seeds a starting process's clock.
	t.Run("HLCAndTraceID", func(t *testing.T) {
		log := newStore(t).Audit()
		ctx := t.Context()
		top, err := log.MaxHLC(ctx)
		require.NoError(t, err)
		require.Empty(t, top, "no events, no HLC")
		// Appended in an order that is not their causal order, as two processes whose clocks
		// disagree would append them; one row predates HLCs.
		hlcs := []string{
			"0001725552000000.000003.node-b",
			"0001725551998000.000000.node-a",
			"",
			"0001725552000000.000001.node-a",
			"0001725552000001.000000.node-a",
		}
		var ids []int64
		for i, h := range hlcs {
			e, err := log.Append(ctx, store.Event{CorrelationID: "c", Type: "x", HLC: h, TraceID: fmt.Sprintf("%032x", i+1)})
			require.NoError(t, err)
			require.Equal(t, h, e.HLC)
			ids = append(ids, e.ID)
		}
		_, err = log.Append(ctx, store.Event{CorrelationID: "other", Type: "x", HLC: "0001725552000009.000000.node-c"})
		require.NoError(t, err)

		byID, err := log.List(ctx, store.AuditFilter{CorrelationID: "c"})
		require.NoError(t, err)
		require.Equal(t, ids, eventIDs(byID), "ID order unless asked")
		for i, e := range byID {
			require.Equal(t, hlcs[i], e.HLC)
			require.Equal(t, fmt.Sprintf("%032x", i+1), e.TraceID)
		}
		byHLC, err := log.List(ctx, store.AuditFilter{CorrelationID: "c", OrderByHLC: true})
		require.NoError(t, err)
		require.Equal(t, []int64{ids[2], ids[1], ids[3], ids[0], ids[4]}, eventIDs(byHLC), "HLC order, rows without one first")

		top, err = log.MaxHLC(ctx)
		require.NoError(t, err)
		require.Equal(t, "0001725552000009.000000.node-c", top)
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
		{CorrelationID: "batch", Actor: "c", Type: "x.three", Details: []byte(`{"n":3}`),
			HLC: "0001725552000000.000001.node-a", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"},
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
	require.Equal(t, "0001725552000000.000001.node-a", got[2].HLC)
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", got[2].TraceID)
	require.Empty(t, got[0].HLC)
	require.Error(t, b.AppendBatch(ctx, []store.Event{{Type: "bad", Details: []byte(`{not json`)}}))
}
