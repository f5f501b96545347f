package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// This file tests Handoffs: the handoff projection written with its workflow's start, its
// transitions and listings, and the fences (§17.6).

// handoffRec returns a PENDING handoff of from on correlation offered to target.
func handoffRec(requestID, correlation, from, target string) store.HandoffRecord {
	return store.HandoffRecord{
		RequestID: requestID, Correlation: correlation, From: from, Target: target,
		Status:             handoffpb.HandoffStatus_PENDING,
		Request:            []byte("request " + requestID),
		ContextContentType: "application/json",
	}
}

func createHandoff(t *testing.T, h store.Handoffs, rec store.HandoffRecord, hs ...store.OutboxEntry) store.HandoffRecord {
	t.Helper()
	got, err := h.CreateHandoff(t.Context(), rec, hs...)
	require.NoError(t, err, "create handoff %s", rec.RequestID)
	return got
}

func getHandoff(t *testing.T, h store.Handoffs, requestID string) store.HandoffRecord {
	t.Helper()
	got, err := h.GetHandoff(t.Context(), requestID)
	require.NoError(t, err)
	return got
}

func updateHandoff(t *testing.T, h store.Handoffs, requestID string, status handoffpb.HandoffStatus, target, acceptedBy, endReason string) {
	t.Helper()
	require.NoError(t, h.UpdateHandoff(t.Context(), requestID, status, target, acceptedBy, endReason))
}

func handoffRequestIDs(recs []store.HandoffRecord) []string {
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.RequestID
	}
	return ids
}

func fencesGeneration(t *testing.T, h store.Handoffs) int64 {
	t.Helper()
	g, err := h.FencesGeneration(t.Context())
	require.NoError(t, err)
	return g
}

func fenced(t *testing.T, h store.Handoffs, correlation, agentID string) (store.Fence, bool) {
	t.Helper()
	f, ok, err := h.Fenced(t.Context(), correlation, agentID)
	require.NoError(t, err)
	return f, ok
}

func pendingHandoffIDs(t *testing.T, ob store.Outbox) []string {
	t.Helper()
	hs, err := ob.Pending(t.Context(), 100)
	require.NoError(t, err)
	return outboxIDs(hs)
}

