package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// This file tests the message-plane promises added for lanes (§7.3), TTL and ACK timeouts
// (§11), the idempotency cache (§11.1–§11.3), stream resumption (§5.5), retention, buffer
// metrics (§13) and pending responses (004).

const (
	stSent      = commonpb.EnvelopeState_ENVELOPE_STATE_SENT
	stReceived  = commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED
	stFulfilled = commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED
	stRejected  = commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED
	stFailed    = commonpb.EnvelopeState_ENVELOPE_STATE_FAILED
	stTimedOut  = commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT
)

// always allows every transition; the tests below are about what the store does around it.
func always(_, _ commonpb.EnvelopeState) bool { return true }

func admitReq(t *testing.T, mp store.MessagePlane, req store.AdmitRequest) int64 {
	t.Helper()
	seq, err := mp.Admit(t.Context(), req)
	require.NoError(t, err, "admit %s", req.Envelope.GetMessageId())
	require.Positive(t, seq)
	return seq
}

// laneReq is a tracked admission into a lane.
func laneReq(id, recipient string, lane commonpb.CommunicationClass) store.AdmitRequest {
	return store.AdmitRequest{Envelope: Envelope(id), RecipientID: recipient, Track: true, Lane: lane}
}

// dedupReq is a tracked admission under alice's idempotency key.
func dedupReq(id, recipient, key string) store.AdmitRequest {
	return store.AdmitRequest{Envelope: Envelope(id), RecipientID: recipient, Track: true,
		Dedup: &store.Dedup{ProducerID: "alice", Key: key}}
}

func claimW(t *testing.T, mp store.MessagePlane, agentID string, limit int, w store.LaneWeights) []store.Delivery {
	t.Helper()
	ds, err := mp.Claim(t.Context(), store.ClaimRequest{AgentID: agentID, Limit: limit, Lease: time.Hour, Weights: w})
	require.NoError(t, err)
	return ds
}

func advance(t *testing.T, mp store.MessagePlane, id string, to commonpb.EnvelopeState, code commonpb.ErrorCode, note string) store.MessageRecord {
	t.Helper()
	rec, applied, err := mp.Advance(t.Context(), store.Transition{MessageID: id, To: to, ErrorCode: code, Note: note}, always)
	require.NoError(t, err)
	require.True(t, applied, "advance %s to %s", id, to)
	return rec
}

func entry(t *testing.T, mp store.MessagePlane, key string) store.IdempotencyEntry {
	t.Helper()
	e, err := mp.Idempotency(t.Context(), "alice", key, time.Hour)
	require.NoError(t, err, "idempotency entry %s", key)
	return e
}

func getMessage(t *testing.T, mp store.MessagePlane, id string) store.MessageRecord {
	t.Helper()
	rec, err := mp.GetMessage(t.Context(), id)
	require.NoError(t, err)
	return rec
}

func requireDedupError(t *testing.T, err error, inProgress bool) *store.DedupError {
	t.Helper()
	var de *store.DedupError
	require.ErrorAs(t, err, &de)
	require.Equal(t, inProgress, de.InProgress)
	return de
}

func expiredIDs(xs []store.ExpiredMessage) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.Record.MessageID
	}
	return out
}

// ---------------------------------------------------------------------------------------------
// Lanes and TTL

