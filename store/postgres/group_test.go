package postgres_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/postgres"
	"github.com/sw4rm/sw4rm-temporal/store/postgres/pgtest"
	"github.com/sw4rm/sw4rm-temporal/store/storetest"
)

// TestAdmitBatchIsOneCommit checks that a fan-out's members share one transaction.
func TestAdmitBatchIsOneCommit(t *testing.T) {
	s := open(t, pgtest.NewDatabase(t))
	groups, members := s.GroupCommitStats()
	var reqs []store.AdmitRequest
	for i := range 5 {
		reqs = append(reqs, store.AdmitRequest{Envelope: storetest.Envelope(fmt.Sprintf("f%d", i)), RecipientID: fmt.Sprintf("agent-%d", i), Capacity: 10})
	}
	for _, r := range s.Messages().AdmitBatch(t.Context(), reqs) {
		require.NoError(t, r.Err)
	}
	g, m := s.GroupCommitStats()
	require.Equal(t, groups+1, g, "one commit")
	require.Equal(t, members+5, m, "of five members")
}

// TestConcurrentWritesShareCommits checks that admissions made at the same time by many
// callers are committed in groups, and each is answered.
func TestConcurrentWritesShareCommits(t *testing.T) {
	s := open(t, pgtest.NewDatabase(t))
	const n = 64
	groups, members := s.GroupCommitStats()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			_, err := s.Messages().Admit(t.Context(), store.AdmitRequest{Envelope: storetest.Envelope(fmt.Sprintf("c%d", i)), RecipientID: "bob", Capacity: n})
			require.NoError(t, err)
		})
	}
	close(start)
	wg.Wait()
	g, m := s.GroupCommitStats()
	require.Equal(t, members+n, m, "every admission was committed in a group")
	require.Less(t, g-groups, int64(n), "some admissions shared a commit")
	d, err := s.Messages().Depth(t.Context(), "bob")
	require.NoError(t, err)
	require.Equal(t, n, d)
}

// TestGroupsAcrossRecipientsDoNotDeadlock runs batches that admit to the same
// capacity-limited recipients in opposite orders, from two stores (two processes) at once:
// each group takes its recipient locks first, in one order, so none waits for PostgreSQL's
// deadlock detection and every member is admitted.
func TestGroupsAcrossRecipientsDoNotDeadlock(t *testing.T) {
	url := pgtest.NewDatabase(t)
	stores := []*postgres.Store{open(t, url), open(t, url)}
	recipients := []string{"r0", "r1", "r2", "r3"}
	const writers, rounds = 8, 10
	started := time.Now()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				var reqs []store.AdmitRequest
				for i := range recipients {
					to := recipients[i]
					if w%2 == 1 {
						to = recipients[len(recipients)-1-i]
					}
					reqs = append(reqs, store.AdmitRequest{Envelope: storetest.Envelope(fmt.Sprintf("w%d-r%d-%s", w, r, to)), RecipientID: to, Capacity: 1000, Track: true})
				}
				for i, res := range stores[w%2].Messages().AdmitBatch(t.Context(), reqs) {
					require.NoError(t, res.Err, "member %s", reqs[i].Envelope.GetMessageId())
				}
			}
		})
	}
	wg.Wait()
	for _, to := range recipients {
		d, err := stores[0].Messages().Depth(t.Context(), to)
		require.NoError(t, err)
		require.Equal(t, writers*rounds, d)
	}
	// PostgreSQL waits deadlock_timeout (1 s) before it looks for a deadlock; 80 small
	// batches finish well within that when none occurs.
	require.Less(t, time.Since(started), 10*time.Second)
}

// TestKnownMessageIDsDoNotSplitAGroup checks that a duplicate without an idempotency key —
// a fan-out's resend — is reported from within its group's one transaction rather than
// failing it, so the other members are not run again; a duplicate under a key still fails
// its statement (undoing its idempotency entry's change) and runs alone.
func TestKnownMessageIDsDoNotSplitAGroup(t *testing.T) {
	s := open(t, pgtest.NewDatabase(t))
	mp := s.Messages()
	_, err := mp.Admit(t.Context(), store.AdmitRequest{Envelope: storetest.Envelope("known"), RecipientID: "bob"})
	require.NoError(t, err)
	groups, _ := s.GroupCommitStats()
	res := mp.AdmitBatch(t.Context(), []store.AdmitRequest{
		{Envelope: storetest.Envelope("a"), RecipientID: "bob"},
		{Envelope: storetest.Envelope("known"), RecipientID: "carol"},
		{Envelope: storetest.Envelope("known"), RecipientID: "bob", Capacity: 5, Track: true},
		{Envelope: storetest.Envelope("b"), RecipientID: "bob"},
	})
	require.NoError(t, res[0].Err)
	require.ErrorIs(t, res[1].Err, store.ErrDuplicateMessage)
	require.ErrorIs(t, res[2].Err, store.ErrDuplicateMessage)
	require.NoError(t, res[3].Err)
	g, _ := s.GroupCommitStats()
	require.Equal(t, groups+1, g, "one transaction for the whole batch")

	keyed := func(id string) store.AdmitRequest {
		return store.AdmitRequest{Envelope: storetest.Envelope(id), RecipientID: "bob", Track: true,
			Dedup: &store.Dedup{ProducerID: "alice", Key: "t:" + id}}
	}
	res = mp.AdmitBatch(t.Context(), []store.AdmitRequest{keyed("c"), keyed("known"), keyed("d")})
	require.NoError(t, res[0].Err)
	require.ErrorIs(t, res[1].Err, store.ErrDuplicateMessage)
	require.NoError(t, res[2].Err)
	_, err = mp.Idempotency(t.Context(), "alice", "t:known", time.Hour)
	require.ErrorIs(t, err, store.ErrNotFound, "the refused duplicate left no idempotency entry")
}
