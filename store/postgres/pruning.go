package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// retention implements store.Retention. Every statement picks its batch with FOR UPDATE SKIP
// LOCKED, so sweeps of several frontends running at once take different rows (or none) rather
// than waiting for each other, and a row a writer holds is left for the next sweep.
type retention Store

func (r *retention) s() *Store { return (*Store)(r) }

// Retention implements store.Store.
func (s *Store) Retention() store.Retention { return (*retention)(s) }

// pruneCount runs one counting delete statement with cutoff and limit as $1 and $2.
func (r *retention) pruneCount(ctx context.Context, what, query string, cutoff time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("postgres: prune %s: limit %d is not positive", what, limit)
	}
	var n int
	if err := r.s().pool.QueryRow(ctx, query, cutoff, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: prune %s: %w", what, unavailable(err))
	}
	return n, nil
}

// PruneAudit implements store.Retention, oldest first along audit_events_time_idx.
func (r *retention) PruneAudit(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	return r.pruneCount(ctx, "audit events", `
		WITH del AS (
			DELETE FROM audit_events WHERE id IN (
				SELECT id FROM audit_events WHERE time < $1 ORDER BY time LIMIT $2 FOR UPDATE SKIP LOCKED)
			RETURNING 1)
		SELECT count(*) FROM del`, cutoff, limit)
}

// PruneDeadLetters implements store.Retention, oldest first along dead_letters_failed_idx.
func (r *retention) PruneDeadLetters(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	return r.pruneCount(ctx, "dead letters", `
		WITH del AS (
			DELETE FROM dead_letters WHERE id IN (
				SELECT id FROM dead_letters WHERE failed_at < $1 ORDER BY failed_at LIMIT $2 FOR UPDATE SKIP LOCKED)
			RETURNING 1)
		SELECT count(*) FROM del`, cutoff, limit)
}

// PruneMessages implements store.Retention along messages_finished_idx, whose predicate the
// query repeats so the planner can use it: states 4 to 7 are the terminal ones (FULFILLED,
// REJECTED, FAILED, TIMED_OUT; protocol.MessageStateTerminal).
func (r *retention) PruneMessages(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	return r.pruneCount(ctx, "messages", `
		WITH del AS (
			DELETE FROM messages WHERE message_id IN (
				SELECT m.message_id FROM messages AS m
				WHERE (NOT m.tracked OR m.state IN (4, 5, 6, 7)) AND m.updated_at < $1
				  AND NOT EXISTS (SELECT 1 FROM deliveries AS d WHERE d.message_id = m.message_id AND d.confirmed_at IS NULL)
				  AND NOT EXISTS (SELECT 1 FROM pending_responses AS p WHERE p.request_message_id = m.message_id)
				ORDER BY m.updated_at LIMIT $2 FOR UPDATE SKIP LOCKED)
			RETURNING 1)
		SELECT count(*) FROM del`, cutoff, limit)
}

// PruneHandoffs implements store.Retention along handoff_requests_ended_idx (statuses 1 and 2
// are PENDING and ACCEPTED).
func (r *retention) PruneHandoffs(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	return r.pruneCount(ctx, "handoffs", `
		WITH del AS (
			DELETE FROM handoff_requests WHERE request_id IN (
				SELECT request_id FROM handoff_requests
				WHERE status NOT IN (1, 2) AND updated_at < $1
				ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED)
			RETURNING 1)
		SELECT count(*) FROM del`, cutoff, limit)
}

// PruneFences implements store.Retention. The generation is bumped in the same statement, so
// a frontend that sees the new generation lists the fences without the deleted ones.
func (r *retention) PruneFences(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	return r.pruneCount(ctx, "fences", `
		WITH del AS (
			DELETE FROM handoff_fences AS f USING (
				SELECT correlation, agent_id FROM handoff_fences AS g
				WHERE g.at < $1
				  AND NOT EXISTS (SELECT 1 FROM handoff_requests AS h WHERE h.request_id = g.request_id AND h.status IN (1, 2))
				ORDER BY g.at LIMIT $2 FOR UPDATE SKIP LOCKED) AS d
			WHERE f.correlation = d.correlation AND f.agent_id = d.agent_id
			RETURNING 1),
		gen AS (
			UPDATE handoff_fences_generation SET generation = generation + 1
			WHERE EXISTS (SELECT 1 FROM del))
		SELECT count(*) FROM del`, cutoff, limit)
}

// PruneHITL implements store.Retention along hitl_invocations_decided_idx.
func (r *retention) PruneHITL(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	return r.pruneCount(ctx, "hitl invocations", `
		WITH del AS (
			DELETE FROM hitl_invocations WHERE invocation_id IN (
				SELECT invocation_id FROM hitl_invocations
				WHERE status = 'decided' AND decided_at < $1
				ORDER BY decided_at LIMIT $2 FOR UPDATE SKIP LOCKED)
			RETURNING 1)
		SELECT count(*) FROM del`, cutoff, limit)
}

// PruneToolCalls implements store.Retention along tool_calls_final_idx; the frames go with
// their call (ON DELETE CASCADE).
func (r *retention) PruneToolCalls(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	return r.pruneCount(ctx, "tool calls", `
		WITH del AS (
			DELETE FROM tool_calls WHERE call_id IN (
				SELECT c.call_id FROM tool_calls AS c
				WHERE c.final AND c.created_at < $1
				  AND NOT EXISTS (SELECT 1 FROM tool_frames AS f WHERE f.call_id = c.call_id AND f.at >= $1)
				ORDER BY c.created_at LIMIT $2 FOR UPDATE SKIP LOCKED)
			RETURNING 1)
		SELECT count(*) FROM del`, cutoff, limit)
}
