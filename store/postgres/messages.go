package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

type messagePlane Store

func (m *messagePlane) s() *Store { return (*Store)(m) }

// enumSQL substitutes the {NAME} placeholders of a query with the enum numbers they stand for,
// so the SQL below reads by name and cannot drift from the generated protobuf code.
var enumSQL = strings.NewReplacer(
	"{SENT}", num(commonpb.EnvelopeState_ENVELOPE_STATE_SENT),
	"{REJECTED}", num(commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED),
	"{FAILED}", num(commonpb.EnvelopeState_ENVELOPE_STATE_FAILED),
	"{TIMED_OUT}", num(commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT),
	"{BUFFER_FULL}", num(commonpb.ErrorCode_BUFFER_FULL),
	"{ACK_TIMEOUT}", num(commonpb.ErrorCode_ACK_TIMEOUT),
	"{TTL_EXPIRED}", num(commonpb.ErrorCode_TTL_EXPIRED),
	"{DUPLICATE_DETECTED}", num(commonpb.ErrorCode_DUPLICATE_DETECTED),
	"{ALREADY_IN_PROGRESS}", num(commonpb.ErrorCode_ALREADY_IN_PROGRESS),
	"{PRIVILEGED}", strconv.Itoa(int(lanePrivileged)),
	"{STANDARD}", strconv.Itoa(int(laneStandard)),
	"{BULK}", strconv.Itoa(int(laneBulk)),
).Replace

func num[E ~int32](e E) string { return strconv.Itoa(int(e)) }

