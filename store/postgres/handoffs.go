package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// handoffsStore implements store.Handoffs on handoff_requests, handoff_fences and
// handoff_fences_generation (migration 00011).
type handoffsStore Store

func (h *handoffsStore) s() *Store { return (*Store)(h) }

// Handoffs implements store.Store.
func (s *Store) Handoffs() store.Handoffs { return (*handoffsStore)(s) }

const handoffRecordColumns = `request_id, correlation, from_agent, target, accepted_by, status, request,
	context_content_type, end_reason, created_at, updated_at`

func scanHandoffRecord(row pgx.CollectableRow) (store.HandoffRecord, error) {
	var (
		rec    store.HandoffRecord
		status int32
	)
	err := row.Scan(&rec.RequestID, &rec.Correlation, &rec.From, &rec.Target, &rec.AcceptedBy, &status, &rec.Request,
		&rec.ContextContentType, &rec.EndReason, &rec.CreatedAt, &rec.UpdatedAt)
	rec.Status = handoffpb.HandoffStatus(status)
	rec.CreatedAt, rec.UpdatedAt = utc(rec.CreatedAt), utc(rec.UpdatedAt)
	return rec, err
}

// CreateHandoff implements store.Handoffs. The insert and the outbox rows share one
// transaction; ON CONFLICT DO NOTHING waits for a concurrent insert of the same request_id to
// commit and then inserts nothing, so of concurrent creations exactly one writes the record
// and its handoffs, and the others read the winner's record.
func (h *handoffsStore) CreateHandoff(ctx context.Context, rec store.HandoffRecord, entries ...store.OutboxEntry) (store.HandoffRecord, error) {
	if rec.RequestID == "" {
		return store.HandoffRecord{}, errors.New("postgres: create handoff: request_id is required")
	}
	if rec.Status == handoffpb.HandoffStatus_HANDOFF_STATUS_UNSPECIFIED {
		rec.Status = handoffpb.HandoffStatus_PENDING
	}
	var inserted bool
	err := pgx.BeginFunc(ctx, h.s().pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
			INSERT INTO handoff_requests (request_id, correlation, from_agent, target, accepted_by, status, request,
				context_content_type, end_reason)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (request_id) DO NOTHING
			RETURNING created_at, updated_at`,
			rec.RequestID, rec.Correlation, rec.From, rec.Target, rec.AcceptedBy, int32(rec.Status),
			nullBytes(rec.Request), rec.ContextContentType, rec.EndReason).Scan(&rec.CreatedAt, &rec.UpdatedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // a duplicate: write nothing
		}
		if err != nil {
			return err
		}
		inserted = true
		return writeOutbox(ctx, tx, entries)
	})
	if err != nil {
		return store.HandoffRecord{}, fmt.Errorf("postgres: create handoff %q: %w", rec.RequestID, unavailable(err))
	}
	if !inserted {
		existing, err := h.GetHandoff(ctx, rec.RequestID)
		if err != nil {
			return store.HandoffRecord{}, err
		}
		return existing, fmt.Errorf("postgres: create handoff %q: %w", rec.RequestID, store.ErrDuplicateHandoff)
	}
	rec.CreatedAt, rec.UpdatedAt = utc(rec.CreatedAt), utc(rec.UpdatedAt)
	if len(rec.Request) == 0 {
		rec.Request = nil // as it reads back: NULL
	}
	return rec, nil
}

// GetHandoff implements store.Handoffs.
func (h *handoffsStore) GetHandoff(ctx context.Context, requestID string) (store.HandoffRecord, error) {
	rows, err := h.s().pool.Query(ctx, `SELECT `+handoffRecordColumns+` FROM handoff_requests WHERE request_id = $1`, requestID)
	if err != nil {
		return store.HandoffRecord{}, fmt.Errorf("postgres: get handoff %q: %w", requestID, unavailable(err))
	}
	rec, err := pgx.CollectExactlyOneRow(rows, scanHandoffRecord)
	if err != nil {
		return store.HandoffRecord{}, fmt.Errorf("postgres: get handoff %q: %w", requestID, unavailable(notFound(err)))
	}
	return rec, nil
}

// UpdateHandoff implements store.Handoffs.
func (h *handoffsStore) UpdateHandoff(ctx context.Context, requestID string, status handoffpb.HandoffStatus, target, acceptedBy, endReason string) error {
	tag, err := h.s().pool.Exec(ctx, `
		UPDATE handoff_requests SET
			status = CASE WHEN $2 = 0 THEN status ELSE $2 END,
			target = COALESCE(NULLIF($3, ''), target),
			accepted_by = COALESCE(NULLIF($4, ''), accepted_by),
			end_reason = COALESCE(NULLIF($5, ''), end_reason),
			updated_at = now()
		WHERE request_id = $1`,
		requestID, int32(status), target, acceptedBy, endReason)
	if err != nil {
		return fmt.Errorf("postgres: update handoff %q: %w", requestID, unavailable(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: update handoff %q: %w", requestID, store.ErrNotFound)
	}
	return nil
}

// listHandoffs runs a query over handoff_requests whose condition is where, oldest first.
func (h *handoffsStore) listHandoffs(ctx context.Context, what, where string, args ...any) ([]store.HandoffRecord, error) {
	rows, err := h.s().pool.Query(ctx, `SELECT `+handoffRecordColumns+` FROM handoff_requests WHERE `+where+`
		ORDER BY created_at, seq`, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", what, unavailable(err))
	}
	out, err := pgx.CollectRows(rows, scanHandoffRecord)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", what, unavailable(err))
	}
	return out, nil
}

// ListOfferedTo implements store.Handoffs.
func (h *handoffsStore) ListOfferedTo(ctx context.Context, agentID string) ([]store.HandoffRecord, error) {
	return h.listHandoffs(ctx, fmt.Sprintf("handoffs offered to %q", agentID), `target = $1 AND status = $2`,
		agentID, int32(handoffpb.HandoffStatus_PENDING))
}

// ListAcceptedBy implements store.Handoffs.
func (h *handoffsStore) ListAcceptedBy(ctx context.Context, agentID string) ([]store.HandoffRecord, error) {
	return h.listHandoffs(ctx, fmt.Sprintf("handoffs accepted by %q", agentID), `status = $2 AND COALESCE(NULLIF(accepted_by, ''), target) = $1`,
		agentID, int32(handoffpb.HandoffStatus_ACCEPTED))
}

// ListByCorrelation implements store.Handoffs.
func (h *handoffsStore) ListByCorrelation(ctx context.Context, correlation string) ([]store.HandoffRecord, error) {
	return h.listHandoffs(ctx, fmt.Sprintf("handoffs of correlation %q", correlation), `correlation = $1`, correlation)
}

// OpenDelegations implements store.Handoffs. A PENDING handoff occupies its target, an
// ACCEPTED one its accepter (its target when no accepter was recorded).
func (h *handoffsStore) OpenDelegations(ctx context.Context) (map[string]int, error) {
	rows, err := h.s().pool.Query(ctx, `
		SELECT agent, count(*) FROM (
			SELECT CASE WHEN status = $1 THEN target ELSE COALESCE(NULLIF(accepted_by, ''), target) END AS agent
			FROM handoff_requests WHERE status IN ($1, $2)
		) open
		WHERE agent <> ''
		GROUP BY agent`,
		int32(handoffpb.HandoffStatus_PENDING), int32(handoffpb.HandoffStatus_ACCEPTED))
	if err != nil {
		return nil, fmt.Errorf("postgres: open delegations: %w", unavailable(err))
	}
	out := map[string]int{}
	var (
		agent string
		n     int
	)
	_, err = pgx.ForEachRow(rows, []any{&agent, &n}, func() error {
		out[agent] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: open delegations: %w", unavailable(err))
	}
	return out, nil
}

// Fence implements store.Handoffs in one statement, the generation bumped with it when the
// fence is new (as keys.go does for agent_keys_generation).
func (h *handoffsStore) Fence(ctx context.Context, f store.Fence) error {
	if f.Correlation == "" || f.AgentID == "" {
		return errors.New("postgres: fence: correlation and agent_id are required")
	}
	if _, err := h.s().pool.Exec(ctx, `
		WITH
		ins AS (
			INSERT INTO handoff_fences (correlation, agent_id, request_id, new_owner, at)
			VALUES ($1, $2, $3, $4, COALESCE($5, now()))
			ON CONFLICT (correlation, agent_id) DO NOTHING
			RETURNING 1
		)
		UPDATE handoff_fences_generation SET generation = generation + 1 WHERE EXISTS (SELECT 1 FROM ins)`,
		f.Correlation, f.AgentID, f.RequestID, f.NewOwner, nullTime(f.At)); err != nil {
		return fmt.Errorf("postgres: fence %q on %q: %w", f.AgentID, f.Correlation, unavailable(err))
	}
	return nil
}

// Fenced implements store.Handoffs.
func (h *handoffsStore) Fenced(ctx context.Context, correlation, agentID string) (store.Fence, bool, error) {
	f := store.Fence{Correlation: correlation, AgentID: agentID}
	var at time.Time
	err := h.s().pool.QueryRow(ctx, `
		SELECT request_id, new_owner, at FROM handoff_fences WHERE correlation = $1 AND agent_id = $2`,
		correlation, agentID).Scan(&f.RequestID, &f.NewOwner, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Fence{}, false, nil
	}
	if err != nil {
		return store.Fence{}, false, fmt.Errorf("postgres: fenced %q on %q: %w", agentID, correlation, unavailable(err))
	}
	f.At = utc(at)
	return f, true, nil
}

// ListFences implements store.Handoffs.
func (h *handoffsStore) ListFences(ctx context.Context) ([]store.Fence, error) {
	rows, err := h.s().pool.Query(ctx, `
		SELECT correlation, agent_id, request_id, new_owner, at FROM handoff_fences ORDER BY correlation, agent_id`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list fences: %w", unavailable(err))
	}
	var out []store.Fence
	var f store.Fence
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&f.Correlation, &f.AgentID, &f.RequestID, &f.NewOwner, &at}, func() error {
		f.At = utc(at)
		out = append(out, f)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list fences: %w", unavailable(err))
	}
	return out, nil
}

// FencesGeneration implements store.Handoffs.
func (h *handoffsStore) FencesGeneration(ctx context.Context) (int64, error) {
	var g int64
	if err := h.s().pool.QueryRow(ctx, `SELECT generation FROM handoff_fences_generation`).Scan(&g); err != nil {
		return 0, fmt.Errorf("postgres: fences generation: %w", unavailable(err))
	}
	return g, nil
}