func runLanes(t *testing.T, newStore func(t *testing.T) store.Store) {
	// admitMix admits nP PRIVILEGED, nS STANDARD and nB BULK rows to bob, named p0.., s0..,
	// b0.., interleaved so that seq order alone never gives the expected claim order.
	admitMix := func(t *testing.T, mp store.MessagePlane, nP, nS, nB int) {
		t.Helper()
		var p, s, b int
		for p < nP || s < nS || b < nB {
			if b < nB {
				admitReq(t, mp, laneReq(fmt.Sprintf("b%d", b), "bob", commonpb.CommunicationClass_BULK))
				b++
			}
			if s < nS {
				admitReq(t, mp, laneReq(fmt.Sprintf("s%d", s), "bob", commonpb.CommunicationClass_STANDARD))
				s++
			}
			for range 2 {
				if p < nP {
					admitReq(t, mp, laneReq(fmt.Sprintf("p%d", p), "bob", commonpb.CommunicationClass_PRIVILEGED))
					p++
				}
			}
		}
	}
	ids := func(prefix string, from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("%s%d", prefix, i))
		}
		return out
	}

	t.Run("WeightedRoundRobin", func(t *testing.T) {
		mp := newStore(t).Messages()
		admitMix(t, mp, 12, 6, 2)
		ds := claimW(t, mp, "bob", 20, store.LaneWeights{Privileged: 6, Standard: 3, Bulk: 1})
		want := slices.Concat(ids("p", 0, 6), ids("s", 0, 3), ids("b", 0, 1), ids("p", 6, 12), ids("s", 3, 6), ids("b", 1, 2))
		require.Equal(t, want, messageIDs(ds), "6P,3S,1B,6P,3S,1B")
		for _, d := range ds {
			require.Equal(t, 1, d.Attempts)
		}
		require.Empty(t, claimW(t, mp, "bob", 20, store.LaneWeights{Privileged: 6, Standard: 3, Bulk: 1}))
	})

	t.Run("EachClaimStartsARoundWithPrivileged", func(t *testing.T) {
		mp := newStore(t).Messages()
		admitMix(t, mp, 12, 6, 2)
		w := store.LaneWeights{Privileged: 6, Standard: 3, Bulk: 1}
		require.Equal(t, ids("p", 0, 4), messageIDs(claimW(t, mp, "bob", 4, w)), "the limit cuts the first round")
		want := slices.Concat(ids("p", 4, 10), ids("s", 0, 3), ids("b", 0, 1), ids("p", 10, 12), ids("s", 3, 6), ids("b", 1, 2))
		require.Equal(t, want, messageIDs(claimW(t, mp, "bob", 20, w)))
	})

	t.Run("LimitTakesWholeRounds", func(t *testing.T) {
		mp := newStore(t).Messages()
		admitMix(t, mp, 12, 6, 2)
		w := store.LaneWeights{Privileged: 6, Standard: 3, Bulk: 1}
		want := slices.Concat(ids("p", 0, 6), ids("s", 0, 3), ids("b", 0, 1))
		require.Equal(t, want, messageIDs(claimW(t, mp, "bob", 10, w)), "one round, not the first 10 PRIVILEGED rows")
		want = slices.Concat(ids("p", 6, 12), ids("s", 3, 6), ids("b", 1, 2))
		require.Equal(t, want, messageIDs(claimW(t, mp, "bob", 10, w)))
	})

	t.Run("LaneWithNothingYields", func(t *testing.T) {
		mp := newStore(t).Messages()
		admitMix(t, mp, 8, 0, 3)
		ds := claimW(t, mp, "bob", 20, store.LaneWeights{Privileged: 2, Standard: 3, Bulk: 1})
		require.Equal(t, []string{"p0", "p1", "b0", "p2", "p3", "b1", "p4", "p5", "b2", "p6", "p7"}, messageIDs(ds))

		// Leased rows are not deliverable either: with the PRIVILEGED rows all leased, the
		// other lanes share the claim.
		mp = newStore(t).Messages()
		admitMix(t, mp, 4, 4, 4)
		require.Equal(t, ids("p", 0, 4), messageIDs(claimW(t, mp, "bob", 4, store.LaneWeights{Privileged: 9})))
		ds = claimW(t, mp, "bob", 6, store.LaneWeights{Privileged: 9, Standard: 2, Bulk: 1})
		require.Equal(t, []string{"s0", "s1", "b0", "s2", "s3", "b1"}, messageIDs(ds))
	})

	t.Run("ZeroWeightCountsAsOne", func(t *testing.T) {
		mp := newStore(t).Messages()
		admitMix(t, mp, 3, 3, 3)
		ds := claimW(t, mp, "bob", 9, store.LaneWeights{})
		require.Equal(t, []string{"p0", "s0", "b0", "p1", "s1", "b1", "p2", "s2", "b2"}, messageIDs(ds))
	})

	t.Run("UnspecifiedIsStandard", func(t *testing.T) {
		mp := newStore(t).Messages()
		admitReq(t, mp, laneReq("u0", "bob", commonpb.CommunicationClass_COMM_CLASS_UNSPECIFIED))
		admitReq(t, mp, laneReq("p0", "bob", commonpb.CommunicationClass_PRIVILEGED))
		admitReq(t, mp, laneReq("s0", "bob", commonpb.CommunicationClass_STANDARD))
		admitReq(t, mp, laneReq("b0", "bob", commonpb.CommunicationClass_BULK))
		admitReq(t, mp, laneReq("u1", "bob", commonpb.CommunicationClass_COMM_CLASS_UNSPECIFIED))
		ds := claimW(t, mp, "bob", 10, store.LaneWeights{Privileged: 1, Standard: 1, Bulk: 1})
		require.Equal(t, []string{"p0", "u0", "b0", "s0", "u1"}, messageIDs(ds))
	})

	t.Run("TTLRowsAreNotDeliverable", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		past := time.Now().Add(-time.Second)
		// Long enough that a loaded shared machine admits and claims within it.
		const ttl = 3 * time.Second
		soon := time.Now().Add(ttl)
		start := time.Now()
		admitReq(t, mp, store.AdmitRequest{Envelope: Envelope("gone"), RecipientID: "bob", Track: true, ExpiresAt: past})
		admitReq(t, mp, store.AdmitRequest{Envelope: Envelope("soon"), RecipientID: "bob", Track: true, ExpiresAt: soon})
		admitReq(t, mp, store.AdmitRequest{Envelope: Envelope("never"), RecipientID: "bob", Track: true})
		admitReq(t, mp, store.AdmitRequest{Envelope: Envelope("ctl"), RecipientID: "bob", ExpiresAt: past})

		rec := getMessage(t, mp, "soon")
		require.True(t, soon.Truncate(time.Microsecond).Equal(rec.ExpiresAt), "ExpiresAt round-trips: %v vs %v", soon, rec.ExpiresAt)
		require.Equal(t, time.UTC, rec.ExpiresAt.Location())
		require.True(t, getMessage(t, mp, "never").ExpiresAt.IsZero())

		ds := claim(t, mp, "bob", 10, time.Millisecond)
		require.Less(t, time.Since(start), ttl, "the machine is too slow for this test's TTL")
		require.Equal(t, []string{"soon", "never"}, messageIDs(ds), "a row whose TTL ran out is never handed out")

		time.Sleep(time.Until(soon.Add(200 * time.Millisecond)))
		require.NoError(t, mp.ReleaseLeases(ctx, "bob"))
		require.Equal(t, []string{"never"}, messageIDs(claim(t, mp, "bob", 10, time.Hour)), "not even when it was claimed before")
		require.Equal(t, 4, depth(t, mp, "bob"), "expired rows stay unconfirmed until the sweep")
	})
}

// ---------------------------------------------------------------------------------------------
// Expire