// admitSQL is the whole admission in one statement, run after the recipient lock when the
// capacity is limited. Parameters:
//
//	$1 message_id  $2 tracked  $3 producer_id  $4 recipient_id  $5 correlation_id
//	$6 message_type  $7 envelope  $8 lane  $9 expires_at  $10 capacity (0: none)
//	$11 dedup producer  $12 dedup key ('' : no idempotency)  $13 window (µs)
//	$14 buffer-full note  $15 notify channel
//
// full_ counts the buffer (at most capacity rows). ent is the idempotency decision under the
// entry's row lock: INSERT ... ON CONFLICT DO UPDATE locks the row, waiting for a concurrent
// admission of the same key to finish, and returns its newest version; an entry out of the
// window is replaced as if absent, a retrying one continues with this attempt, any other is
// returned unchanged. It runs only when the buffer has room (a full buffer leaves the cache
// untouched), in which case cur (the live entry as of the statement's snapshot) decides.
// dec names the outcome; msg records the message (only admitted ones when untracked); del
// enqueues it; the final SELECT notifies listeners (delivered at commit) and reports. A
// message_id already known is a duplicate: msg inserted nothing, or, for an untracked message
// that was not enqueued (nothing to insert), the id exists.
var admitSQL = enumSQL(`
WITH
full_ AS (
	SELECT $10::int > 0 AND (
		SELECT count(*) FROM (
			SELECT 1 FROM deliveries WHERE agent_id = $4 AND confirmed_at IS NULL LIMIT $10::int
		) AS p) >= $10::int AS is_full
),
ent AS (
	INSERT INTO idempotency_entries AS i (producer_id, key, status, original_message_id, latest_message_id)
	SELECT $11, $12, 'in_progress', $1, $1 FROM full_ WHERE $12 <> '' AND NOT full_.is_full
	ON CONFLICT (producer_id, key) DO UPDATE SET
		status = CASE WHEN i.updated_at <= now() - $13::bigint * interval '1 microsecond' OR i.status = 'retrying'
			THEN 'in_progress' ELSE i.status END,
		original_message_id = CASE WHEN i.updated_at <= now() - $13::bigint * interval '1 microsecond'
			THEN $1 ELSE i.original_message_id END,
		latest_message_id = CASE WHEN i.updated_at <= now() - $13::bigint * interval '1 microsecond' OR i.status = 'retrying'
			THEN $1 ELSE i.latest_message_id END,
		attempts = CASE WHEN i.updated_at <= now() - $13::bigint * interval '1 microsecond' THEN 1
			WHEN i.status = 'retrying' THEN i.attempts + 1 ELSE i.attempts END,
		terminal_state = CASE WHEN i.updated_at <= now() - $13::bigint * interval '1 microsecond' THEN 0 ELSE i.terminal_state END,
		error_code = CASE WHEN i.updated_at <= now() - $13::bigint * interval '1 microsecond' THEN 0 ELSE i.error_code END,
		result = CASE WHEN i.updated_at <= now() - $13::bigint * interval '1 microsecond' THEN '' ELSE i.result END,
		cached_at = CASE WHEN i.updated_at <= now() - $13::bigint * interval '1 microsecond' THEN NULL ELSE i.cached_at END,
		created_at = CASE WHEN i.updated_at <= now() - $13::bigint * interval '1 microsecond' THEN now() ELSE i.created_at END,
		updated_at = CASE WHEN i.updated_at <= now() - $13::bigint * interval '1 microsecond' OR i.status = 'retrying'
			THEN now() ELSE i.updated_at END
	RETURNING i.*
),
cur AS (
	SELECT * FROM idempotency_entries
	WHERE $12 <> '' AND producer_id = $11 AND key = $12 AND updated_at > now() - $13::bigint * interval '1 microsecond'
),
dec AS (
	SELECT
		CASE
			WHEN e.key IS NOT NULL AND e.latest_message_id = $1 THEN 'admit'
			WHEN e.key IS NOT NULL AND e.status = 'terminal' THEN 'duplicate'
			WHEN e.key IS NOT NULL THEN 'in_progress'
			WHEN c.status = 'terminal' THEN 'duplicate'
			WHEN c.status = 'in_progress' THEN 'in_progress'
			WHEN f.is_full THEN 'full'
			ELSE 'admit'
		END AS decision,
		COALESCE(e.producer_id, c.producer_id) AS producer_id,
		COALESCE(e.key, c.key) AS key,
		COALESCE(e.status, c.status) AS status,
		COALESCE(e.original_message_id, c.original_message_id) AS original_message_id,
		COALESCE(e.latest_message_id, c.latest_message_id) AS latest_message_id,
		COALESCE(e.attempts, c.attempts) AS attempts,
		COALESCE(e.terminal_state, c.terminal_state) AS terminal_state,
		COALESCE(e.error_code, c.error_code) AS error_code,
		COALESCE(e.result, c.result) AS result,
		CASE WHEN e.key IS NOT NULL THEN e.cached_at ELSE c.cached_at END AS cached_at,
		COALESCE(e.created_at, c.created_at) AS created_at,
		COALESCE(e.updated_at, c.updated_at) AS updated_at
	FROM full_ AS f LEFT JOIN ent AS e ON true LEFT JOIN cur AS c ON true
),
msg AS (
	INSERT INTO messages (message_id, tracked, producer_id, recipient_id, correlation_id, message_type,
	                      state, error_code, note, envelope, expires_at, dedup_producer, dedup_key)
	SELECT $1, $2, $3, $4, $5, $6,
		CASE d.decision WHEN 'admit' THEN {SENT} ELSE {REJECTED} END,
		CASE d.decision WHEN 'admit' THEN 0 WHEN 'full' THEN {BUFFER_FULL}
			WHEN 'in_progress' THEN {ALREADY_IN_PROGRESS} ELSE {DUPLICATE_DETECTED} END,
		CASE d.decision WHEN 'admit' THEN '' WHEN 'full' THEN $14
			WHEN 'in_progress' THEN 'operation already in progress (attempt ' || d.latest_message_id || ')'
			ELSE 'duplicate of ' || d.original_message_id END,
		$7, $9, $11, $12
	FROM dec AS d
	WHERE $2 OR d.decision = 'admit'
	ON CONFLICT (message_id) DO NOTHING
	RETURNING state
),
del AS (
	INSERT INTO deliveries (agent_id, message_id, envelope, lane, expires_at)
	SELECT $4, $1, $7, $8, $9 FROM msg WHERE msg.state = {SENT}
	RETURNING seq
)
SELECT d.decision,
	EXISTS (SELECT 1 FROM msg),
	-- Only an untracked message that is not enqueued inserts nothing to conflict with.
	NOT $2 AND d.decision <> 'admit' AND EXISTS (SELECT 1 FROM messages WHERE message_id = $1),
	(SELECT seq FROM del),
	(SELECT pg_notify($15, $4)::text FROM del),
	COALESCE(d.producer_id, ''), COALESCE(d.key, ''), COALESCE(d.status, ''),
	COALESCE(d.original_message_id, ''), COALESCE(d.latest_message_id, ''), COALESCE(d.attempts, 0),
	COALESCE(d.terminal_state, 0), COALESCE(d.error_code, 0), COALESCE(d.result, ''),
	d.cached_at, d.created_at, d.updated_at
FROM dec AS d`)

