package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// prefixed qualifies every column of a comma-separated list with a table alias.
func prefixed(alias, columns string) string {
	parts := strings.Split(columns, ",")
	for i, p := range parts {
		parts[i] = alias + "." + strings.TrimSpace(p)
	}
	return strings.Join(parts, ", ")
}

// expireSQL is the whole sweep in one statement (one transaction). due locks up to $2
// candidates with SKIP LOCKED, so concurrent sweeps (and an Advance holding a message) never
// wait for each other and never take the same message. exp moves them to TIMED_OUT/ACK_TIMEOUT
// or, when the TTL ran out, FAILED/TTL_EXPIRED. gone removes the never-claimed rows (a claimed
// row is locked by its Claim or has attempts > 0; the DELETE re-checks attempts on the newest
// version). ent updates the entries: per key, the first TTL expiry (terminal), else the timeout
// of the latest attempt (retrying) — the same outcome as applying the transitions one by one in
// (created_at, message_id) order. The final SELECT returns each message with its entry as the
// sweep left it. Parameters: $1 ack timeout (µs), $2 limit, $3 TTL note, $4 timeout note.
var expireSQL = enumSQL(`
WITH
due AS (
	SELECT message_id FROM messages
	WHERE tracked AND state = {SENT}
	  AND (created_at <= now() - $1::bigint * interval '1 microsecond' OR expires_at <= now())
	ORDER BY created_at, message_id COLLATE "C"
	LIMIT $2
	FOR UPDATE SKIP LOCKED
),
exp AS (
	UPDATE messages AS m SET
		state = CASE WHEN m.expires_at <= now() THEN {FAILED} ELSE {TIMED_OUT} END,
		error_code = CASE WHEN m.expires_at <= now() THEN {TTL_EXPIRED} ELSE {ACK_TIMEOUT} END,
		note = CASE WHEN m.expires_at <= now() THEN $3 ELSE $4 END,
		updated_at = now()
	FROM due
	WHERE m.message_id = due.message_id
	RETURNING ` + prefixed("m", messageColumns) + `
),
gone AS (
	DELETE FROM deliveries AS d USING exp
	WHERE d.message_id = exp.message_id AND d.attempts = 0 AND d.confirmed_at IS NULL
),
ent AS (
	UPDATE idempotency_entries AS i SET
		status = CASE WHEN c.state = {FAILED} THEN 'terminal' ELSE 'retrying' END,
		original_message_id = CASE WHEN c.state = {FAILED} THEN c.message_id ELSE i.original_message_id END,
		terminal_state = CASE WHEN c.state = {FAILED} THEN c.state ELSE i.terminal_state END,
		error_code = CASE WHEN c.state = {FAILED} THEN c.error_code ELSE i.error_code END,
		result = CASE WHEN c.state = {FAILED} THEN c.note ELSE i.result END,
		cached_at = CASE WHEN c.state = {FAILED} THEN now() ELSE i.cached_at END,
		updated_at = now()
	FROM (
		SELECT DISTINCT ON (x.dedup_producer, x.dedup_key)
			x.dedup_producer, x.dedup_key, x.message_id, x.state, x.error_code, x.note
		FROM exp AS x
		JOIN idempotency_entries AS y ON y.producer_id = x.dedup_producer AND y.key = x.dedup_key
		WHERE x.dedup_key <> '' AND y.status <> 'terminal'
		  AND (x.state = {FAILED} OR y.latest_message_id = x.message_id)
		ORDER BY x.dedup_producer, x.dedup_key, (x.state = {FAILED}) DESC, x.created_at, x.message_id COLLATE "C"
	) AS c
	WHERE i.producer_id = c.dedup_producer AND i.key = c.dedup_key AND i.status <> 'terminal'
	  AND (c.state = {FAILED} OR i.latest_message_id = c.message_id)
	RETURNING i.*
)
SELECT ` + prefixed("x", messageColumns) + `,
	n.key IS NOT NULL OR o.key IS NOT NULL,
	COALESCE(n.producer_id, o.producer_id, ''), COALESCE(n.key, o.key, ''), COALESCE(n.status, o.status, ''),
	COALESCE(n.original_message_id, o.original_message_id, ''), COALESCE(n.latest_message_id, o.latest_message_id, ''),
	COALESCE(n.attempts, o.attempts, 0), COALESCE(n.terminal_state, o.terminal_state, 0),
	COALESCE(n.error_code, o.error_code, 0), COALESCE(n.result, o.result, ''),
	CASE WHEN n.key IS NOT NULL THEN n.cached_at ELSE o.cached_at END,
	COALESCE(n.created_at, o.created_at), COALESCE(n.updated_at, o.updated_at)
FROM exp AS x
LEFT JOIN ent AS n ON x.dedup_key <> '' AND n.producer_id = x.dedup_producer AND n.key = x.dedup_key
LEFT JOIN idempotency_entries AS o ON x.dedup_key <> '' AND o.producer_id = x.dedup_producer AND o.key = x.dedup_key`)

