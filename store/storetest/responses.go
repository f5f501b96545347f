package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// runPendingResponses checks the requests that wait for a response (004 §1–§2).
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