// Admit implements store.MessagePlane. The idempotency cache answers before the capacity
// check: a duplicate or an operation in progress is refused as such even into a full buffer.
//
// Without a capacity limit or an idempotency key the admission is the single statement
// admitSQL (atomic on its own). Otherwise it is one transaction: the per-recipient advisory
// lock (capacity only), then admitSQL, which takes the idempotency entry's row lock. Every
// admission takes them in that order — recipient, then entry — and holds at most one of each,
// so admissions cannot deadlock one another; Advance, Expire and RecordLateAck take entry
// locks but never a recipient lock.
func (m *messagePlane) Admit(ctx context.Context, req store.AdmitRequest) (int64, error) {
	env := req.Envelope
	if env == nil || env.GetMessageId() == "" {
		return 0, errors.New("postgres: admit: envelope with a message_id is required")
	}
	if req.RecipientID == "" {
		return 0, errors.New("postgres: admit: recipient_id is required")
	}
	id := env.GetMessageId()
	envBytes, err := proto.Marshal(env)
	if err != nil {
		return 0, fmt.Errorf("postgres: admit %q: marshal envelope: %w", id, err)
	}
	var dedupProducer, dedupKey string
	var window time.Duration
	if req.Track && req.Dedup != nil && req.Dedup.Key != "" {
		dedupProducer, dedupKey, window = req.Dedup.ProducerID, req.Dedup.Key, dedupWindow(req.Dedup.Window)
	}
	capacity := max(req.Capacity, 0)
	args := []any{id, req.Track, env.GetProducerId(), req.RecipientID, env.GetCorrelationId(),
		int32(env.GetMessageType()), envBytes, laneRank(req.Lane), nullTime(req.ExpiresAt), capacity,
		dedupProducer, dedupKey, window.Microseconds(), bufferFullNote(req.RecipientID, capacity), NotifyChannel}

	s := m.s()
	var (
		q  querier = s.pool
		tx pgx.Tx
	)
	if capacity > 0 || dedupKey != "" {
		if tx, err = s.pool.Begin(ctx); err != nil {
			return 0, fmt.Errorf("postgres: admit %q: begin: %w", id, err)
		}
		defer rollback(tx)
		q = tx
		if capacity > 0 {
			// Serialize capacity-limited admissions to this recipient across every connection
			// and process: without the lock, N concurrent transactions would each count
			// Capacity-1 rows and all insert. The lock is transaction-scoped, released at
			// commit, after our row is visible, so the next holder's count (a new READ
			// COMMITTED snapshot, taken by admitSQL after the lock) sees it. Two recipients
			// whose ids share a hash merely serialize; correctness is unaffected.
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, recipientLockClass, req.RecipientID); err != nil {
				return 0, fmt.Errorf("postgres: admit %q: lock recipient %q: %w", id, req.RecipientID, err)
			}
		}
	}
	var (
		decision          string
		inserted, existed bool
		seq               *int64
		notified          *string
		es                entryScan
	)
	if err := q.QueryRow(ctx, admitSQL, args...).Scan(append([]any{&decision, &inserted, &existed, &seq, &notified}, es.dest()...)...); err != nil {
		return 0, fmt.Errorf("postgres: admit %q: %w", id, err)
	}
	e := es.entry()
	// The primary key is the duplicate detector: a concurrent admit of the same id waits for
	// our commit and then finds the conflict, so exactly one of them wins. A duplicate rolls
	// the whole transaction back, idempotency entry included.
	if existed || (!inserted && (req.Track || decision == "admit")) {
		return 0, fmt.Errorf("postgres: admit %q: %w", id, store.ErrDuplicateMessage)
	}
	if tx != nil {
		if err := tx.Commit(ctx); err != nil {
			return 0, fmt.Errorf("postgres: admit %q: commit: %w", id, err)
		}
	}
	switch decision {
	case "admit":
		if seq == nil {
			return 0, fmt.Errorf("postgres: admit %q: no delivery row", id)
		}
		// Local subscribers are woken at once as well, without waiting for the round trip
		// through the listener connection (the hub coalesces the second wake-up).
		s.hub.Wake(req.RecipientID)
		return *seq, nil
	case "full":
		return 0, fmt.Errorf("postgres: admit %q to %q: %w", id, req.RecipientID, store.ErrBufferFull)
	case "in_progress":
		return 0, &store.DedupError{Entry: e, InProgress: true}
	default:
		return 0, &store.DedupError{Entry: e}
	}
}

