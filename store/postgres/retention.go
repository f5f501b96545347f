package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// ResumeAfter implements store.MessagePlane. A negative offset is ErrInvalidPosition too. The
// last seq ever assigned is the identity sequence's (the rows themselves may be gone).
func (m *messagePlane) ResumeAfter(ctx context.Context, agentID string, offset int64) error {
	var last, horizon, confirmed int64
	if err := m.s().pool.QueryRow(ctx, `
		WITH
		lim AS (SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS last FROM deliveries_seq_seq),
		hz AS (SELECT COALESCE(max(horizon), 0) AS horizon FROM resume_horizons WHERE agent_id = $1),
		upd AS (
			UPDATE deliveries SET confirmed_at = now(), leased_until = NULL
			WHERE agent_id = $1 AND confirmed_at IS NULL AND seq <= $2
			  AND $2 >= 0 AND $2 <= (SELECT last FROM lim) AND $2 >= (SELECT horizon FROM hz)
			RETURNING 1
		)
		SELECT (SELECT last FROM lim), (SELECT horizon FROM hz), (SELECT count(*) FROM upd)`,
		agentID, offset).Scan(&last, &horizon, &confirmed); err != nil {
		return fmt.Errorf("postgres: resume %s after %d: %w", agentID, offset, err)
	}
	if offset < 0 || offset > last {
		return fmt.Errorf("postgres: resume %s after %d (last seq %d): %w", agentID, offset, last, store.ErrInvalidPosition)
	}
	if offset < horizon {
		return &store.PositionExpiredError{Offset: offset, Horizon: horizon}
	}
	return nil
}

// Prune implements store.MessagePlane in one statement. Horizons are upserted in agent order
// so that concurrent prunes lock them in the same order.
func (m *messagePlane) Prune(ctx context.Context, cutoff, idempotencyCutoff time.Time) (int, error) {
	var n int
	if err := m.s().pool.QueryRow(ctx, `
		WITH
		del AS (DELETE FROM deliveries WHERE confirmed_at < $1 RETURNING agent_id, seq),
		hz AS (
			INSERT INTO resume_horizons AS h (agent_id, horizon)
			SELECT agent_id, max(seq) FROM del GROUP BY agent_id ORDER BY agent_id
			ON CONFLICT (agent_id) DO UPDATE SET horizon = GREATEST(h.horizon, EXCLUDED.horizon)
		),
		ie AS (DELETE FROM idempotency_entries WHERE updated_at < $2)
		SELECT count(*) FROM del`,
		nullTime(cutoff), nullTime(idempotencyCutoff)).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: prune: %w", err)
	}
	return n, nil
}

// BufferStats implements store.MessagePlane, ordered by agent_id.
func (m *messagePlane) BufferStats(ctx context.Context) ([]store.BufferStat, error) {
	rows, err := m.s().pool.Query(ctx, `
		SELECT agent_id, count(*), min(enqueued_at) FROM deliveries
		WHERE confirmed_at IS NULL
		GROUP BY agent_id
		ORDER BY agent_id COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("postgres: buffer stats: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.BufferStat, error) {
		var b store.BufferStat
		err := row.Scan(&b.AgentID, &b.Depth, &b.OldestEnqueuedAt)
		b.OldestEnqueuedAt = utc(b.OldestEnqueuedAt)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: buffer stats: %w", err)
	}
	return out, nil
}
