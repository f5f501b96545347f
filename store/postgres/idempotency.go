package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// This file holds the parts of the message plane added for lanes, TTL, the idempotency cache,
// stream resumption, retention, back-pressure metrics and pending responses (schema in
// migrations/00003_messaging.sql). Every time comparison uses the database clock.

// entryColumns are the columns of an idempotency entry (§11.2).
const entryColumns = `producer_id, key, status, original_message_id, latest_message_id, attempts,
	terminal_state, error_code, result, cached_at, created_at, updated_at`

// entryScan receives entryColumns.
type entryScan struct {
	e                              store.IdempotencyEntry
	state, code                    int32
	cachedAt, createdAt, updatedAt *time.Time
}

func (s *entryScan) dest() []any {
	return []any{&s.e.ProducerID, &s.e.Key, &s.e.Status, &s.e.OriginalMessageID, &s.e.LatestMessageID,
		&s.e.Attempts, &s.state, &s.code, &s.e.Result, &s.cachedAt, &s.createdAt, &s.updatedAt}
}

func (s *entryScan) entry() store.IdempotencyEntry {
	e := s.e
	e.TerminalState = commonpb.EnvelopeState(s.state)
	e.ErrorCode = commonpb.ErrorCode(s.code)
	for _, p := range []struct {
		src *time.Time
		dst *time.Time
	}{{s.cachedAt, &e.CachedAt}, {s.createdAt, &e.CreatedAt}, {s.updatedAt, &e.UpdatedAt}} {
		if p.src != nil {
			*p.dst = p.src.UTC()
		}
	}
	return e
}

func scanEntry(row pgx.CollectableRow) (store.IdempotencyEntry, error) {
	var es entryScan
	if err := row.Scan(es.dest()...); err != nil {
		return store.IdempotencyEntry{}, err
	}
	return es.entry(), nil
}

// queryEntry returns the entry one query yields, or nil when it yields none.
func queryEntry(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, args ...any) (*store.IdempotencyEntry, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	e, err := pgx.CollectExactlyOneRow(rows, scanEntry)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// Idempotency implements store.MessagePlane; a zero window means the default (3600 s).
func (m *messagePlane) Idempotency(ctx context.Context, producerID, key string, window time.Duration) (store.IdempotencyEntry, error) {
	e, err := queryEntry(ctx, m.s().pool, `
		SELECT `+entryColumns+` FROM idempotency_entries
		WHERE producer_id = $1 AND key = $2 AND updated_at > now() - $3::bigint * interval '1 microsecond'`,
		producerID, key, store.EffectiveDedupWindow(window).Microseconds())
	if err != nil {
		return store.IdempotencyEntry{}, fmt.Errorf("postgres: idempotency entry %s/%s: %w", producerID, key, err)
	}
	if e == nil {
		return store.IdempotencyEntry{}, fmt.Errorf("postgres: idempotency entry %s/%s: %w", producerID, key, store.ErrNotFound)
	}
	return *e, nil
}