// querier is what pgxpool.Pool and pgx.Tx have in common for single queries.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// claimSQL takes, per lane, the first $2 deliverable rows (locked; rows another claim holds
// are skipped), numbers each lane's rows, and orders them by weighted-round-robin round
// ((rank-1) / weight), then lane (PRIVILEGED first), then seq: in round r a lane of weight w
// contributes its rows r*w+1 .. (r+1)*w, and a lane that has run out simply contributes none.
// The first $2 of that order are leased. Leases and TTLs are judged by the database clock.
var claimSQL = enumSQL(`
WITH
p AS (
	SELECT seq, lane FROM deliveries
	WHERE agent_id = $1 AND lane = {PRIVILEGED} AND confirmed_at IS NULL
	  AND (leased_until IS NULL OR leased_until <= now()) AND (expires_at IS NULL OR expires_at > now())
	ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED
),
s AS (
	SELECT seq, lane FROM deliveries
	WHERE agent_id = $1 AND lane = {STANDARD} AND confirmed_at IS NULL
	  AND (leased_until IS NULL OR leased_until <= now()) AND (expires_at IS NULL OR expires_at > now())
	ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED
),
b AS (
	SELECT seq, lane FROM deliveries
	WHERE agent_id = $1 AND lane = {BULK} AND confirmed_at IS NULL
	  AND (leased_until IS NULL OR leased_until <= now()) AND (expires_at IS NULL OR expires_at > now())
	ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED
),
pick AS (
	SELECT seq, lane, rnd FROM (
		SELECT seq, lane,
			(row_number() OVER (PARTITION BY lane ORDER BY seq) - 1)
				/ CASE lane WHEN {PRIVILEGED} THEN $4::int WHEN {STANDARD} THEN $5::int ELSE $6::int END AS rnd
		FROM (SELECT * FROM p UNION ALL SELECT * FROM s UNION ALL SELECT * FROM b) AS c
	) AS r
	ORDER BY rnd, lane, seq
	LIMIT $2
)
UPDATE deliveries AS d
SET leased_until = now() + $3::bigint * interval '1 microsecond',
    attempts = d.attempts + 1
FROM pick
WHERE d.seq = pick.seq
RETURNING d.seq, d.agent_id, d.envelope, d.enqueued_at, d.attempts, pick.rnd, pick.lane`)

