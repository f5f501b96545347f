package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// takeHanded waits for in to fire and returns what it holds.
func takeHanded(t *testing.T, in *store.Inbox, what string) []store.Delivery {
	t.Helper()
	select {
	case <-in.Ready():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing handed over", what)
	}
	return in.Take()
}

// runHandOver checks Attach: a row admitted while its agent's stream is attached and nothing
// else of the agent is deliverable goes straight to the stream, leased; anything else waits
// for a claim in order, and what the stream never took is claimable again once it detaches.
func runHandOver(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("AdmitWithNothingWaiting", func(t *testing.T) {
		mp := newStore(t).Messages()
		in, detach := mp.Attach("bob", time.Hour)
		defer detach()
		seq := admit(t, mp, "m1", "bob", 10, true)
		ds := takeHanded(t, in, "Admit")
		require.Len(t, ds, 1)
		require.Equal(t, seq, ds[0].Seq)
		require.Equal(t, "bob", ds[0].AgentID)
		require.Equal(t, 1, ds[0].Attempts, "a hand-over counts as the first attempt")
		require.Equal(t, commonpb.CommunicationClass_STANDARD, ds[0].Lane)
		requireProtoEqual(t, Envelope("m1"), ds[0].Envelope)
		require.False(t, ds[0].EnqueuedAt.IsZero())
		// The row is leased to the stream: no claim gets it, yet it is in the buffer.
		require.Empty(t, claim(t, mp, "bob", 10, time.Hour))
		require.Equal(t, 1, depth(t, mp, "bob"))
		_, ok, err := mp.Confirm(t.Context(), "bob", seq, "m1")
		require.NoError(t, err)
		require.True(t, ok)
	})

	t.Run("NotOtherAgents", func(t *testing.T) {
		mp := newStore(t).Messages()
		in, detach := mp.Attach("bob", time.Hour)
		defer detach()
		admit(t, mp, "m1", "carol", 0, false)
		require.Len(t, claim(t, mp, "carol", 10, time.Hour), 1)
		require.Empty(t, in.Take())
	})

	t.Run("NeverOvertakesADeliverableRow", func(t *testing.T) {
		mp := newStore(t).Messages()
		first := admit(t, mp, "m1", "bob", 10, true) // before the stream attached: for a claim
		in, detach := mp.Attach("bob", time.Hour)
		defer detach()
		second := admit(t, mp, "m2", "bob", 10, true)
		require.Empty(t, in.Take(), "m1 waits for a claim, so m2 must too")
		require.Equal(t, []int64{first, second}, seqs(claim(t, mp, "bob", 10, time.Hour)))
		// Both leased now: the next one is handed over.
		third := admit(t, mp, "m3", "bob", 10, true)
		ds := takeHanded(t, in, "Admit after the claim")
		require.Equal(t, []int64{third}, seqs(ds))
	})

	t.Run("ReleaseLeasesMakesItClaimable", func(t *testing.T) {
		mp := newStore(t).Messages()
		in, detach := mp.Attach("bob", time.Hour)
		defer detach()
		seq := admit(t, mp, "m1", "bob", 0, true)
		require.Len(t, takeHanded(t, in, "Admit"), 1)
		require.NoError(t, mp.ReleaseLeases(t.Context(), "bob"))
		ds := claim(t, mp, "bob", 10, time.Hour)
		require.Equal(t, []int64{seq}, seqs(ds))
		require.Equal(t, 2, ds[0].Attempts)
	})

	t.Run("DetachReleasesWhatWasNeverTaken", func(t *testing.T) {
		mp := newStore(t).Messages()
		in, detach := mp.Attach("bob", time.Hour)
		seq := admit(t, mp, "m1", "bob", 0, true)
		select {
		case <-in.Ready():
		case <-time.After(10 * time.Second):
			t.Fatal("nothing handed over")
		}
		detach() // the stream ended without taking it
		detach() // idempotent
		ds := claim(t, mp, "bob", 10, time.Hour)
		require.Equal(t, []int64{seq}, seqs(ds), "a row the stream never took is claimable at once")
		require.Equal(t, 1, ds[0].Attempts, "the hand-over that never reached a stream is not an attempt")
		// Detached: the next admission is for a claim again.
		admit(t, mp, "m2", "bob", 0, true)
		require.Len(t, claim(t, mp, "bob", 10, time.Hour), 1)
		require.Empty(t, in.Take())
	})

	t.Run("LatestAttachWins", func(t *testing.T) {
		mp := newStore(t).Messages()
		old, detachOld := mp.Attach("bob", time.Hour)
		in, detach := mp.Attach("bob", time.Hour)
		defer detach()
		detachOld() // the superseded stream ending does not detach its successor
		seq := admit(t, mp, "m1", "bob", 0, true)
		require.Equal(t, []int64{seq}, seqs(takeHanded(t, in, "Admit")))
		require.Empty(t, old.Take())
	})

	t.Run("StepFollowUp", func(t *testing.T) {
		mp := newStore(t).Messages()
		seq := admit(t, mp, "m1", "bob", 0, true)
		require.Len(t, claim(t, mp, "bob", 10, time.Hour), 1)
		in, detach := mp.Attach("alice", time.Hour)
		defer detach()
		res, err := mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: "bob", Seq: seq, MessageID: "m1",
			Plan: stepTo(stReceived, "", followUp("f1")).plan})
		require.NoError(t, err)
		require.True(t, res.Applied)
		ds := takeHanded(t, in, "the follow-up")
		require.Equal(t, []int64{res.FollowUpSeq}, seqs(ds))
		require.Equal(t, "f1", ds[0].Envelope.GetMessageId())
		require.Equal(t, commonpb.CommunicationClass_PRIVILEGED, ds[0].Lane)
		require.Empty(t, claim(t, mp, "alice", 10, time.Hour))
	})

	t.Run("BatchMembers", func(t *testing.T) {
		mp := newStore(t).Messages()
		in, detach := mp.Attach("bob", time.Hour)
		defer detach()
		res := mp.AdmitBatch(t.Context(), []store.AdmitRequest{
			{Envelope: Envelope("m1"), RecipientID: "bob"},
			{Envelope: Envelope("m2"), RecipientID: "bob"},
		})
		require.NoError(t, res[0].Err)
		require.NoError(t, res[1].Err)
		// The first finds nothing deliverable; the second finds the first leased: both handed,
		// in order.
		var got []int64
		for len(got) < 2 {
			got = append(got, seqs(takeHanded(t, in, "AdmitBatch"))...)
		}
		require.Equal(t, []int64{res[0].Seq, res[1].Seq}, got)
	})
}
