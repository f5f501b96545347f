package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sw4rm/sw4rm-temporal/store"
)

const pendingColumns = `request_message_id, original_message_id, producer_id, responder_id, correlation_id,
	attempt, max_attempts, timeout_us, deadline`

func scanPending(row pgx.CollectableRow) (store.PendingResponse, error) {
	var (
		p         store.PendingResponse
		timeoutUS int64
	)
	if err := row.Scan(&p.RequestMessageID, &p.OriginalMessageID, &p.ProducerID, &p.ResponderID, &p.CorrelationID,
		&p.Attempt, &p.MaxAttempts, &timeoutUS, &p.Deadline); err != nil {
		return store.PendingResponse{}, err
	}
	p.Timeout = time.Duration(timeoutUS) * time.Microsecond
	p.Deadline = utc(p.Deadline)
	return p, nil
}

// AddPendingResponse implements store.MessagePlane. A zero Deadline means now + Timeout by
// the database clock; an empty OriginalMessageID means RequestMessageID (the first attempt).
// The entry and its handoffs commit together, or neither does.
func (m *messagePlane) AddPendingResponse(ctx context.Context, p store.PendingResponse, entries ...store.OutboxEntry) error {
	if p.RequestMessageID == "" {
		return errors.New("postgres: add pending response: request message_id is required")
	}
	b := &pgx.Batch{}
	b.Queue(`
		INSERT INTO pending_responses (`+pendingColumns+`)
		VALUES ($1, COALESCE(NULLIF($2, ''), $1), $3, $4, $5, $6, $7, $8,
		        COALESCE($9, now() + $8::bigint * interval '1 microsecond'))
		ON CONFLICT (request_message_id) DO UPDATE SET
			original_message_id = EXCLUDED.original_message_id, producer_id = EXCLUDED.producer_id,
			responder_id = EXCLUDED.responder_id, correlation_id = EXCLUDED.correlation_id,
			attempt = EXCLUDED.attempt, max_attempts = EXCLUDED.max_attempts,
			timeout_us = EXCLUDED.timeout_us, deadline = EXCLUDED.deadline, created_at = now()`,
		p.RequestMessageID, p.OriginalMessageID, p.ProducerID, p.ResponderID, p.CorrelationID,
		p.Attempt, p.MaxAttempts, p.Timeout.Microseconds(), nullTime(p.Deadline))
	queueOutbox(b, entries, store.OutboxLease)
	send := func(q interface {
		SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
	}) error {
		return q.SendBatch(ctx, b).Close()
	}
	var err error
	if len(entries) == 0 {
		err = send(m.s().pool) // one statement: no transaction needed
	} else {
		err = pgx.BeginFunc(ctx, m.s().pool, func(tx pgx.Tx) error { return send(tx) })
	}
	if err != nil {
		return fmt.Errorf("postgres: add pending response %q: %w", p.RequestMessageID, err)
	}
	return nil
}

// ResolvePendingResponse implements store.MessagePlane. Deleting the row is the atomic
// claim: a concurrent resolve or sweep finds nothing. The handoffs are written in the
// transaction of the delete, and only when it found the row.
func (m *messagePlane) ResolvePendingResponse(ctx context.Context, requestMessageID, responseMessageID string, entries ...store.OutboxEntry) (store.PendingResponse, bool, error) {
	var (
		p     store.PendingResponse
		found bool
	)
	err := pgx.BeginFunc(ctx, m.s().pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			DELETE FROM pending_responses WHERE request_message_id = $1 RETURNING `+pendingColumns, requestMessageID)
		if err != nil {
			return err
		}
		p, err = pgx.CollectExactlyOneRow(rows, scanPending)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		return writeOutbox(ctx, tx, entries)
	})
	if err != nil {
		return store.PendingResponse{}, false, fmt.Errorf("postgres: resolve pending response %q: %w", requestMessageID, err)
	}
	if !found {
		return store.PendingResponse{}, false, nil
	}
	p.Status = "fulfilled"
	p.ResponseMessageID = responseMessageID
	return p, true, nil
}

// ExpirePendingResponses implements store.MessagePlane, most overdue first. SKIP LOCKED
// hands each overdue request to exactly one of several concurrent sweeps.
func (m *messagePlane) ExpirePendingResponses(ctx context.Context, limit int) ([]store.PendingResponse, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := m.s().pool.Query(ctx, `
		DELETE FROM pending_responses WHERE request_message_id IN (
			SELECT request_message_id FROM pending_responses
			WHERE deadline <= now()
			ORDER BY deadline, request_message_id COLLATE "C"
			LIMIT $1
			FOR UPDATE SKIP LOCKED
		)
		RETURNING `+pendingColumns, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: expire pending responses: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanPending)
	if err != nil {
		return nil, fmt.Errorf("postgres: expire pending responses: %w", err)
	}
	for i := range out {
		out[i].Status = "expired"
	}
	sortPending(out)
	return out, nil
}

// PendingResponses implements store.MessagePlane, ordered by deadline.
func (m *messagePlane) PendingResponses(ctx context.Context, producerID string) ([]store.PendingResponse, error) {
	rows, err := m.s().pool.Query(ctx, `
		SELECT `+pendingColumns+` FROM pending_responses
		WHERE $1 = '' OR producer_id = $1
		ORDER BY deadline, request_message_id COLLATE "C"`, producerID)
	if err != nil {
		return nil, fmt.Errorf("postgres: pending responses of %q: %w", producerID, err)
	}
	out, err := pgx.CollectRows(rows, scanPending)
	if err != nil {
		return nil, fmt.Errorf("postgres: pending responses of %q: %w", producerID, err)
	}
	for i := range out {
		out[i].Status = "pending"
	}
	return out, nil
}

func sortPending(ps []store.PendingResponse) {
	slices.SortFunc(ps, func(a, b store.PendingResponse) int {
		return cmp.Or(a.Deadline.Compare(b.Deadline), cmp.Compare(a.RequestMessageID, b.RequestMessageID))
	})
}