// Claim implements store.MessagePlane. FOR UPDATE SKIP LOCKED lets two streams (or
// frontends) claim concurrently without handing out the same row twice or waiting on each
// other.
func (m *messagePlane) Claim(ctx context.Context, req store.ClaimRequest) ([]store.Delivery, error) {
	if req.Limit <= 0 {
		return nil, nil
	}
	w := laneWeights(req.Weights)
	rows, err := m.s().pool.Query(ctx, claimSQL, req.AgentID, req.Limit, req.Lease.Microseconds(), w[0], w[1], w[2])
	if err != nil {
		return nil, fmt.Errorf("postgres: claim for %q: %w", req.AgentID, err)
	}
	type claimed struct {
		d    store.Delivery
		rnd  int64
		lane int16
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimed, error) {
		var (
			c        claimed
			envBytes []byte
		)
		if err := row.Scan(&c.d.Seq, &c.d.AgentID, &envBytes, &c.d.EnqueuedAt, &c.d.Attempts, &c.rnd, &c.lane); err != nil {
			return c, err
		}
		var err error
		c.d, err = finishDelivery(c.d, envBytes)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: claim for %q: %w", req.AgentID, err)
	}
	// UPDATE ... RETURNING does not preserve pick's order.
	slices.SortFunc(out, func(a, b claimed) int {
		return cmp.Or(cmp.Compare(a.rnd, b.rnd), cmp.Compare(a.lane, b.lane), cmp.Compare(a.d.Seq, b.d.Seq))
	})
	ds := make([]store.Delivery, len(out))
	for i, c := range out {
		ds[i] = c.d
	}
	return ds, nil
}