func runExpire(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("AckTimeout", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		const timeout = 500 * time.Millisecond
		admitReq(t, mp, dedupReq("m1", "bob", "k1"))
		m2 := admit(t, mp, "m2", "carol", 0, true)
		admit(t, mp, "m3", "bob", 0, false)
		admit(t, mp, "m4", "bob", 0, true)
		advance(t, mp, "m4", stReceived, 0, "")
		require.Len(t, claim(t, mp, "carol", 10, time.Hour), 1) // m2 reaches a stream
		time.Sleep(timeout + 100*time.Millisecond)
		admitted := time.Now()
		admit(t, mp, "m5", "bob", 0, true)

		require.Empty(t, mustExpire(t, mp, time.Hour, 100), "nothing is older than an hour")
		xs := mustExpire(t, mp, timeout, 100)
		require.Less(t, time.Since(admitted), timeout, "the machine is too slow for this test's timeout")
		require.Equal(t, []string{"m1", "m2"}, expiredIDs(xs), "only tracked messages still SENT, oldest first")
		for _, x := range xs {
			require.Equal(t, stTimedOut, x.Record.State)
			require.Equal(t, commonpb.ErrorCode_ACK_TIMEOUT, x.Record.ErrorCode)
			require.NotEmpty(t, x.Record.Note)
			got := getMessage(t, mp, x.Record.MessageID)
			require.Equal(t, stTimedOut, got.State)
			require.Equal(t, commonpb.ErrorCode_ACK_TIMEOUT, got.ErrorCode)
			require.True(t, got.UpdatedAt.Equal(x.Record.UpdatedAt))
			requireProtoEqual(t, Envelope(x.Record.MessageID), x.Record.Envelope)
		}
		require.NotNil(t, xs[0].Entry, "m1 has a key")
		require.Equal(t, store.OpRetrying, xs[0].Entry.Status, "TIMED_OUT makes the entry retrying")
		require.Equal(t, "m1", xs[0].Entry.LatestMessageID)
		require.Equal(t, store.OpRetrying, entry(t, mp, "k1").Status)
		require.Nil(t, xs[1].Entry, "m2 has no key")
		require.Equal(t, "k1", xs[0].Record.DedupKey)
		require.Empty(t, xs[1].Record.DedupKey)

		// m1 was never claimed: it left bob's buffer. m3 (untracked), m4 (RECEIVED) and m5
		// (young) are still there.
		require.Equal(t, 3, depth(t, mp, "bob"))
		require.Equal(t, []string{"m3", "m4", "m5"}, messageIDs(claim(t, mp, "bob", 10, time.Hour)))
		// m2 was handed to a stream: its row stays until confirmed.
		require.Equal(t, 1, depth(t, mp, "carol"))
		_, ok, err := mp.Confirm(ctx, "carol", m2, "m2")
		require.NoError(t, err)
		require.True(t, ok)

		require.Equal(t, stReceived, getMessage(t, mp, "m4").State)
		require.Empty(t, mustExpire(t, mp, timeout, 100), "each message expires once")

		// The retry of m1's operation is admitted as the next attempt.
		admitReq(t, mp, dedupReq("m1b", "bob", "k1"))
		e := entry(t, mp, "k1")
		require.Equal(t, store.OpInProgress, e.Status)
		require.Equal(t, "m1", e.OriginalMessageID)
		require.Equal(t, "m1b", e.LatestMessageID)
		require.Equal(t, 2, e.Attempts)
	})

	t.Run("TTLWinsAndLimit", func(t *testing.T) {
		mp := newStore(t).Messages()
		admit(t, mp, "a1", "bob", 0, true)
		req := dedupReq("t1", "bob", "kt")
		req.ExpiresAt = time.Now().Add(-time.Second)
		admitReq(t, mp, req)
		admit(t, mp, "a2", "bob", 0, true)
		time.Sleep(50 * time.Millisecond)

		xs := mustExpire(t, mp, 20*time.Millisecond, 2)
		require.Equal(t, []string{"a1", "t1"}, expiredIDs(xs), "at most limit, oldest first")
		require.Equal(t, stTimedOut, xs[0].Record.State)
		require.Equal(t, stFailed, xs[1].Record.State, "TTL wins over the ACK timeout")
		require.Equal(t, commonpb.ErrorCode_TTL_EXPIRED, xs[1].Record.ErrorCode)
		e := xs[1].Entry
		require.NotNil(t, e)
		require.Equal(t, store.OpTerminal, e.Status, "TTL_EXPIRED makes the entry terminal")
		require.Equal(t, "t1", e.OriginalMessageID)
		require.Equal(t, stFailed, e.TerminalState)
		require.Equal(t, commonpb.ErrorCode_TTL_EXPIRED, e.ErrorCode)
		require.Equal(t, xs[1].Record.Note, e.Result)
		requireRecent(t, e.CachedAt)
		require.Equal(t, e, ptr(entry(t, mp, "kt")))

		require.Equal(t, []string{"a2"}, expiredIDs(mustExpire(t, mp, 20*time.Millisecond, 2)))
		require.Equal(t, 0, depth(t, mp, "bob"), "none of them was ever claimed")

		// A retry gets the cached outcome.
		_, err := mp.Admit(t.Context(), dedupReq("t2", "bob", "kt"))
		de := requireDedupError(t, err, false)
		require.Equal(t, stFailed, de.Entry.TerminalState)
	})

	t.Run("TTLAlone", func(t *testing.T) {
		mp := newStore(t).Messages()
		admitReq(t, mp, store.AdmitRequest{Envelope: Envelope("t1"), RecipientID: "bob", Track: true, ExpiresAt: time.Now().Add(200 * time.Millisecond)})
		admit(t, mp, "n1", "bob", 0, true)
		require.Empty(t, mustExpire(t, mp, time.Hour, 10), "the TTL has not run out yet")
		time.Sleep(300 * time.Millisecond)
		xs := mustExpire(t, mp, time.Hour, 10)
		require.Equal(t, []string{"t1"}, expiredIDs(xs))
		require.Equal(t, stFailed, xs[0].Record.State)
		require.Equal(t, commonpb.ErrorCode_TTL_EXPIRED, xs[0].Record.ErrorCode)
		require.Nil(t, xs[0].Entry)
		require.Equal(t, []string{"n1"}, messageIDs(claim(t, mp, "bob", 10, time.Hour)))
	})

	t.Run("ConcurrentSweepsTakeEachMessageOnce", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		const n = 40
		for i := range n {
			admitReq(t, mp, dedupReq(fmt.Sprintf("m%d", i), fmt.Sprintf("agent%d", i%3), fmt.Sprintf("k%d", i)))
		}
		time.Sleep(20 * time.Millisecond)
		drainOnce(t, 8, n, func() ([]string, error) {
			xs, err := mp.Expire(ctx, time.Millisecond, 3)
			ids := make([]string, len(xs))
			for i, x := range xs {
				ids[i] = x.Record.MessageID
			}
			return ids, err
		})
		for i := range n {
			require.Equal(t, store.OpRetrying, entry(t, mp, fmt.Sprintf("k%d", i)).Status)
		}
	})
}

func mustExpire(t *testing.T, mp store.MessagePlane, ackTimeout time.Duration, limit int) []store.ExpiredMessage {
	t.Helper()
	xs, err := mp.Expire(t.Context(), ackTimeout, limit)
	require.NoError(t, err)
	return xs
}

func ptr[T any](v T) *T { return &v }

// ---------------------------------------------------------------------------------------------
// Idempotency

