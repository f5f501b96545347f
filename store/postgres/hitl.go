package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// defaultHITLLimit is the ListInvocations limit used when HITLFilter.Limit is zero (see
// store.HITLFilter).
const defaultHITLLimit = 1000

type hitl Store

func (h *hitl) s() *Store { return (*Store)(h) }

// PutInvocation implements store.HITL. The record is stored as pending whatever its Status,
// Outcome and DecidedAt say; a zero CreatedAt means the database clock's now. Invocation must
// be empty or valid JSON (the json column keeps it byte for byte).
func (h *hitl) PutInvocation(ctx context.Context, rec store.HITLRecord) error {
	if rec.InvocationID == "" {
		return errors.New("postgres: put invocation: invocation_id is required")
	}
	if err := validJSON(rec.Invocation); err != nil {
		return fmt.Errorf("postgres: put invocation %q: invocation %w", rec.InvocationID, err)
	}
	// The update only happens while the stored row is pending; a conflict with a decided row
	// changes nothing and reports no affected row.
	tag, err := h.s().pool.Exec(ctx, `
		INSERT INTO hitl_invocations (invocation_id, workflow_id, reason_type, correlation_id, subject,
			priority, deadline, status, invocation, outcome, created_at, decided_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL, COALESCE($10, now()), NULL)
		ON CONFLICT (invocation_id) DO UPDATE SET
			workflow_id = EXCLUDED.workflow_id, reason_type = EXCLUDED.reason_type,
			correlation_id = EXCLUDED.correlation_id, subject = EXCLUDED.subject,
			priority = EXCLUDED.priority, deadline = EXCLUDED.deadline, invocation = EXCLUDED.invocation,
			created_at = EXCLUDED.created_at
		WHERE hitl_invocations.status = $8`,
		rec.InvocationID, rec.WorkflowID, rec.ReasonType, rec.CorrelationID, rec.Subject,
		rec.Priority, nullTime(rec.Deadline), store.HITLPending, jsonText(rec.Invocation), nullTime(rec.CreatedAt))
	if err != nil {
		return fmt.Errorf("postgres: put invocation %q: %w", rec.InvocationID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: put invocation %q: %w", rec.InvocationID, store.ErrAlreadyDecided)
	}
	return nil
}

// CompleteInvocation implements store.HITL. The outcome must be valid JSON; a zero decidedAt
// means the database clock's now. The row is locked for the check and the write, so of
// concurrent completions with different outcomes exactly one wins.
func (h *hitl) CompleteInvocation(ctx context.Context, invocationID string, outcome []byte, decidedAt time.Time) error {
	if len(outcome) == 0 {
		return fmt.Errorf("postgres: complete invocation %q: an outcome is required", invocationID)
	}
	if err := validJSON(outcome); err != nil {
		return fmt.Errorf("postgres: complete invocation %q: outcome %w", invocationID, err)
	}
	tx, err := h.s().pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: complete invocation %q: begin: %w", invocationID, err)
	}
	defer rollback(tx)
	var (
		status string
		stored *string
	)
	err = tx.QueryRow(ctx, `
		SELECT status, outcome::text FROM hitl_invocations WHERE invocation_id = $1 FOR UPDATE`,
		invocationID).Scan(&status, &stored)
	if err != nil {
		return fmt.Errorf("postgres: complete invocation %q: %w", invocationID, notFound(err))
	}
	if status == store.HITLDecided {
		if stored != nil && *stored == string(outcome) {
			return nil // an idempotent retry
		}
		return fmt.Errorf("postgres: complete invocation %q: %w", invocationID, store.ErrAlreadyDecided)
	}
	if _, err := tx.Exec(ctx, `
		UPDATE hitl_invocations SET status = $2, outcome = $3, decided_at = COALESCE($4, now())
		WHERE invocation_id = $1`,
		invocationID, store.HITLDecided, jsonText(outcome), nullTime(decidedAt)); err != nil {
		return fmt.Errorf("postgres: complete invocation %q: %w", invocationID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: complete invocation %q: commit: %w", invocationID, err)
	}
	return nil
}

// hitlColumns reads the json columns as text, so their bytes come back exactly as stored.
const hitlColumns = `invocation_id, workflow_id, reason_type, correlation_id, subject, priority,
	deadline, status, invocation::text AS invocation, outcome::text AS outcome, created_at, decided_at`

// GetInvocation implements store.HITL.
func (h *hitl) GetInvocation(ctx context.Context, invocationID string) (store.HITLRecord, error) {
	rows, err := h.s().pool.Query(ctx, `SELECT `+hitlColumns+` FROM hitl_invocations WHERE invocation_id = $1`, invocationID)
	if err != nil {
		return store.HITLRecord{}, fmt.Errorf("postgres: get invocation %q: %w", invocationID, err)
	}
	rec, err := pgx.CollectExactlyOneRow(rows, scanHITL)
	if err != nil {
		return store.HITLRecord{}, fmt.Errorf("postgres: get invocation %q: %w", invocationID, notFound(err))
	}
	return rec, nil
}

// ListInvocations implements store.HITL.
func (h *hitl) ListInvocations(ctx context.Context, f store.HITLFilter) ([]store.HITLRecord, error) {
	var q listQuery
	if f.Status != "" {
		q.add("status = ?", f.Status)
	}
	if f.ReasonType != "" {
		q.add("reason_type = ?", f.ReasonType)
	}
	limit := q.limit(f.Limit, defaultHITLLimit)
	// The inner query picks the newest matches, the outer one restores oldest-first order.
	// COLLATE "C" breaks ties in byte order, as Go's string comparison (and store/memory) does.
	rows, err := h.s().pool.Query(ctx, `
		SELECT * FROM (
			SELECT `+hitlColumns+` FROM hitl_invocations `+q.where()+`
			ORDER BY created_at DESC, invocation_id COLLATE "C" DESC
			LIMIT `+limit+`
		) AS newest ORDER BY created_at, invocation_id COLLATE "C"`, q.args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list invocations: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanHITL)
	if err != nil {
		return nil, fmt.Errorf("postgres: list invocations: %w", err)
	}
	return out, nil
}

func scanHITL(row pgx.CollectableRow) (store.HITLRecord, error) {
	var (
		rec                 store.HITLRecord
		deadline, decidedAt *time.Time
		invocation, outcome *string
	)
	if err := row.Scan(&rec.InvocationID, &rec.WorkflowID, &rec.ReasonType, &rec.CorrelationID, &rec.Subject,
		&rec.Priority, &deadline, &rec.Status, &invocation, &outcome, &rec.CreatedAt, &decidedAt); err != nil {
		return store.HITLRecord{}, err
	}
	if deadline != nil {
		rec.Deadline = deadline.UTC()
	}
	if decidedAt != nil {
		rec.DecidedAt = decidedAt.UTC()
	}
	rec.CreatedAt = utc(rec.CreatedAt)
	if invocation != nil && *invocation != "" {
		rec.Invocation = []byte(*invocation)
	}
	if outcome != nil && *outcome != "" {
		rec.Outcome = []byte(*outcome)
	}
	return rec, nil
}

// validJSON accepts empty input or valid UTF-8 JSON: what the json column accepts, checked
// before the database sees it so that both stores refuse the same input the same way.
func validJSON(b []byte) error {
	if len(b) > 0 && (!utf8.Valid(b) || !json.Valid(b)) {
		return errors.New("is not valid JSON")
	}
	return nil
}
