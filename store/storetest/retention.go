package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// This file tests Retention: each kind of finished record older than the cutoff is deleted in
// batches of at most the limit, a newer one and an unfinished one stay, and pruning again
// deletes nothing (the sweeps of several frontends may run it at once).

// drain calls prune with limit until it deletes fewer than limit rows, checks that no call
// deleted more than limit, and returns the total.
func drain(t *testing.T, limit int, prune func(limit int) (int, error)) int {
	t.Helper()
	total := 0
	for {
		n, err := prune(limit)
		require.NoError(t, err)
		require.LessOrEqual(t, n, limit, "one batch deletes at most the limit")
		total += n
		if n < limit {
			return total
		}
	}
}

// boundary returns a cutoff that lies strictly between what the store stamped before the call
// and what it stamps after it (both stores stamp with the clock of this machine).
func boundary() time.Time {
	time.Sleep(20 * time.Millisecond)
	c := time.Now()
	time.Sleep(20 * time.Millisecond)
	return c
}

func runRetention(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("Audit", func(t *testing.T) {
		st := newStore(t)
		ctx := t.Context()
		now := time.Now()
		for i, at := range []time.Time{now.Add(-3 * time.Hour), now.Add(-2 * time.Hour), now.Add(-90 * time.Minute), now} {
			_, err := st.Audit().Append(ctx, store.Event{Type: "test.retention", Actor: "t", Time: at, Details: []byte(fmt.Sprintf(`{"i":%d}`, i))})
			require.NoError(t, err)
		}
		r := st.Retention()
		require.Equal(t, 3, drain(t, 2, func(limit int) (int, error) { return r.PruneAudit(ctx, now.Add(-time.Hour), limit) }))
		evs, err := st.Audit().List(ctx, store.AuditFilter{})
		require.NoError(t, err)
		require.Len(t, evs, 1)
		require.WithinDuration(t, now, evs[0].Time, time.Millisecond, "the newer event stays")
		require.Equal(t, 0, drain(t, 2, func(limit int) (int, error) { return r.PruneAudit(ctx, now.Add(-time.Hour), limit) }))
	})

	t.Run("DeadLetters", func(t *testing.T) {
		st := newStore(t)
		q := st.DLQ()
		ctx := t.Context()
		now := time.Now()
		for i, at := range []time.Time{now.Add(-3 * time.Hour), now.Add(-2 * time.Hour), now.Add(-90 * time.Minute), now} {
			_, err := q.PutDeadLetter(ctx, deadLetter(fmt.Sprintf("dl-%d", i), at))
			require.NoError(t, err)
		}
		r := st.Retention()
		require.Equal(t, 3, drain(t, 2, func(limit int) (int, error) { return r.PruneDeadLetters(ctx, now.Add(-time.Hour), limit) }))
		es, err := q.ListDeadLetters(ctx, store.DLQFilter{IncludeRequeued: true})
		require.NoError(t, err)
		require.Equal(t, []string{"dl-3"}, dlqMessageIDs(es), "the newer one stays")
		again, err := q.PutDeadLetter(ctx, deadLetter("dl-0", now))
		require.NoError(t, err)
		require.Equal(t, now.UTC().Truncate(time.Microsecond), again.FailedAt.UTC(), "a pruned entry's message_id is free again")
	})

	t.Run("Messages", func(t *testing.T) {
		st := newStore(t)
		mp := st.Messages()
		ctx := t.Context()
		finish := func(id string, seq int64, to commonpb.EnvelopeState) {
			t.Helper()
			if seq > 0 {
				_, ok, err := mp.Confirm(ctx, "bob", seq, id)
				require.NoError(t, err)
				require.True(t, ok)
			}
			if to != 0 {
				_, applied, err := mp.Advance(ctx, store.Transition{MessageID: id, To: to}, always)
				require.NoError(t, err)
				require.True(t, applied)
			}
		}
		// Finished and old: fulfilled and delivered, an untracked one delivered.
		finish("old-done", admit(t, mp, "old-done", "bob", 0, true), commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED)
		finish("old-untracked", admit(t, mp, "old-untracked", "bob", 0, false), 0)
		// Old but unfinished: still SENT and buffered; terminal but still buffered; terminal
		// and delivered but awaiting a response.
		admit(t, mp, "old-sent", "bob", 0, true)
		admit(t, mp, "old-buffered", "bob", 0, true)
		finish("old-buffered", 0, commonpb.EnvelopeState_ENVELOPE_STATE_FAILED)
		finish("old-awaiting", admit(t, mp, "old-awaiting", "bob", 0, true), commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED)
		require.NoError(t, mp.AddPendingResponse(ctx, store.PendingResponse{RequestMessageID: "old-awaiting", ProducerID: "alice",
			ResponderID: "bob", Attempt: 1, MaxAttempts: 1, Timeout: time.Hour, Deadline: time.Now().Add(time.Hour)}))
		cutoff := boundary()
		finish("new-done", admit(t, mp, "new-done", "bob", 0, true), commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED)

		r := st.Retention()
		require.Equal(t, 2, drain(t, 1, func(limit int) (int, error) { return r.PruneMessages(ctx, cutoff, limit) }))
		_, err := mp.GetMessage(ctx, "old-done")
		require.ErrorIs(t, err, store.ErrNotFound)
		for _, id := range []string{"old-sent", "old-buffered", "old-awaiting", "new-done"} {
			_, err := mp.GetMessage(ctx, id)
			require.NoError(t, err, "%s stays", id)
		}
		// The untracked one's duplicate detection went with it: its id is admitted again.
		_, err = mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope("old-untracked"), RecipientID: "bob"})
		require.NoError(t, err)
		_, err = mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope("old-sent"), RecipientID: "bob"})
		require.ErrorIs(t, err, store.ErrDuplicateMessage)
		require.Equal(t, 0, drain(t, 5, func(limit int) (int, error) { return r.PruneMessages(ctx, cutoff, limit) }))
	})

	t.Run("HandoffsAndFences", func(t *testing.T) {
		st := newStore(t)
		h := st.Handoffs()
		ctx := t.Context()
		createHandoff(t, h, handoffRec("old-done", "c1", "alice", "bob"))
		updateHandoff(t, h, "old-done", handoffpb.HandoffStatus_ACCEPTED, "bob", "bob", "")
		updateHandoff(t, h, "old-done", handoffpb.HandoffStatus_COMPLETED, "bob", "bob", "")
		createHandoff(t, h, handoffRec("old-rejected", "c2", "alice", "bob"))
		updateHandoff(t, h, "old-rejected", handoffpb.HandoffStatus_REJECTED, "bob", "", "busy")
		createHandoff(t, h, handoffRec("old-pending", "c3", "alice", "bob"))
		createHandoff(t, h, handoffRec("old-accepted", "c4", "alice", "bob"))
		updateHandoff(t, h, "old-accepted", handoffpb.HandoffStatus_ACCEPTED, "bob", "bob", "")
		cutoff := boundary()
		createHandoff(t, h, handoffRec("new-done", "c5", "alice", "bob"))
		updateHandoff(t, h, "new-done", handoffpb.HandoffStatus_EXPIRED, "bob", "", "deadline")

		r := st.Retention()
		require.Equal(t, 2, drain(t, 1, func(limit int) (int, error) { return r.PruneHandoffs(ctx, cutoff, limit) }))
		for _, id := range []string{"old-done", "old-rejected"} {
			_, err := h.GetHandoff(ctx, id)
			require.ErrorIs(t, err, store.ErrNotFound, id)
		}
		for _, id := range []string{"old-pending", "old-accepted", "new-done"} {
			getHandoff(t, h, id)
		}

		// Fences: an old one of an ended (here pruned) handoff goes, an old one whose handoff
		// is still open stays, a newer one stays.
		old := time.Now().Add(-2 * time.Hour)
		for _, f := range []store.Fence{
			{Correlation: "c1", AgentID: "alice", RequestID: "old-done", NewOwner: "bob", At: old},
			{Correlation: "c4", AgentID: "alice", RequestID: "old-accepted", NewOwner: "bob", At: old},
			{Correlation: "c5", AgentID: "alice", RequestID: "new-done", NewOwner: "bob", At: time.Now()},
		} {
			require.NoError(t, h.Fence(ctx, f))
		}
		gen := fencesGeneration(t, h)
		require.Equal(t, 1, drain(t, 1, func(limit int) (int, error) { return r.PruneFences(ctx, time.Now().Add(-time.Hour), limit) }))
		require.Greater(t, fencesGeneration(t, h), gen, "the routers' caches see the deletion")
		fs, err := h.ListFences(ctx)
		require.NoError(t, err)
		require.Len(t, fs, 2)
		require.Equal(t, []string{"c4", "c5"}, []string{fs[0].Correlation, fs[1].Correlation})
		gen = fencesGeneration(t, h)
		require.Equal(t, 0, drain(t, 1, func(limit int) (int, error) { return r.PruneFences(ctx, time.Now().Add(-time.Hour), limit) }))
		require.Equal(t, gen, fencesGeneration(t, h), "nothing deleted, nothing bumped")
	})

	t.Run("HITL", func(t *testing.T) {
		st := newStore(t)
		hs := st.HITL()
		ctx := t.Context()
		old := time.Now().Add(-2 * time.Hour)
		for _, id := range []string{"old-decided", "old-pending", "late-decided"} {
			require.NoError(t, hs.PutInvocation(ctx, hitlRecord(id, "SECURITY_APPROVAL", old)))
		}
		require.NoError(t, hs.CompleteInvocation(ctx, "old-decided", []byte(`{"decision":"approve"}`), old.Add(time.Minute)))
		require.NoError(t, hs.CompleteInvocation(ctx, "late-decided", []byte(`{"decision":"approve"}`), time.Now()))
		r := st.Retention()
		require.Equal(t, 1, drain(t, 1, func(limit int) (int, error) { return r.PruneHITL(ctx, time.Now().Add(-time.Hour), limit) }))
		_, err := hs.GetInvocation(ctx, "old-decided")
		require.ErrorIs(t, err, store.ErrNotFound)
		for _, id := range []string{"old-pending", "late-decided"} {
			_, err := hs.GetInvocation(ctx, id)
			require.NoError(t, err, "%s stays", id)
		}
	})

	t.Run("ToolCalls", func(t *testing.T) {
		st := newStore(t)
		c := st.ToolCalls()
		ctx := t.Context()
		for _, id := range []string{"old-done", "old-open", "old-late"} {
			_, _, err := c.CreateCall(ctx, store.ToolCallRecord{CallID: id, Caller: "agent:a", ProviderID: "builtin", ToolName: "echo"})
			require.NoError(t, err)
			_, err = c.AppendFrame(ctx, id, "text/plain", []byte("x"))
			require.NoError(t, err)
		}
		_, _, err := c.Finish(ctx, "old-done", "text/plain", nil, nil)
		require.NoError(t, err)
		cutoff := boundary()
		// Created before the cutoff but finished after it: its client may still be reading.
		_, _, err = c.Finish(ctx, "old-late", "text/plain", nil, nil)
		require.NoError(t, err)
		_, _, err = c.CreateCall(ctx, store.ToolCallRecord{CallID: "new-done", Caller: "agent:a", ProviderID: "builtin", ToolName: "echo"})
		require.NoError(t, err)
		_, _, err = c.Finish(ctx, "new-done", "text/plain", nil, nil)
		require.NoError(t, err)

		r := st.Retention()
		require.Equal(t, 1, drain(t, 1, func(limit int) (int, error) { return r.PruneToolCalls(ctx, cutoff, limit) }))
		_, err = c.GetCall(ctx, "old-done")
		require.ErrorIs(t, err, store.ErrNotFound)
		fs, err := c.Frames(ctx, "old-done", 0, 0)
		require.NoError(t, err)
		require.Empty(t, fs, "the frames go with their call")
		for _, id := range []string{"old-open", "old-late", "new-done"} {
			_, err := c.GetCall(ctx, id)
			require.NoError(t, err, "%s stays", id)
		}
	})
}
