package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// This file holds the parts of the message plane added for lanes, TTL, the idempotency cache,
// stream resumption, retention, back-pressure metrics and pending responses (schema in
// migrations/00003_messaging.sql). Every time comparison uses the database clock.

// ---------------------------------------------------------------------------------------------
// Idempotency entries

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

// ---------------------------------------------------------------------------------------------
// Expire

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

// ---------------------------------------------------------------------------------------------
// Resumption, retention and metrics

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

// ---------------------------------------------------------------------------------------------
// Pending responses

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
func (m *messagePlane) AddPendingResponse(ctx context.Context, p store.PendingResponse) error {
	if p.RequestMessageID == "" {
		return errors.New("postgres: add pending response: request message_id is required")
	}
	if _, err := m.s().pool.Exec(ctx, `
		INSERT INTO pending_responses (`+pendingColumns+`)
		VALUES ($1, COALESCE(NULLIF($2, ''), $1), $3, $4, $5, $6, $7, $8,
		        COALESCE($9, now() + $8::bigint * interval '1 microsecond'))
		ON CONFLICT (request_message_id) DO UPDATE SET
			original_message_id = EXCLUDED.original_message_id, producer_id = EXCLUDED.producer_id,
			responder_id = EXCLUDED.responder_id, correlation_id = EXCLUDED.correlation_id,
			attempt = EXCLUDED.attempt, max_attempts = EXCLUDED.max_attempts,
			timeout_us = EXCLUDED.timeout_us, deadline = EXCLUDED.deadline, created_at = now()`,
		p.RequestMessageID, p.OriginalMessageID, p.ProducerID, p.ResponderID, p.CorrelationID,
		p.Attempt, p.MaxAttempts, p.Timeout.Microseconds(), nullTime(p.Deadline)); err != nil {
		return fmt.Errorf("postgres: add pending response %q: %w", p.RequestMessageID, err)
	}
	return nil
}

// ResolvePendingResponse implements store.MessagePlane. Deleting the row is the atomic
// claim: a concurrent resolve or sweep finds nothing.
func (m *messagePlane) ResolvePendingResponse(ctx context.Context, requestMessageID, responseMessageID string) (store.PendingResponse, bool, error) {
	rows, err := m.s().pool.Query(ctx, `
		DELETE FROM pending_responses WHERE request_message_id = $1 RETURNING `+pendingColumns, requestMessageID)
	if err != nil {
		return store.PendingResponse{}, false, fmt.Errorf("postgres: resolve pending response %q: %w", requestMessageID, err)
	}
	p, err := pgx.CollectExactlyOneRow(rows, scanPending)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.PendingResponse{}, false, nil
	}
	if err != nil {
		return store.PendingResponse{}, false, fmt.Errorf("postgres: resolve pending response %q: %w", requestMessageID, err)
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