func runIdempotency(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("Lifecycle", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		admitReq(t, mp, dedupReq("m1", "bob", "t:op"))
		e := entry(t, mp, "t:op")
		require.Equal(t, store.IdempotencyEntry{
			ProducerID: "alice", Key: "t:op", Status: store.OpInProgress,
			OriginalMessageID: "m1", LatestMessageID: "m1", Attempts: 1,
			CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt,
		}, e)
		requireRecent(t, e.CreatedAt)
		require.True(t, e.UpdatedAt.Equal(e.CreatedAt))
		require.Equal(t, "t:op", getMessage(t, mp, "m1").DedupKey)

		// In progress: refused, recorded, not enqueued.
		_, err := mp.Admit(ctx, dedupReq("m2", "bob", "t:op"))
		de := requireDedupError(t, err, true)
		require.Equal(t, e, de.Entry)
		require.Contains(t, err.Error(), "m1")
		rec := getMessage(t, mp, "m2")
		require.Equal(t, stRejected, rec.State)
		require.Equal(t, commonpb.ErrorCode_ALREADY_IN_PROGRESS, rec.ErrorCode)
		require.Equal(t, "t:op", rec.DedupKey)
		require.Equal(t, 1, depth(t, mp, "bob"))
		require.Equal(t, e, entry(t, mp, "t:op"), "a refused attempt changes nothing")

		// Timed out: the next attempt is admitted.
		advance(t, mp, "m1", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		e = entry(t, mp, "t:op")
		require.Equal(t, store.OpRetrying, e.Status)
		require.False(t, e.UpdatedAt.Before(e.CreatedAt))
		admitReq(t, mp, dedupReq("m3", "bob", "t:op"))
		e = entry(t, mp, "t:op")
		require.Equal(t, store.OpInProgress, e.Status)
		require.Equal(t, "m1", e.OriginalMessageID)
		require.Equal(t, "m3", e.LatestMessageID)
		require.Equal(t, 2, e.Attempts)
		require.Equal(t, 2, depth(t, mp, "bob"))

		// Completed: the outcome is cached.
		advance(t, mp, "m3", stFulfilled, 0, `{"result":42}`)
		e = entry(t, mp, "t:op")
		require.Equal(t, store.OpTerminal, e.Status)
		require.Equal(t, "m3", e.OriginalMessageID)
		require.Equal(t, "m3", e.LatestMessageID)
		require.Equal(t, 2, e.Attempts)
		require.Equal(t, stFulfilled, e.TerminalState)
		require.Equal(t, commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED, e.ErrorCode)
		require.Equal(t, `{"result":42}`, e.Result)
		requireRecent(t, e.CachedAt)

		_, err = mp.Admit(ctx, dedupReq("m4", "bob", "t:op"))
		de = requireDedupError(t, err, false)
		require.Equal(t, e, de.Entry)
		require.Contains(t, err.Error(), "m3")
		rec = getMessage(t, mp, "m4")
		require.Equal(t, stRejected, rec.State)
		require.Equal(t, commonpb.ErrorCode_DUPLICATE_DETECTED, rec.ErrorCode)
		require.Equal(t, 2, depth(t, mp, "bob"), "a duplicate is not re-executed")

		// Keys are scoped to the producer.
		other := dedupReq("x1", "bob", "t:op")
		other.Dedup.ProducerID = "mallory"
		admitReq(t, mp, other)
		require.Equal(t, e, entry(t, mp, "t:op"))
		oe, err := mp.Idempotency(ctx, "mallory", "t:op", 0)
		require.NoError(t, err, "a zero window is the default one")
		require.Equal(t, "x1", oe.OriginalMessageID)
		_, err = mp.Idempotency(ctx, "alice", "t:unknown", time.Hour)
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("DuplicateMessageIDChangesNothing", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		admitReq(t, mp, dedupReq("m1", "bob", "k1"))
		before := entry(t, mp, "k1")
		for _, capacity := range []int{0, 10} {
			req := dedupReq("m1", "bob", "k2")
			req.Capacity = capacity
			_, err := mp.Admit(ctx, req)
			require.ErrorIs(t, err, store.ErrDuplicateMessage)
			_, err = mp.Idempotency(ctx, "alice", "k2", time.Hour)
			require.ErrorIs(t, err, store.ErrNotFound, "a duplicate creates no entry (capacity %d)", capacity)
			req = dedupReq("m1", "bob", "k1")
			req.Capacity = capacity
			_, err = mp.Admit(ctx, req)
			require.ErrorIs(t, err, store.ErrDuplicateMessage, "the message_id check comes first")
		}
		require.Equal(t, before, entry(t, mp, "k1"))
		require.Equal(t, 1, depth(t, mp, "bob"))
		require.Equal(t, stSent, getMessage(t, mp, "m1").State)
	})

	t.Run("DuplicateOfRetryingAttemptChangesNothing", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		admitReq(t, mp, dedupReq("m1", "bob", "k1"))
		advance(t, mp, "m1", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		before := entry(t, mp, "k1")
		require.Equal(t, store.OpRetrying, before.Status)
		// A retrying entry would take any new attempt, so only the message_id check stops this
		// one; whatever the admission began must be undone.
		for _, capacity := range []int{0, 10} {
			req := dedupReq("m1", "carol", "k1")
			req.Capacity = capacity
			_, err := mp.Admit(ctx, req)
			require.ErrorIs(t, err, store.ErrDuplicateMessage)
			require.Equal(t, before, entry(t, mp, "k1"), "the entry still waits for its next attempt (capacity %d)", capacity)
		}
		require.Equal(t, 0, depth(t, mp, "carol"))
		require.Equal(t, stTimedOut, getMessage(t, mp, "m1").State)
		admitReq(t, mp, dedupReq("m2", "carol", "k1"))
		e := entry(t, mp, "k1")
		require.Equal(t, store.OpInProgress, e.Status)
		require.Equal(t, "m2", e.LatestMessageID)
		require.Equal(t, 2, e.Attempts)
	})

	t.Run("BufferFullLeavesCacheUntouched", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		admit(t, mp, "fill", "bob", 1, true)

		req := dedupReq("m1", "bob", "k1")
		req.Capacity = 1
		_, err := mp.Admit(ctx, req)
		require.ErrorIs(t, err, store.ErrBufferFull)
		_, err = mp.Idempotency(ctx, "alice", "k1", time.Hour)
		require.ErrorIs(t, err, store.ErrNotFound, "no entry for an operation that was not admitted")
		rec := getMessage(t, mp, "m1")
		require.Equal(t, stRejected, rec.State)
		require.Equal(t, commonpb.ErrorCode_BUFFER_FULL, rec.ErrorCode)

		// A retrying entry stays retrying.
		admitReq(t, mp, dedupReq("r1", "carol", "k2"))
		advance(t, mp, "r1", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		before := entry(t, mp, "k2")
		req = dedupReq("r2", "bob", "k2")
		req.Capacity = 1
		_, err = mp.Admit(ctx, req)
		require.ErrorIs(t, err, store.ErrBufferFull)
		require.Equal(t, before, entry(t, mp, "k2"))

		// The cache answers before the capacity check: a duplicate is a duplicate, an operation
		// in progress is in progress, even into a full buffer.
		admitReq(t, mp, dedupReq("d1", "carol", "k3"))
		req = dedupReq("d2", "bob", "k3")
		req.Capacity = 1
		_, err = mp.Admit(ctx, req)
		_ = requireDedupError(t, err, true)
		advance(t, mp, "d1", stFulfilled, 0, "done")
		req = dedupReq("d3", "bob", "k3")
		req.Capacity = 1
		_, err = mp.Admit(ctx, req)
		_ = requireDedupError(t, err, false)
		require.Equal(t, commonpb.ErrorCode_DUPLICATE_DETECTED, getMessage(t, mp, "d3").ErrorCode)

		// With room again, the retry of k2 is admitted.
		_, ok, err := mp.Confirm(ctx, "bob", claim(t, mp, "bob", 1, time.Hour)[0].Seq, "fill")
		require.NoError(t, err)
		require.True(t, ok)
		req = dedupReq("r3", "bob", "k2")
		req.Capacity = 1
		admitReq(t, mp, req)
		require.Equal(t, 2, entry(t, mp, "k2").Attempts)
	})

	t.Run("UntrackedAdmissionIgnoresDedup", func(t *testing.T) {
		mp := newStore(t).Messages()
		req := dedupReq("u1", "bob", "k1")
		req.Track = false
		admitReq(t, mp, req)
		_, err := mp.Idempotency(t.Context(), "alice", "k1", time.Hour)
		require.ErrorIs(t, err, store.ErrNotFound)
		admitReq(t, mp, dedupReq("m1", "bob", "k1"))
	})

	t.Run("Window", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		const window = 300 * time.Millisecond
		req := dedupReq("m1", "bob", "k1")
		req.Dedup.Window = window
		admitReq(t, mp, req)
		advance(t, mp, "m1", stFulfilled, 0, "one")
		first := entry(t, mp, "k1")
		_, err := mp.Idempotency(ctx, "alice", "k1", window)
		require.NoError(t, err)
		req = dedupReq("m2", "bob", "k1")
		req.Dedup.Window = window
		_, err = mp.Admit(ctx, req)
		_ = requireDedupError(t, err, false)

		time.Sleep(window + 100*time.Millisecond)
		_, err = mp.Idempotency(ctx, "alice", "k1", window)
		require.ErrorIs(t, err, store.ErrNotFound, "out of the window")
		require.Equal(t, first, entry(t, mp, "k1"), "still there for a longer window")

		// An entry out of the window is replaced as if absent.
		req = dedupReq("m3", "bob", "k1")
		req.Dedup.Window = window
		admitReq(t, mp, req)
		e := entry(t, mp, "k1")
		require.Equal(t, store.IdempotencyEntry{
			ProducerID: "alice", Key: "k1", Status: store.OpInProgress,
			OriginalMessageID: "m3", LatestMessageID: "m3", Attempts: 1,
			CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt,
		}, e)
		require.True(t, e.CreatedAt.After(first.CreatedAt))
	})

	t.Run("AdvanceMaintainsEntry", func(t *testing.T) {
		mp := newStore(t).Messages()
		admitReq(t, mp, dedupReq("a1", "bob", "ka"))
		advance(t, mp, "a1", stReceived, 0, "")
		require.Equal(t, store.OpInProgress, entry(t, mp, "ka").Status, "non-terminal stages leave the entry")
		advance(t, mp, "a1", stRejected, commonpb.ErrorCode_VALIDATION_ERROR, "bad input")
		e := entry(t, mp, "ka")
		require.Equal(t, store.OpTerminal, e.Status)
		require.Equal(t, stRejected, e.TerminalState)
		require.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, e.ErrorCode)
		require.Equal(t, "bad input", e.Result)
		// Entries never go back from terminal, and the first outcome stays.
		advance(t, mp, "a1", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		advance(t, mp, "a1", stFulfilled, 0, "other")
		require.Equal(t, e, entry(t, mp, "ka"))

		// TIMED_OUT of an attempt that is not the latest leaves the entry in progress.
		req := dedupReq("c1", "bob", "kc")
		req.Dedup.Window = 200 * time.Millisecond
		admitReq(t, mp, req)
		time.Sleep(300 * time.Millisecond)
		req = dedupReq("c2", "bob", "kc")
		req.Dedup.Window = 200 * time.Millisecond
		admitReq(t, mp, req)
		advance(t, mp, "c1", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		e = entry(t, mp, "kc")
		require.Equal(t, store.OpInProgress, e.Status)
		require.Equal(t, "c2", e.LatestMessageID)
		// A FAILED completion of any attempt is the outcome.
		advance(t, mp, "c2", stFailed, commonpb.ErrorCode_AGENT_UNAVAILABLE, "gone")
		e = entry(t, mp, "kc")
		require.Equal(t, store.OpTerminal, e.Status)
		require.Equal(t, "c2", e.OriginalMessageID)
		require.Equal(t, stFailed, e.TerminalState)
		require.Equal(t, commonpb.ErrorCode_AGENT_UNAVAILABLE, e.ErrorCode)
	})

	t.Run("ConcurrentAdmitsOneToken", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		race := func(round int) (admitted string) {
			const n = 20
			var (
				wg         sync.WaitGroup
				mu         sync.Mutex
				ok         []string
				inProgress int
				errs       []error
			)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req := dedupReq(fmt.Sprintf("r%d-%d", round, i), []string{"bob", "carol"}[i%2], "t:same")
					if i%3 == 0 {
						req.Capacity = 100 // the recipient lock path as well
					}
					_, err := mp.Admit(ctx, req)
					mu.Lock()
					defer mu.Unlock()
					var de *store.DedupError
					switch {
					case err == nil:
						ok = append(ok, req.Envelope.GetMessageId())
					case errors.As(err, &de) && de.InProgress:
						inProgress++
					default:
						errs = append(errs, err)
					}
				}()
			}
			wg.Wait()
			require.Empty(t, errs)
			require.Len(t, ok, 1, "exactly one attempt of one operation is admitted")
			require.Equal(t, n-1, inProgress)
			for i := range n {
				id := fmt.Sprintf("r%d-%d", round, i)
				if id == ok[0] {
					continue
				}
				rec := getMessage(t, mp, id)
				require.Equal(t, stRejected, rec.State)
				require.Equal(t, commonpb.ErrorCode_ALREADY_IN_PROGRESS, rec.ErrorCode)
			}
			return ok[0]
		}
		first := race(0)
		require.Equal(t, 1, depth(t, mp, "bob")+depth(t, mp, "carol"))
		e := entry(t, mp, "t:same")
		require.Equal(t, first, e.LatestMessageID)
		require.Equal(t, 1, e.Attempts)

		advance(t, mp, first, stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		second := race(1)
		require.Equal(t, 2, depth(t, mp, "bob")+depth(t, mp, "carol"))
		e = entry(t, mp, "t:same")
		require.Equal(t, first, e.OriginalMessageID)
		require.Equal(t, second, e.LatestMessageID)
		require.Equal(t, 2, e.Attempts, "the retrying entry admitted exactly one next attempt")
	})

	t.Run("ConcurrentAdvancesKeepEntryInStep", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		// A forward-only lifecycle like the router's: stages never go back, and a completion
		// (FULFILLED or FAILED) is final.
		rank := map[commonpb.EnvelopeState]int{stSent: 0, stReceived: 1, commonpb.EnvelopeState_ENVELOPE_STATE_READ: 2, stFulfilled: 3, stFailed: 3}
		legal := func(from, to commonpb.EnvelopeState) bool {
			rf, okf := rank[from]
			rt, okt := rank[to]
			return okf && okt && rt > rf
		}
		targets := []commonpb.EnvelopeState{stReceived, commonpb.EnvelopeState_ENVELOPE_STATE_READ, stFulfilled, stFailed}
		for round := range 5 {
			id, key := fmt.Sprintf("m%d", round), fmt.Sprintf("k%d", round)
			admitReq(t, mp, dedupReq(id, "bob", key))
			type result struct {
				to   commonpb.EnvelopeState
				note string
				rec  store.MessageRecord
			}
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				applied []result
				errs    []error
			)
			for i := range 3 * len(targets) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					to, note := targets[i%len(targets)], fmt.Sprintf("call %d", i)
					rec, ok, err := mp.Advance(ctx, store.Transition{MessageID: id, To: to, Note: note}, legal)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						errs = append(errs, err)
					} else if ok {
						applied = append(applied, result{to, note, rec})
					}
				}()
			}
			wg.Wait()
			require.Empty(t, errs)
			var final *result
			seen := map[commonpb.EnvelopeState]bool{}
			for _, r := range applied {
				require.Equal(t, r.to, r.rec.State, "an applied Advance returns the new state")
				require.Equal(t, r.note, r.rec.Note)
				require.False(t, seen[r.to], "stage %s applied twice (round %d)", r.to, round)
				seen[r.to] = true
				if rank[r.to] == 3 {
					require.Nil(t, final, "two completions applied (round %d)", round)
					final = &r
				}
			}
			require.NotNil(t, final, "some completion is always legal until one is applied")
			rec := getMessage(t, mp, id)
			require.Equal(t, final.to, rec.State)
			require.Equal(t, final.note, rec.Note)
			e := entry(t, mp, key)
			require.Equal(t, store.OpTerminal, e.Status)
			require.Equal(t, final.to, e.TerminalState)
			require.Equal(t, final.note, e.Result, "the entry caches the completion that was applied")
			require.Equal(t, id, e.OriginalMessageID)
		}
	})

	t.Run("RecordLateAck", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		admitReq(t, mp, dedupReq("m1", "bob", "k"))
		advance(t, mp, "m1", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "timeout")
		admitReq(t, mp, dedupReq("m2", "bob", "k"))

		la, err := mp.RecordLateAck(ctx, "m1", stReceived, 0, "got it")
		require.NoError(t, err)
		require.False(t, la.Reconciled, "RECEIVED is no completion")
		require.NotNil(t, la.Entry)
		require.Equal(t, store.OpInProgress, la.Entry.Status)

		la, err = mp.RecordLateAck(ctx, "m1", stFulfilled, 0, "r1")
		require.NoError(t, err)
		require.True(t, la.Reconciled)
		require.Equal(t, stTimedOut, la.Record.State, "the late ACK does not change the message's state")
		require.Equal(t, "timeout", la.Record.Note)
		require.Equal(t, "m1", la.Record.MessageID)
		require.Equal(t, stTimedOut, getMessage(t, mp, "m1").State)
		e := *la.Entry
		require.Equal(t, store.OpTerminal, e.Status)
		require.Equal(t, "m1", e.OriginalMessageID, "the earliest successful completion")
		require.Equal(t, "m2", e.LatestMessageID)
		require.Equal(t, 2, e.Attempts)
		require.Equal(t, stFulfilled, e.TerminalState)
		require.Equal(t, "r1", e.Result)
		requireRecent(t, e.CachedAt)
		require.Equal(t, e, entry(t, mp, "k"))

		// The retry times out too and its late completion arrives second: it does not win.
		advance(t, mp, "m2", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		require.Equal(t, e, entry(t, mp, "k"), "a terminal entry is not made retrying")
		la, err = mp.RecordLateAck(ctx, "m2", stFailed, commonpb.ErrorCode_INTERNAL_ERROR, "r2")
		require.NoError(t, err)
		require.False(t, la.Reconciled)
		require.Equal(t, e, *la.Entry)
		require.Equal(t, e, entry(t, mp, "k"))
		_, err = mp.Admit(ctx, dedupReq("m3", "bob", "k"))
		de := requireDedupError(t, err, false)
		require.Equal(t, "r1", de.Entry.Result, "further attempts get the earliest outcome")

		// A message not in TIMED_OUT is not reconciled.
		admitReq(t, mp, dedupReq("s1", "bob", "k2"))
		la, err = mp.RecordLateAck(ctx, "s1", stFulfilled, 0, "early")
		require.NoError(t, err)
		require.False(t, la.Reconciled)
		require.Equal(t, store.OpInProgress, entry(t, mp, "k2").Status)

		// Without a key there is no entry.
		admit(t, mp, "n1", "bob", 0, true)
		advance(t, mp, "n1", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		la, err = mp.RecordLateAck(ctx, "n1", stFulfilled, 0, "x")
		require.NoError(t, err)
		require.False(t, la.Reconciled)
		require.Nil(t, la.Entry)
		require.Equal(t, "n1", la.Record.MessageID)

		_, err = mp.RecordLateAck(ctx, "unknown", stFulfilled, 0, "")
		require.ErrorIs(t, err, store.ErrNotFound)
		admit(t, mp, "u1", "bob", 0, false)
		_, err = mp.RecordLateAck(ctx, "u1", stFulfilled, 0, "")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("ConcurrentLateAcksOneWins", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		admitReq(t, mp, dedupReq("a", "bob", "k"))
		advance(t, mp, "a", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		admitReq(t, mp, dedupReq("b", "bob", "k"))
		advance(t, mp, "b", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []string
			errs    []error
		)
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := []string{"a", "b"}[i%2]
				note := fmt.Sprintf("%s-%d", id, i)
				la, err := mp.RecordLateAck(ctx, id, stFulfilled, 0, note)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				} else if la.Reconciled {
					winners = append(winners, note)
				}
			}()
		}
		wg.Wait()
		require.Empty(t, errs)
		require.Len(t, winners, 1)
		require.Equal(t, winners[0], entry(t, mp, "k").Result)
	})

	t.Run("CancelUndelivered", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		admit(t, mp, "m1", "bob", 0, true)
		admit(t, mp, "m2", "bob", 0, true)
		admit(t, mp, "m3", "bob", 0, false)
		require.Equal(t, []string{"m1"}, messageIDs(claim(t, mp, "bob", 1, time.Hour)))

		cancel := func(id string) bool {
			t.Helper()
			ok, err := mp.CancelUndelivered(ctx, id)
			require.NoError(t, err)
			return ok
		}
		require.False(t, cancel("m1"), "already handed to a stream")
		require.True(t, cancel("m2"))
		require.False(t, cancel("m2"), "already cancelled")
		require.True(t, cancel("m3"), "untracked rows too")
		require.False(t, cancel("unknown"))
		require.Equal(t, 1, depth(t, mp, "bob"))
		require.NoError(t, mp.ReleaseLeases(ctx, "bob"))
		require.Equal(t, []string{"m1"}, messageIDs(claim(t, mp, "bob", 10, time.Hour)))
		require.False(t, cancel("m1"), "released but delivered before")
		require.Equal(t, stSent, getMessage(t, mp, "m2").State, "the record is the caller's to advance")
	})
}

