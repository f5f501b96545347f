package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/postgres/pgtest"
)

// TestPreviousVersionKeepsUsingTheOutbox: during a rolling upgrade across migration 00018,
// processes of the previous version still write, claim and delete outbox entries through the
// table's old name, handoffs, with the statements they were built with; what they write is in
// the outbox this version relays, and what this version writes they can claim.
func TestPreviousVersionKeepsUsingTheOutbox(t *testing.T) {
	url := pgtest.NewDatabase(t)
	s := open(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer old.Close(ctx)

	// The previous version's insert, claim and delete, word for word but for the values.
	const insertOld = `
INSERT INTO handoffs (id, kind, workflow_id, payload, lease_until)
VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
ON CONFLICT (id) DO NOTHING`
	const claimOld = `
UPDATE handoffs SET lease_until = now() + make_interval(secs => $1)
WHERE id IN (
	SELECT id FROM handoffs WHERE lease_until <= now()
	ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED)
RETURNING id`
	for range 2 { // a retried write keeps its first row
		_, err = old.Exec(ctx, insertOld, "from-old", "agent.control_ack", "agent/a", []byte(`{}`), 0.0)
		require.NoError(t, err)
	}
	require.NoError(t, s.Outbox().Add(ctx, []store.OutboxEntry{{ID: "from-new", Kind: "agent.control_ack", WorkflowID: "agent/b", Payload: []byte(`{}`)}}, 0))

	pending, err := s.Outbox().Pending(ctx, 10)
	require.NoError(t, err)
	require.Len(t, pending, 2, "the entry the previous version wrote is in the outbox this one relays")
	require.Equal(t, "from-old", pending[0].ID)

	rows, err := old.Query(ctx, claimOld, 30.0, 10)
	require.NoError(t, err)
	claimed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"from-old", "from-new"}, claimed, "the previous version claims what either wrote")

	_, err = old.Exec(ctx, `DELETE FROM handoffs WHERE id = ANY($1)`, claimed)
	require.NoError(t, err)
	pending, err = s.Outbox().Pending(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, pending)
}
