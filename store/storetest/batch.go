package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// leaseLong keeps claimed rows from being handed out again within a test.
const leaseLong = time.Minute

// runAdmitBatch runs the promises of AdmitBatch, the write a fan-out makes (on PostgreSQL one
// transaction): each member is decided as if admitted alone after the members before it, and
// a member that fails fails only itself.
func runAdmitBatch(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("AdmitBatchFailingMemberFailsOnlyItself", func(t *testing.T) {
		st := newStore(t)
		mp, ctx := st.Messages(), t.Context()
		admit(t, mp, "known", "bob", 0, true)
		audited := &store.Event{Actor: "alice", Type: "message.admitted", AgentID: "bob"}
		res := mp.AdmitBatch(ctx, []store.AdmitRequest{
			{Envelope: Envelope("b1"), RecipientID: "bob", Track: true, Audit: audited},
			{Envelope: Envelope("known"), RecipientID: "bob", Track: true, Audit: audited}, // admitted before the batch
			{Envelope: Envelope("b2"), RecipientID: "carol", Track: true, Audit: audited},
			{Envelope: Envelope("b1"), RecipientID: "carol", Track: true, Audit: audited}, // admitted by an earlier member
			{Envelope: nil, RecipientID: "carol"},                                         // malformed
			{Envelope: Envelope("b3"), RecipientID: "bob", Audit: audited},
		})
		require.Len(t, res, 6)
		require.NoError(t, res[0].Err)
		require.ErrorIs(t, res[1].Err, store.ErrDuplicateMessage)
		require.NoError(t, res[2].Err)
		require.ErrorIs(t, res[3].Err, store.ErrDuplicateMessage)
		require.Error(t, res[4].Err)
		require.NoError(t, res[5].Err)
		require.Less(t, res[0].Seq, res[5].Seq, "one recipient's members keep the batch's order")

		// The members that succeeded are there, once, with their audit rows; the others
		// changed nothing.
		require.Equal(t, []string{"known", "b1", "b3"}, messageIDs(claim(t, mp, "bob", 10, leaseLong)))
		require.Equal(t, []string{"b2"}, messageIDs(claim(t, mp, "carol", 10, leaseLong)))
		rec, err := mp.GetMessage(ctx, "b1")
		require.NoError(t, err)
		require.Equal(t, "bob", rec.RecipientID, "the duplicate did not replace the first admission")
		events, err := st.Audit().List(ctx, store.AuditFilter{TypePrefix: "message.admitted"})
		require.NoError(t, err)
		var ids []string
		for _, e := range events {
			ids = append(ids, e.MessageID)
		}
		require.ElementsMatch(t, []string{"b1", "b2", "b3"}, ids, "an audit row for each admitted member only")
	})

	t.Run("AdmitBatchFullBufferInsideTheBatch", func(t *testing.T) {
		mp, ctx := newStore(t).Messages(), t.Context()
		admit(t, mp, "before", "bob", 3, true)
		var reqs []store.AdmitRequest
		for _, id := range []string{"f1", "f2", "f3", "f4"} {
			reqs = append(reqs, store.AdmitRequest{Envelope: Envelope(id), RecipientID: "bob", Capacity: 3, Track: true})
		}
		// Control traffic is never refused for a full buffer, and another recipient's
		// capacity is its own.
		reqs = append(reqs,
			store.AdmitRequest{Envelope: Envelope("ctl"), RecipientID: "bob"},
			store.AdmitRequest{Envelope: Envelope("other"), RecipientID: "carol", Capacity: 3, Track: true})
		res := mp.AdmitBatch(ctx, reqs)
		require.NoError(t, res[0].Err)
		require.NoError(t, res[1].Err)
		require.ErrorIs(t, res[2].Err, store.ErrBufferFull, "the earlier members' rows count against the capacity")
		require.ErrorIs(t, res[3].Err, store.ErrBufferFull)
		require.NoError(t, res[4].Err)
		require.NoError(t, res[5].Err)
		require.Equal(t, 4, depth(t, mp, "bob"))
		for _, id := range []string{"f3", "f4"} {
			rec, err := mp.GetMessage(ctx, id)
			require.NoError(t, err, "a refused tracked member is recorded (§13: never a silent drop)")
			require.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED, rec.State)
			require.Equal(t, commonpb.ErrorCode_BUFFER_FULL, rec.ErrorCode)
		}
	})

	t.Run("AdmitBatchIdempotencyAcrossMembers", func(t *testing.T) {
		mp, ctx := newStore(t).Messages(), t.Context()
		res := mp.AdmitBatch(ctx, []store.AdmitRequest{
			dedupReq("k1", "bob", "t:op"),
			dedupReq("k2", "bob", "t:op"), // the same operation, another attempt, while the first is in progress
			dedupReq("k3", "bob", "t:other"),
		})
		require.NoError(t, res[0].Err)
		var dup *store.DedupError
		require.ErrorAs(t, res[1].Err, &dup)
		require.True(t, dup.InProgress, "the first member's entry is in progress: %v", res[1].Err)
		require.Equal(t, "k1", dup.Entry.LatestMessageID)
		require.NoError(t, res[2].Err)
		require.Equal(t, []string{"k1", "k3"}, messageIDs(claim(t, mp, "bob", 10, leaseLong)))
	})

	t.Run("AdmitBatchesConcurrently", func(t *testing.T) {
		// Batches and single admissions racing for one capacity-limited recipient (and for
		// each other's message_ids) never overfill it nor admit an id twice.
		mp, ctx := newStore(t).Messages(), t.Context()
		const writers, perBatch, capacity = 6, 5, 12
		var wg sync.WaitGroup
		admitted := make(chan string, writers*perBatch)
		for w := range writers {
			wg.Go(func() {
				var reqs []store.AdmitRequest
				for i := range perBatch {
					// Writer w's ids alternate between its own and writer w+1's, so
					// neighbours share two of them.
					id := fmt.Sprintf("%c%d", 'a'+(w+i%2)%writers, i/2)
					reqs = append(reqs, store.AdmitRequest{Envelope: Envelope(id), RecipientID: "bob", Capacity: capacity, Track: true})
				}
				for i, r := range mp.AdmitBatch(ctx, reqs) {
					if r.Err == nil {
						admitted <- reqs[i].Envelope.GetMessageId()
					} else if !errors.Is(r.Err, store.ErrBufferFull) && !errors.Is(r.Err, store.ErrDuplicateMessage) {
						t.Errorf("member %s: %v", reqs[i].Envelope.GetMessageId(), r.Err)
					}
				}
			})
		}
		wg.Wait()
		close(admitted)
		seen := map[string]bool{}
		for id := range admitted {
			require.False(t, seen[id], "%s admitted twice", id)
			seen[id] = true
		}
		require.Len(t, seen, capacity, "the buffer filled exactly")
		require.Equal(t, capacity, depth(t, mp, "bob"))
	})
}