// ---------------------------------------------------------------------------------------------
// Resumption, retention and buffer metrics

func runResume(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("ConfirmsThroughOffset", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		var bob []int64
		for i := range 5 {
			bob = append(bob, admit(t, mp, fmt.Sprintf("b%d", i), "bob", 0, true))
			if i < 2 {
				admit(t, mp, fmt.Sprintf("c%d", i), "carol", 0, true)
			}
		}
		require.Len(t, claim(t, mp, "bob", 10, time.Hour), 5)

		require.NoError(t, mp.ResumeAfter(ctx, "bob", bob[2]))
		require.Equal(t, 2, depth(t, mp, "bob"))
		require.Equal(t, 2, depth(t, mp, "carol"), "another agent's rows are untouched")
		require.NoError(t, mp.ReleaseLeases(ctx, "bob"))
		require.Equal(t, []string{"b3", "b4"}, messageIDs(claim(t, mp, "bob", 10, time.Hour)))
		_, ok, err := mp.Confirm(ctx, "bob", bob[1], "")
		require.NoError(t, err)
		require.False(t, ok, "already confirmed by the resume")
		require.NoError(t, mp.ResumeAfter(ctx, "bob", bob[2]), "resuming again is harmless")
		require.NoError(t, mp.ResumeAfter(ctx, "bob", 0), "nothing was pruned")
		require.Equal(t, 2, depth(t, mp, "bob"))
	})

	t.Run("InvalidPosition", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		require.ErrorIs(t, mp.ResumeAfter(ctx, "bob", 1), store.ErrInvalidPosition, "nothing assigned yet")
		require.NoError(t, mp.ResumeAfter(ctx, "bob", 0))
		admit(t, mp, "b0", "bob", 0, true)
		last := admit(t, mp, "c0", "carol", 0, true)
		require.ErrorIs(t, mp.ResumeAfter(ctx, "bob", last+1), store.ErrInvalidPosition)
		require.ErrorIs(t, mp.ResumeAfter(ctx, "bob", -1), store.ErrInvalidPosition)
		require.Equal(t, 1, depth(t, mp, "bob"), "an invalid position confirms nothing")
		// The last seq assigned counts even when its row is gone.
		gone := admit(t, mp, "b1", "bob", 0, true)
		ok, err := mp.CancelUndelivered(ctx, "b1")
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, mp.ResumeAfter(ctx, "bob", gone), "a seq of any agent up to the last assigned")
		require.Equal(t, 0, depth(t, mp, "bob"))
		require.NoError(t, mp.ResumeAfter(ctx, "carol", last))
		require.Equal(t, 0, depth(t, mp, "carol"))
	})

	t.Run("PruneAndExpiredPosition", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		var bob []int64
		for i := range 4 {
			bob = append(bob, admit(t, mp, fmt.Sprintf("b%d", i), "bob", 0, true))
		}
		admit(t, mp, "c0", "carol", 0, true)
		require.Len(t, claim(t, mp, "bob", 10, time.Hour), 4)
		for _, seq := range bob[:2] {
			_, ok, err := mp.Confirm(ctx, "bob", seq, "")
			require.NoError(t, err)
			require.True(t, ok)
		}
		n, err := mp.Prune(ctx, time.Now().Add(-time.Hour), time.Time{})
		require.NoError(t, err)
		require.Equal(t, 0, n, "confirmed too recently")
		require.NoError(t, mp.ResumeAfter(ctx, "bob", 0), "nothing pruned yet")

		n, err = mp.Prune(ctx, time.Now().Add(time.Minute), time.Time{})
		require.NoError(t, err)
		require.Equal(t, 2, n, "only confirmed rows are pruned")
		n, err = mp.Prune(ctx, time.Now().Add(time.Minute), time.Time{})
		require.NoError(t, err)
		require.Equal(t, 0, n)
		require.Equal(t, 2, depth(t, mp, "bob"))
		require.Equal(t, 1, depth(t, mp, "carol"))

		for _, offset := range []int64{0, bob[0]} {
			err = mp.ResumeAfter(ctx, "bob", offset)
			var pe *store.PositionExpiredError
			require.ErrorAs(t, err, &pe, "offset %d", offset)
			require.Equal(t, offset, pe.Offset)
			require.Equal(t, bob[1], pe.Horizon)
			require.NotEmpty(t, pe.Error())
		}
		require.Equal(t, 2, depth(t, mp, "bob"), "an expired position confirms nothing")
		require.NoError(t, mp.ResumeAfter(ctx, "bob", bob[1]), "resuming from the horizon works")
		require.NoError(t, mp.ResumeAfter(ctx, "carol", 0), "the horizon is per agent")
		require.NoError(t, mp.ResumeAfter(ctx, "bob", bob[3]))
		require.Equal(t, 0, depth(t, mp, "bob"))

		// The horizon only grows.
		n, err = mp.Prune(ctx, time.Now().Add(time.Minute), time.Time{})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		var pe *store.PositionExpiredError
		require.ErrorAs(t, mp.ResumeAfter(ctx, "bob", bob[2]), &pe)
		require.Equal(t, bob[3], pe.Horizon)
	})

	t.Run("PruneIdempotency", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		admitReq(t, mp, dedupReq("m1", "bob", "old"))
		time.Sleep(100 * time.Millisecond)
		mid := time.Now()
		time.Sleep(100 * time.Millisecond)
		admitReq(t, mp, dedupReq("m2", "bob", "new"))
		n, err := mp.Prune(ctx, time.Time{}, mid)
		require.NoError(t, err)
		require.Equal(t, 0, n)
		_, err = mp.Idempotency(ctx, "alice", "old", time.Hour)
		require.ErrorIs(t, err, store.ErrNotFound)
		entry(t, mp, "new")
		// With the entry gone, the key starts a new operation.
		admitReq(t, mp, dedupReq("m3", "bob", "old"))
		require.Equal(t, "m3", entry(t, mp, "old").OriginalMessageID)
	})

	t.Run("BufferStats", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		stats, err := mp.BufferStats(ctx)
		require.NoError(t, err)
		require.Empty(t, stats)

		admit(t, mp, "c0", "carol", 0, true)
		admit(t, mp, "b0", "bob", 0, true)
		time.Sleep(5 * time.Millisecond)
		admit(t, mp, "b1", "bob", 0, false)
		d := admit(t, mp, "d0", "dave", 0, true)
		_, ok, err := mp.Confirm(ctx, "dave", d, "")
		require.NoError(t, err)
		require.True(t, ok)
		bob := claim(t, mp, "bob", 10, time.Hour)
		carol := claim(t, mp, "carol", 10, time.Hour)

		stats, err = mp.BufferStats(ctx)
		require.NoError(t, err)
		require.Len(t, stats, 2, "only agents holding unconfirmed rows")
		require.Equal(t, "bob", stats[0].AgentID)
		require.Equal(t, 2, stats[0].Depth)
		require.True(t, bob[0].EnqueuedAt.Equal(stats[0].OldestEnqueuedAt), "the oldest row's admission time")
		require.Equal(t, "carol", stats[1].AgentID)
		require.Equal(t, 1, stats[1].Depth)
		require.True(t, carol[0].EnqueuedAt.Equal(stats[1].OldestEnqueuedAt))

		_, ok, err = mp.Confirm(ctx, "bob", bob[0].Seq, "")
		require.NoError(t, err)
		require.True(t, ok)
		stats, err = mp.BufferStats(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, stats[0].Depth)
		require.True(t, bob[1].EnqueuedAt.Equal(stats[0].OldestEnqueuedAt))
	})
}