// ReleaseLeases implements store.MessagePlane.
func (m *messagePlane) ReleaseLeases(ctx context.Context, agentID string) error {
	s := m.s()
	var released int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE deliveries SET leased_until = NULL
			WHERE agent_id = $1 AND confirmed_at IS NULL AND leased_until IS NOT NULL`, agentID)
		if err != nil {
			return err
		}
		released = tag.RowsAffected()
		if released == 0 {
			return nil
		}
		// Same transaction as the update: other processes' streams wake only once the
		// released rows are visible to them.
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, NotifyChannel, agentID)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: release leases of %q: %w", agentID, err)
	}
	if released > 0 {
		s.hub.Wake(agentID)
	}
	return nil
}

// Confirm implements store.MessagePlane.
func (m *messagePlane) Confirm(ctx context.Context, agentID string, seq int64, messageID string) (store.Delivery, bool, error) {
	// One conditional UPDATE: a concurrent second Confirm of the same row blocks on the row
	// lock, then re-checks confirmed_at IS NULL and matches nothing, so only one succeeds.
	rows, err := m.s().pool.Query(ctx, `
		UPDATE deliveries SET confirmed_at = now(), leased_until = NULL
		WHERE seq = $1 AND agent_id = $2 AND confirmed_at IS NULL AND ($3 = '' OR message_id = $3)
		RETURNING seq, agent_id, envelope, enqueued_at, attempts`, seq, agentID, messageID)
	if err != nil {
		return store.Delivery{}, false, fmt.Errorf("postgres: confirm %s/%d: %w", agentID, seq, err)
	}
	d, err := pgx.CollectExactlyOneRow(rows, scanDelivery)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Delivery{}, false, nil
	}
	if err != nil {
		return store.Delivery{}, false, fmt.Errorf("postgres: confirm %s/%d: %w", agentID, seq, err)
	}
	return d, true, nil
}

// Depth implements store.MessagePlane.
func (m *messagePlane) Depth(ctx context.Context, agentID string) (int, error) {
	var n int
	if err := m.s().pool.QueryRow(ctx, `
		SELECT count(*) FROM deliveries WHERE agent_id = $1 AND confirmed_at IS NULL`, agentID).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: depth of %q: %w", agentID, err)
	}
	return n, nil
}

const messageColumns = `message_id, producer_id, recipient_id, correlation_id, message_type,
	state, error_code, note, envelope, created_at, updated_at, dedup_key, expires_at, dedup_producer`

const advanceSQL = `
UPDATE messages SET state = $2, error_code = $3, note = $4, updated_at = now()
WHERE message_id = $1
RETURNING ` + messageColumns

// advanceTimedOutSQL: TIMED_OUT of the entry's latest attempt makes the entry retrying.
const advanceTimedOutSQL = `
WITH upd AS (
	UPDATE messages SET state = $2, error_code = $3, note = $4, updated_at = now()
	WHERE message_id = $1
	RETURNING ` + messageColumns + `
),
ent AS (
	UPDATE idempotency_entries AS i SET status = 'retrying', updated_at = now()
	FROM upd
	WHERE i.producer_id = upd.dedup_producer AND i.key = upd.dedup_key
	  AND i.status <> 'terminal' AND i.latest_message_id = upd.message_id
)
SELECT * FROM upd`

// advanceCompletedSQL: a completion makes a not yet terminal entry terminal with this
// message's outcome (the transition's note is the cached result).
const advanceCompletedSQL = `
WITH upd AS (
	UPDATE messages SET state = $2, error_code = $3, note = $4, updated_at = now()
	WHERE message_id = $1
	RETURNING ` + messageColumns + `
),
ent AS (
	UPDATE idempotency_entries AS i SET status = 'terminal', original_message_id = upd.message_id,
		terminal_state = upd.state, error_code = upd.error_code, result = upd.note,
		cached_at = now(), updated_at = now()
	FROM upd
	WHERE i.producer_id = upd.dedup_producer AND i.key = upd.dedup_key AND i.status <> 'terminal'
)
SELECT * FROM upd`

// GetMessage implements store.MessagePlane.
func (m *messagePlane) GetMessage(ctx context.Context, messageID string) (store.MessageRecord, error) {
	rows, err := m.s().pool.Query(ctx, `SELECT `+messageColumns+` FROM messages WHERE message_id = $1 AND tracked`, messageID)
	if err != nil {
		return store.MessageRecord{}, fmt.Errorf("postgres: get message %q: %w", messageID, err)
	}
	rec, err := pgx.CollectExactlyOneRow(rows, scanMessage)
	if err != nil {
		return store.MessageRecord{}, fmt.Errorf("postgres: get message %q: %w", messageID, notFound(err))
	}
	return rec, nil
}

// Advance implements store.MessagePlane.
func (m *messagePlane) Advance(ctx context.Context, t store.Transition, legal store.LegalFunc) (store.MessageRecord, bool, error) {
	var (
		rec     store.MessageRecord
		applied bool
	)
	err := pgx.BeginFunc(ctx, m.s().pool, func(tx pgx.Tx) error {
		// FOR UPDATE holds the row until commit, so legal() judges the state that the UPDATE
		// below replaces; a concurrent Advance waits and then sees our result.
		rows, err := tx.Query(ctx, `SELECT `+messageColumns+` FROM messages WHERE message_id = $1 AND tracked FOR UPDATE`, t.MessageID)
		if err != nil {
			return err
		}
		rec, err = pgx.CollectExactlyOneRow(rows, scanMessage)
		if err != nil {
			return notFound(err)
		}
		if rec.State == t.To || legal == nil || !legal(rec.State, t.To) {
			return nil
		}
		// The idempotency entry follows in the same statement (so no extra round trip) when
		// the transition concerns it; the entry's row lock is taken after the message's.
		sql := advanceSQL
		if rec.DedupKey != "" {
			switch {
			case t.To == commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT:
				sql = advanceTimedOutSQL
			case isCompletion(t.To):
				sql = advanceCompletedSQL
			}
		}
		rows, err = tx.Query(ctx, sql, t.MessageID, int32(t.To), int32(t.ErrorCode), t.Note)
		if err != nil {
			return err
		}
		rec, err = pgx.CollectExactlyOneRow(rows, scanMessage)
		if err != nil {
			return err
		}
		applied = true
		return nil
	})
	if err != nil {
		return store.MessageRecord{}, false, fmt.Errorf("postgres: advance %q to %s: %w", t.MessageID, t.To, err)
	}
	return rec, applied, nil
}

// Subscribe implements store.MessagePlane. Wake-ups come from this process's own Admit and
// ReleaseLeases calls and, through the LISTEN connection, from every other process sharing the
// database. The subscription also ends when ctx is done; the channel is never closed.
func (m *messagePlane) Subscribe(ctx context.Context, agentID string) (<-chan struct{}, func()) {
	return m.s().hub.Subscribe(ctx, agentID)
}

// scanDelivery reads seq, agent_id, envelope, enqueued_at, attempts.
func scanDelivery(row pgx.CollectableRow) (store.Delivery, error) {
	var (
		d        store.Delivery
		envBytes []byte
	)
	if err := row.Scan(&d.Seq, &d.AgentID, &envBytes, &d.EnqueuedAt, &d.Attempts); err != nil {
		return store.Delivery{}, err
	}
	return finishDelivery(d, envBytes)
}

// finishDelivery decodes the envelope of a scanned delivery row.
func finishDelivery(d store.Delivery, envBytes []byte) (store.Delivery, error) {
	env := &commonpb.Envelope{}
	if err := proto.Unmarshal(envBytes, env); err != nil {
		return store.Delivery{}, fmt.Errorf("unmarshal envelope of seq %d: %w", d.Seq, err)
	}
	d.Envelope = env
	d.EnqueuedAt = utc(d.EnqueuedAt)
	return d, nil
}

// scanMessage reads messageColumns.
func scanMessage(row pgx.CollectableRow) (store.MessageRecord, error) {
	r, _, err := scanMessageRow(row)
	return r, err
}

// scanMessageRow reads messageColumns and also returns the dedup producer.
func scanMessageRow(row pgx.CollectableRow) (store.MessageRecord, string, error) {
	var ms messageScan
	if err := row.Scan(ms.dest()...); err != nil {
		return store.MessageRecord{}, "", err
	}
	r, err := ms.record()
	return r, ms.dedupProducer, err
}

// messageScan receives messageColumns.
type messageScan struct {
	r                       store.MessageRecord
	msgType, state, errCode int32
	envBytes                []byte
	expiresAt               *time.Time
	dedupProducer           string
}

func (s *messageScan) dest() []any {
	return []any{&s.r.MessageID, &s.r.ProducerID, &s.r.RecipientID, &s.r.CorrelationID, &s.msgType,
		&s.state, &s.errCode, &s.r.Note, &s.envBytes, &s.r.CreatedAt, &s.r.UpdatedAt, &s.r.DedupKey,
		&s.expiresAt, &s.dedupProducer}
}

func (s *messageScan) record() (store.MessageRecord, error) {
	r := s.r
	env := &commonpb.Envelope{}
	if err := proto.Unmarshal(s.envBytes, env); err != nil {
		return store.MessageRecord{}, fmt.Errorf("unmarshal envelope of %q: %w", r.MessageID, err)
	}
	r.MessageType = commonpb.MessageType(s.msgType)
	r.State = commonpb.EnvelopeState(s.state)
	r.ErrorCode = commonpb.ErrorCode(s.errCode)
	r.Envelope = env
	r.CreatedAt = utc(r.CreatedAt)
	r.UpdatedAt = utc(r.UpdatedAt)
	if s.expiresAt != nil {
		r.ExpiresAt = s.expiresAt.UTC()
	}
	return r, nil
}

// notFound maps pgx.ErrNoRows to store.ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}
