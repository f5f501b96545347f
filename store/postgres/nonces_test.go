package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/store/postgres/pgtest"
)

// openInternal opens a Store for the tests of unexported parts.
func openInternal(t *testing.T) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, pgtest.NewDatabase(t), nil)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

func nonceRequests(reqs ...[2]string) []*nonceRequest {
	out := make([]*nonceRequest, len(reqs))
	for i, r := range reqs {
		out[i] = &nonceRequest{agentID: r[0], nonce: r[1], until: time.Now().Add(time.Hour), reply: make(chan nonceReply, 1)}
	}
	return out
}

func replies(batch []*nonceRequest) []nonceReply {
	out := make([]nonceReply, len(batch))
	for i, r := range batch {
		out[i] = <-r.reply
	}
	return out
}

// TestNonceBatchDuplicatesAndBadData: within one batch the first use of a nonce decides it and
// the repeats are replays, and a call the database refuses (text with a NUL byte) fails alone
// while the batch's other calls are decided.
func TestNonceBatchDuplicatesAndBadData(t *testing.T) {
	s := openInternal(t)
	batch := nonceRequests(
		[2]string{"bob", "nonce-b"}, [2]string{"alice", "nonce-a"}, [2]string{"bob", "nonce-b"},
		[2]string{"bad\x00agent", "nonce-x"}, [2]string{"alice", "nonce-a"},
	)
	s.nonces.flush(batch)
	got := replies(batch)
	for i, want := range []bool{true, true, false, false, false} {
		require.Equal(t, want, got[i].fresh, "call %d", i)
		if i != 3 {
			require.NoError(t, got[i].err, "call %d", i)
		}
	}
	require.Error(t, got[3].err, "the refused call fails")

	// The same nonces in a later batch are replays.
	batch = nonceRequests([2]string{"alice", "nonce-a"}, [2]string{"bob", "nonce-b"}, [2]string{"bob", "nonce-c"})
	s.nonces.flush(batch)
	got = replies(batch)
	for i, want := range []bool{false, false, true} {
		require.NoError(t, got[i].err)
		require.Equal(t, want, got[i].fresh, "call %d", i)
	}
}

// TestNoncePrune: prune deletes the nonces that expired and keeps the others.
func TestNoncePrune(t *testing.T) {
	s := openInternal(t)
	ctx := t.Context()
	now := time.Now()
	for i, until := range []time.Time{now.Add(-time.Hour), now.Add(-time.Second), now.Add(time.Hour)} {
		fresh, err := s.Keys().UseNonce(ctx, "alice", "nonce-"+string(rune('a'+i)), until)
		require.NoError(t, err)
		require.True(t, fresh)
	}
	n, err := s.nonces.prune(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	var left []string
	rows, err := s.pool.Query(ctx, `SELECT nonce FROM signed_call_nonces ORDER BY nonce`)
	require.NoError(t, err)
	for rows.Next() {
		var v string
		require.NoError(t, rows.Scan(&v))
		left = append(left, v)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"nonce-c"}, left)
	n, err = s.nonces.prune(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
}