// ---------------------------------------------------------------------------------------------
// Pending responses

func runPendingResponses(t *testing.T, newStore func(t *testing.T) store.Store) {
	requestIDs := func(ps []store.PendingResponse) []string {
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = p.RequestMessageID
		}
		return out
	}

	t.Run("Lifecycle", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		list := func(producer string) []store.PendingResponse {
			t.Helper()
			ps, err := mp.PendingResponses(ctx, producer)
			require.NoError(t, err)
			return ps
		}
		expire := func() []store.PendingResponse {
			t.Helper()
			ps, err := mp.ExpirePendingResponses(ctx, 10)
			require.NoError(t, err)
			return ps
		}
		require.Error(t, mp.AddPendingResponse(ctx, store.PendingResponse{ProducerID: "alice"}), "request id required")

		fixed := time.Now().Add(30 * time.Minute)
		require.NoError(t, mp.AddPendingResponse(ctx, store.PendingResponse{
			RequestMessageID: "r1", ProducerID: "alice", ResponderID: "bob", CorrelationID: "c1",
			Attempt: 1, MaxAttempts: 3, Timeout: time.Hour, Status: "fulfilled", ResponseMessageID: "junk",
		}))
		require.NoError(t, mp.AddPendingResponse(ctx, store.PendingResponse{
			RequestMessageID: "r2", OriginalMessageID: "r0", ProducerID: "alice", ResponderID: "carol",
			Attempt: 2, MaxAttempts: 3, Timeout: 300 * time.Millisecond,
		}))
		require.NoError(t, mp.AddPendingResponse(ctx, store.PendingResponse{
			RequestMessageID: "r3", ProducerID: "zoe", ResponderID: "bob", Timeout: time.Minute, Deadline: fixed,
		}))

		ps := list("alice")
		require.Equal(t, []string{"r2", "r1"}, requestIDs(ps), "ordered by deadline")
		r1 := ps[1]
		require.WithinDuration(t, time.Now().Add(time.Hour), r1.Deadline, time.Minute, "deadline = now + timeout")
		require.Equal(t, store.PendingResponse{
			RequestMessageID: "r1", OriginalMessageID: "r1", ProducerID: "alice", ResponderID: "bob",
			CorrelationID: "c1", Attempt: 1, MaxAttempts: 3, Timeout: time.Hour, Deadline: r1.Deadline,
			Status: "pending",
		}, r1)
		require.Equal(t, "r0", ps[0].OriginalMessageID)
		require.Equal(t, 2, ps[0].Attempt)
		all := list("")
		require.Equal(t, []string{"r2", "r3", "r1"}, requestIDs(all))
		require.True(t, fixed.Truncate(time.Microsecond).Equal(all[1].Deadline), "a given deadline is kept")
		require.Empty(t, list("nobody"))
		require.Empty(t, expire(), "nothing is overdue yet")

		got, ok, err := mp.ResolvePendingResponse(ctx, "r1", "resp1")
		require.NoError(t, err)
		require.True(t, ok)
		want := r1
		want.Status, want.ResponseMessageID = "fulfilled", "resp1"
		require.Equal(t, want, got)
		_, ok, err = mp.ResolvePendingResponse(ctx, "r1", "resp1b")
		require.NoError(t, err)
		require.False(t, ok, "already fulfilled")
		_, ok, err = mp.ResolvePendingResponse(ctx, "unknown", "x")
		require.NoError(t, err)
		require.False(t, ok)

		time.Sleep(400 * time.Millisecond)
		ps = expire()
		require.Equal(t, []string{"r2"}, requestIDs(ps))
		require.Equal(t, "expired", ps[0].Status)
		require.Equal(t, "carol", ps[0].ResponderID)
		require.Empty(t, expire(), "each overdue request is expired once")
		_, ok, err = mp.ResolvePendingResponse(ctx, "r2", "late")
		require.NoError(t, err)
		require.False(t, ok, "an expired request is not resolved")
		require.Empty(t, list("alice"))

		// Adding again replaces.
		require.NoError(t, mp.AddPendingResponse(ctx, store.PendingResponse{
			RequestMessageID: "r3", ProducerID: "zoe", ResponderID: "dave", Deadline: time.Now().Add(-time.Second),
		}))
		ps = list("")
		require.Len(t, ps, 1)
		require.Equal(t, "dave", ps[0].ResponderID)
		ps = expire()
		require.Equal(t, []string{"r3"}, requestIDs(ps))
	})

	t.Run("ConcurrentExpireTakesEachOnce", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		const n = 30
		for i := range n {
			require.NoError(t, mp.AddPendingResponse(ctx, store.PendingResponse{
				RequestMessageID: fmt.Sprintf("r%d", i), ProducerID: "alice", Deadline: time.Now().Add(-time.Second),
			}))
		}
		drainOnce(t, 6, n, func() ([]string, error) {
			ps, err := mp.ExpirePendingResponses(ctx, 2)
			ids := make([]string, len(ps))
			for i, p := range ps {
				ids[i] = p.RequestMessageID
			}
			return ids, err
		})
	})
}
