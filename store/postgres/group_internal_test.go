package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// sleeper is a group member whose statement takes d.
func sleeper(d time.Duration) *groupMember {
	return &groupMember{
		queue: func(b *pgx.Batch) { b.Queue(`SELECT pg_sleep($1)`, d.Seconds()) },
		read: func(br pgx.BatchResults) error {
			_, err := br.Exec()
			return err
		},
	}
}

// TestGroupMemberHonoursItsDeadline: a caller whose context ends while its group is still in
// flight is answered at once, as a lone statement would be, and the group goes on for the
// other members.
func TestGroupMemberHonoursItsDeadline(t *testing.T) {
	s := openInternal(t)
	slow := sleeper(time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	began := time.Now()
	err := s.groups.do(ctx, slow)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(began), 700*time.Millisecond, "answered at the deadline, not when the group ended")
	require.NoError(t, <-slow.done, "the group itself committed")
}

// TestGroupFailureOutsideAMemberFailsTheBatch: commitSplitting does not split a group around a
// member whose error is not the member's own, and so changes nothing at all.
func TestGroupFailureOutsideAMemberFailsTheBatch(t *testing.T) {
	s := openInternal(t)
	var n int
	insert := func(id string) *groupMember {
		return &groupMember{
			queue: func(b *pgx.Batch) {
				b.Queue(`INSERT INTO artifacts (negotiation_id, kind, version, content_type) VALUES ($1, 'k', 'v', 'text/plain')`, id)
			},
			read: func(br pgx.BatchResults) error { _, err := br.Exec(); return err },
			done: make(chan error, 1),
		}
	}
	bad := &groupMember{
		queue: func(b *pgx.Batch) { b.Queue(`SELECT 1/0`) },
		read:  func(br pgx.BatchResults) error { _, err := br.Exec(); return err },
		done:  make(chan error, 1),
	}
	members := []*groupMember{insert("n1"), bad, insert("n2")}
	s.groups.commitSplitting(t.Context(), members, func(error) bool { return false })
	for _, m := range members {
		require.Error(t, <-m.done, "every member fails with the group")
	}
	require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT count(*) FROM artifacts`).Scan(&n))
	require.Zero(t, n, "nothing of the group was kept")

	// With splitting (a flusher's group of independent writers) only the bad member fails.
	members = []*groupMember{insert("n1"), bad, insert("n2")}
	bad.done = make(chan error, 1)
	s.groups.commitSplitting(t.Context(), members, func(error) bool { return true })
	require.NoError(t, <-members[0].done)
	require.Error(t, <-bad.done, "the bad member fails alone")
	require.NoError(t, <-members[2].done)
	require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT count(*) FROM artifacts`).Scan(&n))
	require.Equal(t, 2, n)
}

// TestHandOverToADetachedStreamReleasesTheRow: an admission prepared while its recipient's
// stream was attached, which commits after the stream detached, leaves its row leased to no
// one; handOver finds the inbox closed and makes the row claimable at once, instead of after
// the lease.
func TestHandOverToADetachedStreamReleasesTheRow(t *testing.T) {
	s := openInternal(t)
	mp := s.Messages().(*messagePlane)
	in, detach := mp.Attach("bob", time.Hour)
	member, outcome, err := mp.admission(store.AdmitRequest{Envelope: &commonpb.Envelope{MessageId: "m1", ProducerId: "alice"}, RecipientID: "bob"})
	require.NoError(t, err)
	detach() // the stream ends while the admission is on its way
	seq, err := outcome(s.groups.do(t.Context(), member))
	require.NoError(t, err)
	require.Empty(t, in.Take())
	ds, err := mp.Claim(t.Context(), store.ClaimRequest{AgentID: "bob", Limit: 10, Lease: time.Hour})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, seq, ds[0].Seq)
	require.Equal(t, 1, ds[0].Attempts, "the hand-over that reached no stream is not counted")
}
