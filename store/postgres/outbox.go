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

// outbox implements store.Outbox on the handoffs table (migration 00009).
type outbox Store

func (o *outbox) s() *Store { return (*Store)(o) }

// Outbox returns the undelivered handoffs to Temporal.
func (s *Store) Outbox() store.Outbox { return (*outbox)(s) }

// insertHandoffSQL writes one handoff leased for $5 seconds; an ID written before (a retried
// write) keeps its first row.
const insertHandoffSQL = `
INSERT INTO handoffs (id, kind, workflow_id, payload, lease_until)
VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
ON CONFLICT (id) DO NOTHING`

// queueHandoffs adds the inserts of hs to a batch.
func queueHandoffs(b *pgx.Batch, hs []store.Handoff, lease time.Duration) {
	for _, h := range hs {
		b.Queue(insertHandoffSQL, h.ID, h.Kind, h.WorkflowID, payloadBytes(h.Payload), lease.Seconds())
	}
}

// handoffColumnsOf splits hs into the parallel arrays a statement unnests (see admitSQL).
func handoffColumnsOf(hs []store.Handoff) (ids, kinds, workflowIDs []string, payloads [][]byte) {
	for _, h := range hs {
		ids = append(ids, h.ID)
		kinds = append(kinds, h.Kind)
		workflowIDs = append(workflowIDs, h.WorkflowID)
		payloads = append(payloads, payloadBytes(h.Payload))
	}
	return ids, kinds, workflowIDs, payloads
}

// payloadBytes keeps a nil payload out of the NOT NULL column.
func payloadBytes(p []byte) []byte {
	if p == nil {
		return []byte{}
	}
	return p
}

// AddHandoffs implements store.Outbox.
func (o *outbox) AddHandoffs(ctx context.Context, hs []store.Handoff, lease time.Duration) error {
	if len(hs) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	queueHandoffs(b, hs, lease)
	if err := o.s().pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("postgres: add handoffs: %w", err)
	}
	return nil
}

const handoffColumns = `id, kind, workflow_id, payload, created_at, attempts, last_error`

func scanHandoff(row pgx.CollectableRow) (store.Handoff, error) {
	var h store.Handoff
	err := row.Scan(&h.ID, &h.Kind, &h.WorkflowID, &h.Payload, &h.CreatedAt, &h.Attempts, &h.LastError)
	return h, err
}

// claimHandoffsSQL leases the oldest due handoffs. SKIP LOCKED lets relays in several
// processes claim at once without waiting for each other or taking the same row.
const claimHandoffsSQL = `
UPDATE handoffs SET lease_until = now() + make_interval(secs => $1)
WHERE id IN (
	SELECT id FROM handoffs WHERE lease_until <= now()
	ORDER BY seq LIMIT $2
	FOR UPDATE SKIP LOCKED
)
RETURNING seq, ` + handoffColumns

// ClaimHandoffs implements store.Outbox.
func (o *outbox) ClaimHandoffs(ctx context.Context, lease time.Duration, limit int) ([]store.Handoff, error) {
	rows, err := o.s().pool.Query(ctx, claimHandoffsSQL, lease.Seconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim handoffs: %w", err)
	}
	type claimed struct {
		seq int64
		h   store.Handoff
	}
	cs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimed, error) {
		var c claimed
		err := row.Scan(&c.seq, &c.h.ID, &c.h.Kind, &c.h.WorkflowID, &c.h.Payload, &c.h.CreatedAt, &c.h.Attempts, &c.h.LastError)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: claim handoffs: %w", err)
	}
	// RETURNING follows no ORDER BY: put them back in the order they were written.
	slices.SortFunc(cs, func(a, b claimed) int { return cmp.Compare(a.seq, b.seq) })
	hs := make([]store.Handoff, len(cs))
	for i, c := range cs {
		hs[i] = c.h
	}
	return hs, nil
}

// CompleteHandoffs implements store.Outbox.
func (o *outbox) CompleteHandoffs(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := o.s().pool.Exec(ctx, `DELETE FROM handoffs WHERE id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("postgres: complete handoffs: %w", err)
	}
	return nil
}

// RetryHandoff implements store.Outbox.
func (o *outbox) RetryHandoff(ctx context.Context, id string, delay time.Duration, lastErr string) error {
	_, err := o.s().pool.Exec(ctx, `
		UPDATE handoffs SET attempts = attempts + 1, last_error = $2, lease_until = now() + make_interval(secs => $3)
		WHERE id = $1`, id, lastErr, delay.Seconds())
	if err != nil {
		return fmt.Errorf("postgres: retry handoff %s: %w", id, err)
	}
	return nil
}

// PendingHandoffs implements store.Outbox.
func (o *outbox) PendingHandoffs(ctx context.Context, limit int) ([]store.Handoff, error) {
	rows, err := o.s().pool.Query(ctx, `SELECT `+handoffColumns+` FROM handoffs ORDER BY seq LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: pending handoffs: %w", err)
	}
	hs, err := pgx.CollectRows(rows, scanHandoff)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return hs, err
}