// Expire implements store.MessagePlane. The oldest messages go first; each ExpiredMessage's
// Entry is the entry as the whole sweep left it.
func (m *messagePlane) Expire(ctx context.Context, ackTimeout time.Duration, limit int) ([]store.ExpiredMessage, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := m.s().pool.Query(ctx, expireSQL, ackTimeout.Microseconds(), limit, store.TTLExpiredNote, store.AckTimeoutNote(ackTimeout))
	if err != nil {
		return nil, fmt.Errorf("postgres: expire: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.ExpiredMessage, error) {
		var (
			msg      messageScan
			hasEntry bool
			es       entryScan
		)
		if err := row.Scan(append(append(msg.dest(), &hasEntry), es.dest()...)...); err != nil {
			return store.ExpiredMessage{}, err
		}
		rec, err := msg.record()
		if err != nil {
			return store.ExpiredMessage{}, err
		}
		x := store.ExpiredMessage{Record: rec}
		if hasEntry {
			e := es.entry()
			x.Entry = &e
		}
		return x, nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: expire: %w", err)
	}
	slices.SortFunc(out, func(a, b store.ExpiredMessage) int {
		return cmp.Or(a.Record.CreatedAt.Compare(b.Record.CreatedAt), cmp.Compare(a.Record.MessageID, b.Record.MessageID))
	})
	return out, nil
}

// ---------------------------------------------------------------------------------------------
// Late ACKs and cancellation

// RecordLateAck implements store.MessagePlane. Only a message in TIMED_OUT is reconciled;
// for any other state the call reports the record and entry and changes nothing. The
// conditional UPDATE is the atomic step: of two concurrent late completions, the second
// re-checks the entry's newest version, finds it terminal and changes nothing.
func (m *messagePlane) RecordLateAck(ctx context.Context, messageID string, stage commonpb.EnvelopeState, code commonpb.ErrorCode, note string) (store.LateAck, error) {
	pool := m.s().pool
	rows, err := pool.Query(ctx, `SELECT `+messageColumns+` FROM messages WHERE message_id = $1 AND tracked`, messageID)
	if err != nil {
		return store.LateAck{}, fmt.Errorf("postgres: late ack for %q: %w", messageID, err)
	}
	var dedupProducer string
	rec, err := pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (store.MessageRecord, error) {
		r, p, err := scanMessageRow(row)
		dedupProducer = p
		return r, err
	})
	if err != nil {
		return store.LateAck{}, fmt.Errorf("postgres: late ack for %q: %w", messageID, notFound(err))
	}
	out := store.LateAck{Record: rec}
	if rec.DedupKey == "" {
		return out, nil
	}
	if rec.State == commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT && store.IsCompletion(stage) {
		out.Entry, err = queryEntry(ctx, pool, `
			UPDATE idempotency_entries SET status = 'terminal', original_message_id = $3, terminal_state = $4,
				error_code = $5, result = $6, cached_at = now(), updated_at = now()
			WHERE producer_id = $1 AND key = $2 AND status <> 'terminal'
			RETURNING `+entryColumns,
			dedupProducer, rec.DedupKey, messageID, int32(stage), int32(code), note)
		if err != nil {
			return store.LateAck{}, fmt.Errorf("postgres: late ack for %q: reconcile: %w", messageID, err)
		}
		out.Reconciled = out.Entry != nil
	}
	if out.Entry == nil {
		out.Entry, err = queryEntry(ctx, pool, `SELECT `+entryColumns+` FROM idempotency_entries WHERE producer_id = $1 AND key = $2`,
			dedupProducer, rec.DedupKey)
		if err != nil {
			return store.LateAck{}, fmt.Errorf("postgres: late ack for %q: entry: %w", messageID, err)
		}
	}
	return out, nil
}

// CancelUndelivered implements store.MessagePlane. The DELETE locks the row; a Claim that
// took it first leaves attempts > 0, which the DELETE re-checks.
func (m *messagePlane) CancelUndelivered(ctx context.Context, messageID string) (bool, error) {
	tag, err := m.s().pool.Exec(ctx, `
		DELETE FROM deliveries WHERE message_id = $1 AND attempts = 0 AND confirmed_at IS NULL`, messageID)
	if err != nil {
		return false, fmt.Errorf("postgres: cancel undelivered %q: %w", messageID, err)
	}
	return tag.RowsAffected() > 0, nil
}
