package postgres

import (
	"context"
	"fmt"

	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// Backlog implements store.Store. One statement, each count over a partial or leading-column
// index (hitl_invocations_status_idx, dead_letters_open_idx, handoff_requests_open_idx,
// tool_calls_open_caller), so a scrape costs the open rows, not the history.
func (s *Store) Backlog(ctx context.Context) (store.Backlog, error) {
	var b store.Backlog
	err := s.pool.QueryRow(ctx, `
		SELECT
			(SELECT count(*) FROM hitl_invocations WHERE status = $1),
			(SELECT count(*) FROM dead_letters WHERE requeued_at IS NULL),
			(SELECT count(*) FROM handoff_requests WHERE status IN ($2, $3)),
			(SELECT count(*) FROM tool_calls WHERE NOT final)`,
		store.HITLPending, int32(handoffpb.HandoffStatus_PENDING), int32(handoffpb.HandoffStatus_ACCEPTED),
	).Scan(&b.PendingHITL, &b.DeadLetters, &b.OpenHandoffs, &b.OpenToolCalls)
	if err != nil {
		return store.Backlog{}, fmt.Errorf("postgres: backlog: %w", unavailable(err))
	}
	return b, nil
}