func runHandoffs(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("CreateWritesTheOutbox", func(t *testing.T) {
		s := newStore(t)
		h, ob := s.Handoffs(), s.Outbox()
		rec := handoffRec("r1", "corr-1", "alice", "bob")
		got := createHandoff(t, h, rec, outboxEntry("start-r1"))

		// Every field kept; the store sets the times.
		requireRecent(t, got.CreatedAt)
		require.Equal(t, got.CreatedAt, got.UpdatedAt)
		want := rec
		want.CreatedAt, want.UpdatedAt = got.CreatedAt, got.UpdatedAt
		require.Equal(t, want, got)
		require.Equal(t, want, getHandoff(t, h, "r1"))

		// The workflow's start is in the outbox, leased to the writer for its in-line attempt.
		require.Equal(t, []string{"start-r1"}, pendingHandoffIDs(t, ob))
		claimed, err := ob.Claim(t.Context(), longLease, 10)
		require.NoError(t, err)
		require.Empty(t, claimed, "leased to the writer")
	})

	t.Run("DuplicateReturnsTheExistingAndWritesNothing", func(t *testing.T) {
		s := newStore(t)
		h, ob := s.Handoffs(), s.Outbox()
		first := createHandoff(t, h, handoffRec("r1", "corr-1", "alice", "bob"), outboxEntry("start-r1"))

		// A reuse of the request_id (§17.6) answers with the stored handoff, whatever the new
		// request says, and writes neither the record nor its handoffs.
		again := handoffRec("r1", "corr-2", "mallory", "carol")
		again.Request = []byte("another request")
		got, err := h.CreateHandoff(t.Context(), again, outboxEntry("start-r1-again"))
		require.ErrorIs(t, err, store.ErrDuplicateHandoff)
		require.Equal(t, first, got, "the existing record is returned")
		require.Equal(t, first, getHandoff(t, h, "r1"))
		require.Equal(t, []string{"start-r1"}, pendingHandoffIDs(t, ob), "no second outbox row")

		// Also once the first has moved on.
		updateHandoff(t, h, "r1", handoffpb.HandoffStatus_ACCEPTED, "", "bob", "")
		got, err = h.CreateHandoff(t.Context(), again)
		require.ErrorIs(t, err, store.ErrDuplicateHandoff)
		require.Equal(t, handoffpb.HandoffStatus_ACCEPTED, got.Status)
		require.Equal(t, "bob", got.AcceptedBy)
	})

	t.Run("Defaults", func(t *testing.T) {
		h := newStore(t).Handoffs()
		rec := handoffRec("r1", "corr-1", "alice", "")
		rec.Status = handoffpb.HandoffStatus_HANDOFF_STATUS_UNSPECIFIED
		rec.Request = nil
		rec.CreatedAt = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC) // ignored: the store sets it
		got := createHandoff(t, h, rec)
		require.Equal(t, handoffpb.HandoffStatus_PENDING, got.Status, "a zero status is stored as PENDING")
		requireRecent(t, got.CreatedAt)
		require.Nil(t, got.Request)
		require.Equal(t, got, getHandoff(t, h, "r1"))

		_, err := h.CreateHandoff(t.Context(), handoffRec("", "corr-1", "alice", "bob"))
		require.Error(t, err, "a request_id is required")
	})

	t.Run("Copies", func(t *testing.T) {
		h := newStore(t).Handoffs()
		rec := handoffRec("r1", "corr-1", "alice", "bob")
		got := createHandoff(t, h, rec)
		rec.Request[0] ^= 0xff
		got.Request[1] ^= 0xff
		read := getHandoff(t, h, "r1")
		require.Equal(t, []byte("request r1"), read.Request, "the store keeps its own bytes")
		read.Request[2] ^= 0xff
		require.Equal(t, []byte("request r1"), getHandoff(t, h, "r1").Request)
		offered, err := h.ListOfferedTo(t.Context(), "bob")
		require.NoError(t, err)
		offered[0].Request[0] ^= 0xff
		require.Equal(t, []byte("request r1"), getHandoff(t, h, "r1").Request)
	})

	t.Run("NotFound", func(t *testing.T) {
		h := newStore(t).Handoffs()
		_, err := h.GetHandoff(t.Context(), "nope")
		require.ErrorIs(t, err, store.ErrNotFound)
		err = h.UpdateHandoff(t.Context(), "nope", handoffpb.HandoffStatus_ACCEPTED, "bob", "bob", "")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("UpdateKeepsEmptyFields", func(t *testing.T) {
		h := newStore(t).Handoffs()
		created := createHandoff(t, h, handoffRec("r1", "corr-1", "alice", "bob"))

		// A redirect: a new target, nothing else.
		updateHandoff(t, h, "r1", handoffpb.HandoffStatus_PENDING, "carol", "", "")
		got := getHandoff(t, h, "r1")
		require.Equal(t, "carol", got.Target)
		require.Equal(t, handoffpb.HandoffStatus_PENDING, got.Status)
		require.Empty(t, got.AcceptedBy)
		require.False(t, got.UpdatedAt.Before(created.UpdatedAt), "UpdatedAt moves forward")

		// Accepted: the target stays.
		updateHandoff(t, h, "r1", handoffpb.HandoffStatus_ACCEPTED, "", "carol", "")
		got = getHandoff(t, h, "r1")
		require.Equal(t, handoffpb.HandoffStatus_ACCEPTED, got.Status)
		require.Equal(t, "carol", got.Target)
		require.Equal(t, "carol", got.AcceptedBy)

		// An unspecified status keeps the stored one.
		updateHandoff(t, h, "r1", handoffpb.HandoffStatus_HANDOFF_STATUS_UNSPECIFIED, "", "", "note")
		got = getHandoff(t, h, "r1")
		require.Equal(t, handoffpb.HandoffStatus_ACCEPTED, got.Status)
		require.Equal(t, "note", got.EndReason)

		// Ended: the reason is recorded; what was not named is as it was.
		updateHandoff(t, h, "r1", handoffpb.HandoffStatus_EXPIRED, "", "", "cancelled: operator")
		got = getHandoff(t, h, "r1")
		require.Equal(t, handoffpb.HandoffStatus_EXPIRED, got.Status)
		require.Equal(t, "cancelled: operator", got.EndReason)
		require.Equal(t, "carol", got.Target)
		require.Equal(t, "carol", got.AcceptedBy)
		require.Equal(t, created.CreatedAt, got.CreatedAt)
		require.Equal(t, created.Request, got.Request)
		require.Equal(t, created.From, got.From)
		require.Equal(t, created.Correlation, got.Correlation)
		require.Equal(t, created.ContextContentType, got.ContextContentType)
	})

	t.Run("ListOfferedTo", func(t *testing.T) {
		h := newStore(t).Handoffs()
		createHandoff(t, h, handoffRec("h1", "corr-a", "alice", "bob"))
		createHandoff(t, h, handoffRec("h2", "corr-a", "alice", "carol"))
		createHandoff(t, h, handoffRec("h3", "corr-b", "alice", "bob"))
		createHandoff(t, h, handoffRec("h4", "corr-c", "alice", "bob"))
		createHandoff(t, h, handoffRec("h5", "corr-d", "alice", "bob"))
		createHandoff(t, h, handoffRec("h6", "corr-e", "alice", "carol"))
		createHandoff(t, h, handoffRec("h0", "corr-f", "alice", "bob"))
		updateHandoff(t, h, "h4", handoffpb.HandoffStatus_ACCEPTED, "", "bob", "")
		updateHandoff(t, h, "h5", handoffpb.HandoffStatus_EXPIRED, "", "", "timeout")
		updateHandoff(t, h, "h6", handoffpb.HandoffStatus_PENDING, "bob", "", "") // redirected to bob

		got, err := h.ListOfferedTo(t.Context(), "bob")
		require.NoError(t, err)
		require.Equal(t, []string{"h1", "h3", "h6", "h0"}, handoffRequestIDs(got),
			"PENDING on bob only, oldest first (by creation, not by id)")
		require.Equal(t, getHandoff(t, h, "h1"), got[0], "whole records")
		got, err = h.ListOfferedTo(t.Context(), "carol")
		require.NoError(t, err)
		require.Equal(t, []string{"h2"}, handoffRequestIDs(got), "no longer offered to carol after the redirect")
		got, err = h.ListOfferedTo(t.Context(), "dave")
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("ListAcceptedBy", func(t *testing.T) {
		h := newStore(t).Handoffs()
		createHandoff(t, h, handoffRec("a1", "corr-a", "alice", "bob"))
		createHandoff(t, h, handoffRec("a2", "corr-b", "alice", "bob"))
		createHandoff(t, h, handoffRec("a3", "corr-c", "alice", "carol"))
		createHandoff(t, h, handoffRec("a4", "corr-d", "alice", "bob"))
		createHandoff(t, h, handoffRec("a5", "corr-e", "alice", "bob"))
		createHandoff(t, h, handoffRec("a0", "corr-f", "alice", "bob"))
		updateHandoff(t, h, "a2", handoffpb.HandoffStatus_ACCEPTED, "", "bob", "")
		updateHandoff(t, h, "a3", handoffpb.HandoffStatus_ACCEPTED, "", "carol", "")
		updateHandoff(t, h, "a4", handoffpb.HandoffStatus_ACCEPTED, "", "bob", "")
		updateHandoff(t, h, "a4", handoffpb.HandoffStatus_COMPLETED, "", "", "")
		updateHandoff(t, h, "a5", handoffpb.HandoffStatus_ACCEPTED, "", "", "") // no accepter recorded: its target
		updateHandoff(t, h, "a0", handoffpb.HandoffStatus_ACCEPTED, "", "bob", "")

		got, err := h.ListAcceptedBy(t.Context(), "bob")
		require.NoError(t, err)
		require.Equal(t, []string{"a2", "a5", "a0"}, handoffRequestIDs(got),
			"ACCEPTED by bob only — not PENDING on him, not completed — oldest first")
		require.Equal(t, getHandoff(t, h, "a2"), got[0], "whole records, the snapshot's request with them")
		got, err = h.ListAcceptedBy(t.Context(), "carol")
		require.NoError(t, err)
		require.Equal(t, []string{"a3"}, handoffRequestIDs(got))
		got, err = h.ListAcceptedBy(t.Context(), "dave")
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("ListByCorrelation", func(t *testing.T) {
		h := newStore(t).Handoffs()
		createHandoff(t, h, handoffRec("z1", "corr-a", "alice", "bob"))
		createHandoff(t, h, handoffRec("y2", "corr-b", "alice", "bob"))
		createHandoff(t, h, handoffRec("x3", "corr-a", "bob", "carol"))
		updateHandoff(t, h, "z1", handoffpb.HandoffStatus_COMPLETED, "", "bob", "")
		got, err := h.ListByCorrelation(t.Context(), "corr-a")
		require.NoError(t, err)
		require.Equal(t, []string{"z1", "x3"}, handoffRequestIDs(got), "every state, oldest first")
		require.Equal(t, handoffpb.HandoffStatus_COMPLETED, got[0].Status)
		got, err = h.ListByCorrelation(t.Context(), "corr-none")
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("OpenDelegations", func(t *testing.T) {
		h := newStore(t).Handoffs()
		got, err := h.OpenDelegations(t.Context())
		require.NoError(t, err)
		require.Empty(t, got)

		createHandoff(t, h, handoffRec("p1", "c1", "alice", "bob"))
		createHandoff(t, h, handoffRec("p2", "c2", "alice", "bob"))
		createHandoff(t, h, handoffRec("p3", "c3", "alice", "carol"))
		createHandoff(t, h, handoffRec("p4", "c4", "alice", "")) // not offered yet: occupies no one
		createHandoff(t, h, handoffRec("a1", "c5", "alice", "dave"))
		updateHandoff(t, h, "a1", handoffpb.HandoffStatus_ACCEPTED, "", "dave", "")
		accepted := handoffRec("a2", "c6", "alice", "erin") // accepted, no accepter recorded
		accepted.Status = handoffpb.HandoffStatus_ACCEPTED
		createHandoff(t, h, accepted)
		for i, st := range []handoffpb.HandoffStatus{
			handoffpb.HandoffStatus_COMPLETED, handoffpb.HandoffStatus_REJECTED, handoffpb.HandoffStatus_EXPIRED,
		} {
			id := fmt.Sprintf("e%d", i)
			createHandoff(t, h, handoffRec(id, "c7", "alice", "bob"))
			updateHandoff(t, h, id, st, "", "", "ended")
		}
		// Accepted, then cancelled: ended, so dave's count drops back.
		createHandoff(t, h, handoffRec("a3", "c8", "alice", "dave"))
		updateHandoff(t, h, "a3", handoffpb.HandoffStatus_ACCEPTED, "", "dave", "")
		updateHandoff(t, h, "a3", handoffpb.HandoffStatus_EXPIRED, "", "", "cancelled")

		got, err = h.OpenDelegations(t.Context())
		require.NoError(t, err)
		require.Equal(t, map[string]int{"bob": 2, "carol": 1, "dave": 1, "erin": 1}, got)
	})

	t.Run("Fences", func(t *testing.T) {
		h := newStore(t).Handoffs()
		_, ok := fenced(t, h, "corr-1", "alice")
		require.False(t, ok)
		g0 := fencesGeneration(t, h)

		require.NoError(t, h.Fence(t.Context(), store.Fence{Correlation: "corr-1", AgentID: "alice", RequestID: "r1", NewOwner: "bob"}))
		f, ok := fenced(t, h, "corr-1", "alice")
		require.True(t, ok)
		requireRecent(t, f.At)
		require.Equal(t, store.Fence{Correlation: "corr-1", AgentID: "alice", RequestID: "r1", NewOwner: "bob", At: f.At}, f)
		g1 := fencesGeneration(t, h)
		require.NotEqual(t, g0, g1, "a new fence changes the generation")

		// Setting it again (a retried activity, or another handoff) changes nothing.
		require.NoError(t, h.Fence(t.Context(), store.Fence{Correlation: "corr-1", AgentID: "alice", RequestID: "r9", NewOwner: "carol"}))
		again, ok := fenced(t, h, "corr-1", "alice")
		require.True(t, ok)
		require.Equal(t, f, again, "the first fence stands")
		require.Equal(t, g1, fencesGeneration(t, h), "a repeated fence leaves the generation")

		// Fences are per (correlation, agent).
		_, ok = fenced(t, h, "corr-1", "bob")
		require.False(t, ok)
		_, ok = fenced(t, h, "corr-2", "alice")
		require.False(t, ok)
		at := time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
		require.NoError(t, h.Fence(t.Context(), store.Fence{Correlation: "corr-1", AgentID: "bob", RequestID: "r2", NewOwner: "carol", At: at}))
		f2, ok := fenced(t, h, "corr-1", "bob")
		require.True(t, ok)
		require.Equal(t, store.Fence{Correlation: "corr-1", AgentID: "bob", RequestID: "r2", NewOwner: "carol", At: at}, f2)
		require.NotEqual(t, g1, fencesGeneration(t, h))

		all, err := h.ListFences(t.Context())
		require.NoError(t, err)
		require.Equal(t, []store.Fence{f, f2}, all, "every fence, ordered by correlation and agent")

		require.Error(t, h.Fence(t.Context(), store.Fence{AgentID: "alice"}), "a correlation is required")
		require.Error(t, h.Fence(t.Context(), store.Fence{Correlation: "corr-1"}), "an agent is required")
	})

	t.Run("ConcurrentFences", func(t *testing.T) {
		h := newStore(t).Handoffs()
		g0 := fencesGeneration(t, h)
		var (
			mu   sync.Mutex
			errs []error
		)
		atOnce(8, func(i int) {
			err := h.Fence(t.Context(), store.Fence{Correlation: "corr-1", AgentID: "alice", RequestID: fmt.Sprintf("r%d", i), NewOwner: "bob"})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
		})
		require.Empty(t, errs)
		_, ok := fenced(t, h, "corr-1", "alice")
		require.True(t, ok)
		g1 := fencesGeneration(t, h)
		require.NotEqual(t, g0, g1)
		// One fence, so the generation moved once: one more new fence moves it by as much again
		// as one fence does (generations are counters in both stores).
		require.NoError(t, h.Fence(t.Context(), store.Fence{Correlation: "corr-2", AgentID: "alice", RequestID: "r", NewOwner: "bob"}))
		require.Equal(t, g1-g0, fencesGeneration(t, h)-g1)
	})

	t.Run("ConcurrentCreateOneWins", func(t *testing.T) {
		s := newStore(t)
		h := s.Handoffs()
		const n = 8
		var (
			mu     sync.Mutex
			dupsOK = true
		)
		winner := oneWins(t, n, store.ErrDuplicateHandoff, func(i int) error {
			got, err := h.CreateHandoff(t.Context(), handoffRec("r1", "corr-1", fmt.Sprintf("agent-%d", i), "bob"),
				outboxEntry(fmt.Sprintf("start-%d", i)))
			if err != nil {
				mu.Lock()
				// A loser is answered with the winner's record, never an empty one.
				dupsOK = dupsOK && got.RequestID == "r1" && got.From != fmt.Sprintf("agent-%d", i)
				mu.Unlock()
			}
			return err
		})
		require.True(t, dupsOK, "every duplicate returns the winner's record")
		require.Equal(t, fmt.Sprintf("agent-%d", winner), getHandoff(t, h, "r1").From)
		require.Equal(t, []string{fmt.Sprintf("start-%d", winner)}, pendingHandoffIDs(t, s.Outbox()),
			"only the winner's handoff is written")
	})
}
