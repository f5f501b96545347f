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

// outbox implements store.Outbox on the entries table (migration 00009).
type outbox Store

func (o *outbox) s() *Store { return (*Store)(o) }

// Outbox returns the undelivered entries to Temporal.
func (s *Store) Outbox() store.Outbox { return (*outbox)(s) }

// insertOutboxSQL writes one entry leased for $5 seconds; an ID written before (a retried
// write) keeps its first row.
const insertOutboxSQL = `
INSERT INTO outbox (id, kind, workflow_id, payload, lease_until)
VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
ON CONFLICT (id) DO NOTHING`

// queueOutbox adds the inserts of hs to a batch.
func queueOutbox(b *pgx.Batch, hs []store.OutboxEntry, lease time.Duration) {
	for _, h := range hs {
		b.Queue(insertOutboxSQL, h.ID, h.Kind, h.WorkflowID, payloadBytes(h.Payload), lease.Seconds())
	}
}

// writeOutbox writes entries in tx, leased for store.OutboxLease (the writer's in-line
// attempt): the one way a write commits the outbox entries that go with it.
func writeOutbox(ctx context.Context, tx pgx.Tx, entries []store.OutboxEntry) error {
	if len(entries) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	queueOutbox(b, entries, store.OutboxLease)
	return tx.SendBatch(ctx, b).Close()
}

// outboxColumnsOf splits hs into the parallel arrays a statement unnests (see admitSQL).
func outboxColumnsOf(hs []store.OutboxEntry) (ids, kinds, workflowIDs []string, payloads [][]byte) {
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

// Add implements store.Outbox.
func (o *outbox) Add(ctx context.Context, hs []store.OutboxEntry, lease time.Duration) error {
	if len(hs) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	queueOutbox(b, hs, lease)
	if err := o.s().pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("postgres: add entries: %w", err)
	}
	return nil
}

const outboxColumns = `id, kind, workflow_id, payload, created_at, attempts, last_error`

func scanOutboxEntry(row pgx.CollectableRow) (store.OutboxEntry, error) {
	var h store.OutboxEntry
	err := row.Scan(&h.ID, &h.Kind, &h.WorkflowID, &h.Payload, &h.CreatedAt, &h.Attempts, &h.LastError)
	return h, err
}

// claimOutboxSQL leases the oldest due entries. SKIP LOCKED lets relays in several
// processes claim at once without waiting for each other or taking the same row.
const claimOutboxSQL = `
UPDATE outbox SET lease_until = now() + make_interval(secs => $1)
WHERE id IN (
	SELECT id FROM outbox WHERE lease_until <= now()
	ORDER BY seq LIMIT $2
	FOR UPDATE SKIP LOCKED
)
RETURNING seq, ` + outboxColumns

// Claim implements store.Outbox.
func (o *outbox) Claim(ctx context.Context, lease time.Duration, limit int) ([]store.OutboxEntry, error) {
	rows, err := o.s().pool.Query(ctx, claimOutboxSQL, lease.Seconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim entries: %w", err)
	}
	type claimed struct {
		seq int64
		h   store.OutboxEntry
	}
	cs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimed, error) {
		var c claimed
		err := row.Scan(&c.seq, &c.h.ID, &c.h.Kind, &c.h.WorkflowID, &c.h.Payload, &c.h.CreatedAt, &c.h.Attempts, &c.h.LastError)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: claim entries: %w", err)
	}
	// RETURNING follows no ORDER BY: put them back in the order they were written.
	slices.SortFunc(cs, func(a, b claimed) int { return cmp.Compare(a.seq, b.seq) })
	hs := make([]store.OutboxEntry, len(cs))
	for i, c := range cs {
		hs[i] = c.h
	}
	return hs, nil
}

// Complete implements store.Outbox.
func (o *outbox) Complete(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := o.s().pool.Exec(ctx, `DELETE FROM outbox WHERE id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("postgres: complete entries: %w", err)
	}
	return nil
}

// Retry implements store.Outbox.
func (o *outbox) Retry(ctx context.Context, id string, delay time.Duration, lastErr string) error {
	_, err := o.s().pool.Exec(ctx, `
		UPDATE outbox SET attempts = attempts + 1, last_error = $2, lease_until = now() + make_interval(secs => $3)
		WHERE id = $1`, id, lastErr, delay.Seconds())
	if err != nil {
		return fmt.Errorf("postgres: retry entry %s: %w", id, err)
	}
	return nil
}

// Pending implements store.Outbox.
func (o *outbox) Pending(ctx context.Context, limit int) ([]store.OutboxEntry, error) {
	rows, err := o.s().pool.Query(ctx, `SELECT `+outboxColumns+` FROM outbox ORDER BY seq LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: pending entries: %w", err)
	}
	hs, err := pgx.CollectRows(rows, scanOutboxEntry)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return hs, err
}
