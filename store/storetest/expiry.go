package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

func expiredIDs(xs []store.ExpiredMessage) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.Record.MessageID
	}
	return out
}

// runExpire checks the sweep of ACK timeouts and TTLs (§11) and what it does to the
// idempotency cache.
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
