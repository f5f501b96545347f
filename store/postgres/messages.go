package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	"{PRIVILEGED}", strconv.Itoa(int(store.LanePrivileged)),
	"{STANDARD}", strconv.Itoa(int(store.LaneStandard)),
	"{BULK}", strconv.Itoa(int(store.LaneBulk)),
).Replace

func num[E ~int32](e E) string { return strconv.Itoa(int(e)) }

// admitStatement builds the whole admission as one statement, run after the recipient lock
// when the capacity is limited; skipKnown makes a known message_id a reported duplicate
// rather than an error (see below). Parameters:
//
//	$1 message_id  $2 tracked  $3 producer_id  $4 recipient_id  $5 correlation_id
//	$6 message_type  $7 envelope  $8 lane  $9 expires_at  $10 capacity (0: none)
//	$11 dedup producer  $12 dedup key ('' : no idempotency)  $13 window (µs)
//	$14 buffer-full note  $15 notify channel  $26 hand-over lease (µs; 0: none)
//	$27 the audit event's hlc  $28 its trace_id  $29 the message's traceparent
//
// full_ counts the buffer's data rows (at most capacity of them, through
// deliveries_capacity_idx): rows admitted without a capacity, the router's control traffic,
// neither count nor are counted (§13), and del marks the row it inserts accordingly. ent is the idempotency decision under the
// entry's row lock: INSERT ... ON CONFLICT DO UPDATE locks the row, waiting for a concurrent
// admission of the same key to finish, and returns its newest version; an entry out of the
// window is replaced as if absent, a retrying one continues with this attempt, any other is
// returned unchanged. It runs only when the buffer has room (a full buffer leaves the cache
// untouched), in which case cur (the live entry as of the statement's snapshot) decides.
// dec names the outcome; msg records the message (only admitted ones when untracked); del
// enqueues it; ho writes the request's outbox entries ($16-$19 as parallel arrays, leased for $20
// seconds) only when del enqueued the message; au writes the request's audit event ($21
// correlation_id, $22 actor, $23 type, empty for none, $24 agent_id, $25 details, a JSON object
// that gains the row's seq) only then too; the final SELECT notifies listeners (delivered at
// commit) and reports.
//
// hand decides whether the row is handed straight to a stream attached in this process
// (store.MessagePlane.Attach): only when the caller asked ($26 > 0) and none of the
// recipient's other rows is deliverable, so a handed row never overtakes one a claim would
// give first. del then stores it leased, with its first attempt counted, and the final
// SELECT notifies nobody: no claim could take it.
//
// A message_id already known is a duplicate, and a duplicate must change nothing. With an
// idempotency key, msg has no ON CONFLICT clause, so inserting a known id fails the whole
// statement with a unique violation on messages_pkey (a concurrent admission of the same id
// waits for the other's commit first), which rolls back everything it did, the idempotency
// entry included. Without one (admitNoKeySQL) nothing before msg writes, so msg skips a known
// id (ON CONFLICT DO NOTHING), del, ho and au follow it in writing nothing, and the statement
// reports the duplicate instead of failing: a duplicate then costs its group commit nothing
// (a failing member makes its group run again, group.go) — the resends of a fan-out, such as
// a negotiation's events sent again after a retry, are such duplicates. An untracked message
// that is not enqueued inserts nothing to conflict with; for it the statement reports whether
// the id exists (and changes nothing).
func admitStatement(skipKnown bool) string {
	conflict, known := "", `NOT $2 AND d.decision <> 'admit' AND EXISTS (SELECT 1 FROM messages WHERE message_id = $1)`
	if skipKnown {
		conflict = "\n\tON CONFLICT (message_id) DO NOTHING"
		// A message msg meant to insert and did not is a known id.
		known = `(($2 OR d.decision = 'admit') AND NOT EXISTS (SELECT 1 FROM msg)) OR ` + known
	}
	return enumSQL(`
WITH
full_ AS (
	SELECT $10::int > 0 AND (
		SELECT count(*) FROM (
			SELECT 1 FROM deliveries WHERE agent_id = $4 AND confirmed_at IS NULL AND counted LIMIT $10::int
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
	                      state, error_code, note, envelope, expires_at, dedup_producer, dedup_key, traceparent)
	SELECT $1, $2, $3, $4, $5, $6,
		CASE d.decision WHEN 'admit' THEN {SENT} ELSE {REJECTED} END,
		CASE d.decision WHEN 'admit' THEN 0 WHEN 'full' THEN {BUFFER_FULL}
			WHEN 'in_progress' THEN {ALREADY_IN_PROGRESS} ELSE {DUPLICATE_DETECTED} END,
		CASE d.decision WHEN 'admit' THEN '' WHEN 'full' THEN $14
			WHEN 'in_progress' THEN 'operation already in progress (attempt ' || d.latest_message_id || ')'
			ELSE 'duplicate of ' || d.original_message_id END,
		$7, $9, $11, $12, $29
	FROM dec AS d
	WHERE $2 OR d.decision = 'admit'` + conflict + `
	RETURNING state
),
hand AS (
	SELECT CASE WHEN $26::bigint > 0 AND NOT EXISTS (` + deliverableOf("$4") + `)
		THEN now() + $26::bigint * interval '1 microsecond' END AS until
),
del AS (
	INSERT INTO deliveries (agent_id, message_id, envelope, lane, expires_at, counted, leased_until, attempts, traceparent)
	SELECT $4, $1, $7, $8, $9, $10::int > 0, hand.until, CASE WHEN hand.until IS NULL THEN 0 ELSE 1 END, $29
	FROM msg, hand WHERE msg.state = {SENT}
	RETURNING seq, leased_until IS NOT NULL AS handed, enqueued_at
),
ho AS (
	INSERT INTO outbox (id, kind, workflow_id, payload, lease_until)
	SELECT h.id, h.kind, h.workflow_id, h.payload, now() + make_interval(secs => $20)
	FROM unnest($16::text[], $17::text[], $18::text[], $19::bytea[]) WITH ORDINALITY AS h(id, kind, workflow_id, payload, ord)
	WHERE EXISTS (SELECT 1 FROM del)
	ORDER BY h.ord
	ON CONFLICT (id) DO NOTHING
),
au AS (
	INSERT INTO audit_events (time, correlation_id, actor, type, agent_id, message_id, details, hlc, trace_id)
	SELECT now(), $21, $22, $23, $24, $1, ($25::jsonb || jsonb_build_object('seq', del.seq))::json, $27, $28
	FROM del WHERE $23::text <> ''
)
SELECT d.decision,
	-- Whether the message_id is known (see admitStatement).
	` + known + `,
	(SELECT seq FROM del), (SELECT handed FROM del), (SELECT enqueued_at FROM del),
	(SELECT pg_notify($15, $4)::text FROM del WHERE NOT del.handed),
	COALESCE(d.producer_id, ''), COALESCE(d.key, ''), COALESCE(d.status, ''),
	COALESCE(d.original_message_id, ''), COALESCE(d.latest_message_id, ''), COALESCE(d.attempts, 0),
	COALESCE(d.terminal_state, 0), COALESCE(d.error_code, 0), COALESCE(d.result, ''),
	d.cached_at, d.created_at, d.updated_at
FROM dec AS d`)
}

// deliverableOf selects the rows of the agent named by the parameter that a claim could hand
// out now (see claimSQL), through deliveries_pending_idx.
func deliverableOf(agent string) string {
	return `SELECT 1 FROM deliveries WHERE agent_id = ` + agent + ` AND confirmed_at IS NULL
		AND (leased_until IS NULL OR leased_until <= now()) AND (expires_at IS NULL OR expires_at > now())`
}

var (
	// admitSQL admits a request with an idempotency key.
	admitSQL = admitStatement(false)
	// admitNoKeySQL admits a request without one, skipping a known message_id.
	admitNoKeySQL = admitStatement(true)
)

// Admit implements store.MessagePlane. The idempotency cache answers before the capacity
// check: a duplicate or an operation in progress is refused as such even into a full buffer.
//
// The admission is the single statement admitSQL, atomic on its own (a duplicate message_id
// makes it fail, which undoes whatever it did), run in a group with other writers' statements
// (group.go) and answered once the group committed. With a capacity, the group first takes the
// recipient's transaction-scoped advisory lock, which serializes capacity-limited admissions
// to this recipient across every connection and process: without it, N concurrent
// transactions would each count Capacity-1 rows and all insert. admitSQL is a statement of its
// own so that its snapshot (READ COMMITTED: one per statement) is taken after the lock was
// granted, and therefore after the previous holder committed: its count sees that holder's row
// (and those of earlier members of its own group, which share its transaction). Locking inside
// admitSQL itself would not do: a statement's snapshot predates the locks it takes. Every
// admission takes the locks in that order — recipients, then entries — so admissions cannot
// deadlock one another on them; Advance, Expire and RecordLateAck take entry locks but never a
// recipient lock. Two recipients whose ids share a hash merely serialize.
func (m *messagePlane) Admit(ctx context.Context, req store.AdmitRequest) (int64, error) {
	member, outcome, err := m.admission(req)
	if err != nil {
		return 0, err
	}
	return outcome(m.s().groups.do(ctx, member))
}

// AdmitBatch implements store.MessagePlane: the members form one group of their own (one
// transaction, one commit), run in the caller's goroutine. A member's own refusal (a full
// buffer, the idempotency cache, a message_id known without a key) is an outcome within the
// transaction; a message_id known under a key fails the statement, and the group is split
// around it as any group is (group.go). Any other error fails the whole batch, which then
// admitted nothing: a fan-out never leaves a recipient with a later member admitted and an
// earlier one lost.
func (m *messagePlane) AdmitBatch(ctx context.Context, reqs []store.AdmitRequest) []store.AdmitResult {
	out := make([]store.AdmitResult, len(reqs))
	members := make([]*groupMember, 0, len(reqs))
	outcomes := make([]func(error) (int64, error), len(reqs))
	for i, req := range reqs {
		member, outcome, err := m.admission(req)
		if err != nil {
			out[i].Err = err
			continue
		}
		member.done = make(chan error, 1)
		members = append(members, member)
		outcomes[i] = outcome
	}
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i].Err = cmp.Or(out[i].Err, err)
		}
		return out
	}
	// The caller's context bounds the batch; the store's closing does not cut it short.
	m.s().groups.commitSplitting(ctx, members, isDuplicateMessage)
	j := 0
	for i := range out {
		if outcomes[i] != nil {
			out[i].Seq, out[i].Err = outcomes[i](<-members[j].done)
			j++
		}
	}
	return out
}

// admission prepares req as a group member running admitSQL, and the function that turns the
// member's outcome into Admit's result — which, for a row handed over, first puts it into the
// inbox attached for its recipient when the admission was prepared (Attach).
func (m *messagePlane) admission(req store.AdmitRequest) (*groupMember, func(error) (int64, error), error) {
	env := req.Envelope
	if env == nil || env.GetMessageId() == "" {
		return nil, nil, errors.New("postgres: admit: envelope with a message_id is required")
	}
	if req.RecipientID == "" {
		return nil, nil, errors.New("postgres: admit: recipient_id is required")
	}
	id := env.GetMessageId()
	envBytes, err := proto.Marshal(env)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: admit %q: marshal envelope: %w", id, err)
	}
	var dedupProducer, dedupKey string
	var window time.Duration
	if req.Track && req.Dedup != nil && req.Dedup.Key != "" {
		dedupProducer, dedupKey, window = req.Dedup.ProducerID, req.Dedup.Key, store.EffectiveDedupWindow(req.Dedup.Window)
	}
	capacity := max(req.Capacity, 0)
	hIDs, hKinds, hWorkflows, hPayloads := outboxColumnsOf(req.Outbox)
	args := []any{id, req.Track, env.GetProducerId(), req.RecipientID, env.GetCorrelationId(),
		int32(env.GetMessageType()), envBytes, int16(store.LaneRank(req.Lane)), nullTime(req.ExpiresAt), capacity,
		dedupProducer, dedupKey, window.Microseconds(), store.BufferFullNote(req.RecipientID, capacity), NotifyChannel,
		hIDs, hKinds, hWorkflows, hPayloads, store.OutboxLease.Seconds()}
	args = append(args, auditColumnsOf(req.Audit)...)
	inbox := m.s().hub.Inbox(req.RecipientID)
	args = append(args, handLease(inbox))
	args = append(args, auditStampsOf(req.Audit)...)
	args = append(args, req.TraceParent)

	var (
		decision   string
		existed    bool
		seq        *int64
		handed     *bool
		enqueuedAt *time.Time
		notified   *string
		es         entryScan
	)
	dest := append([]any{&decision, &existed, &seq, &handed, &enqueuedAt, &notified}, es.dest()...)
	sql := admitNoKeySQL
	if dedupKey != "" {
		sql = admitSQL
	}
	member := &groupMember{
		queue: func(b *pgx.Batch) { b.Queue(sql, args...) },
		read:  func(br pgx.BatchResults) error { return br.QueryRow().Scan(dest...) },
	}
	if capacity > 0 {
		member.lockRecipient = req.RecipientID
	}
	outcome := func(err error) (int64, error) {
		if isDuplicateMessage(err) || (err == nil && existed) {
			return 0, fmt.Errorf("postgres: admit %q: %w", id, store.ErrDuplicateMessage)
		}
		if err != nil {
			return 0, fmt.Errorf("postgres: admit %q: %w", id, err)
		}
		switch decision {
		case "admit":
			if seq == nil {
				return 0, fmt.Errorf("postgres: admit %q: no delivery row", id)
			}
			// Subscribers in this process are woken by the notification too (see Subscribe).
			if handed != nil && *handed {
				m.handOver(inbox, store.Delivery{Seq: *seq, AgentID: req.RecipientID, Envelope: env,
					EnqueuedAt: utc(*enqueuedAt), Attempts: 1, Lane: store.LaneClass(store.LaneRank(req.Lane)), TraceParent: req.TraceParent})
			}
			return *seq, nil
		case "full":
			return 0, fmt.Errorf("postgres: admit %q to %q: %w", id, req.RecipientID, store.ErrBufferFull)
		case "in_progress":
			return 0, &store.DedupError{Entry: es.entry(), InProgress: true}
		default:
			return 0, &store.DedupError{Entry: es.entry()}
		}
	}
	return member, outcome, nil
}

// auditColumnsOf is admitSQL's $21-$25 for an admission's audit event: its type is empty when
// there is none, and its details are a JSON object ({} when empty).
func auditColumnsOf(e *store.Event) []any {
	if e == nil {
		return []any{"", "", "", "", "{}"}
	}
	details := "{}"
	if len(e.Details) > 0 {
		details = string(e.Details)
	}
	return []any{e.CorrelationID, e.Actor, e.Type, e.AgentID, details}
}

// auditStampsOf is admitSQL's $27-$28 for an admission's audit event: its HLC and trace id.
func auditStampsOf(e *store.Event) []any {
	if e == nil {
		return []any{"", ""}
	}
	return []any{e.HLC, e.TraceID}
}

// isDuplicateMessage reports whether err is the unique violation of a message_id that exists.
func isDuplicateMessage(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == uniqueViolation && pgErr.ConstraintName == "messages_pkey"
}

// uniqueViolation is PostgreSQL's SQLSTATE for unique_violation.
const uniqueViolation = "23505"

// claimSQL takes, per lane, the first $2 deliverable rows (locked; rows another claim holds
// are skipped), numbers each lane's rows, and orders them by weighted-round-robin round
// ((rank-1) / weight), then lane (PRIVILEGED first), then seq: in round r a lane of weight w
// contributes its rows r*w+1 .. (r+1)*w, and a lane that has run out simply contributes none.
// The first $2 of that order are leased. Leases and TTLs are judged by the database clock.
//
// nosync turns synchronous_commit off for the claim's own transaction: its commit does not
// wait for the WAL flush, which would otherwise put a disk flush between every admission and
// its delivery. A lease only keeps a row from being handed out twice while a stream holds it;
// should a crash of PostgreSQL forget the last leases, their rows are delivered again, as
// they are anyway when the stream reconnects (ReleaseLeases). The attempts counter may then
// be one short (see docs/messaging.md). A later synchronous commit, such as the row's
// confirmation, flushes the claim with it.
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
),
nosync AS (
	SELECT set_config('synchronous_commit', 'off', true) AS on_
)
UPDATE deliveries AS d
SET leased_until = now() + $3::bigint * interval '1 microsecond',
    attempts = d.attempts + 1
FROM pick
WHERE d.seq = pick.seq AND (SELECT on_ FROM nosync) IS NOT NULL
RETURNING d.seq, d.agent_id, d.envelope, d.enqueued_at, d.attempts, pick.rnd, pick.lane, d.traceparent`)

// Claim implements store.MessagePlane. FOR UPDATE SKIP LOCKED lets two streams (or
// frontends) claim concurrently without handing out the same row twice or waiting on each
// other.
func (m *messagePlane) Claim(ctx context.Context, req store.ClaimRequest) ([]store.Delivery, error) {
	if req.Limit <= 0 {
		return nil, nil
	}
	w := req.Weights.InLaneOrder()
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
		if err := row.Scan(&c.d.Seq, &c.d.AgentID, &envBytes, &c.d.EnqueuedAt, &c.d.Attempts, &c.rnd, &c.lane, &c.d.TraceParent); err != nil {
			return c, err
		}
		c.d.Lane = store.LaneClass(int(c.lane))
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
		// Same transaction as the update: streams (this process's too, see Subscribe) wake
		// only once the released rows are visible to them.
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, NotifyChannel, agentID)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: release leases of %q: %w", agentID, err)
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

// confirmBatchSQL confirms the listed rows that are still unconfirmed. lk locks them in seq
// order, so that two batches (from two frontends) sharing rows cannot deadlock, and in READ
// COMMITTED a row confirmed meanwhile is re-checked after the lock and left out. The commit
// does not wait for the WAL flush (nosync, as Claim): see store.MessagePlane.ConfirmBatch.
// Parameters: $1 seqs, $2 agent_ids, $3 message_ids (an empty one matches any).
const confirmBatchSQL = `
WITH
nosync AS (
	SELECT set_config('synchronous_commit', 'off', true) AS on_
),
r AS (
	SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[]) AS r(seq, agent_id, message_id)
),
lk AS (
	SELECT d.seq FROM deliveries AS d JOIN r ON d.seq = r.seq
	WHERE d.agent_id = r.agent_id AND (r.message_id = '' OR d.message_id = r.message_id) AND d.confirmed_at IS NULL
	ORDER BY d.seq
	FOR UPDATE OF d
)
UPDATE deliveries AS d SET confirmed_at = now(), leased_until = NULL
FROM lk
WHERE d.seq = lk.seq AND (SELECT on_ FROM nosync) IS NOT NULL`

// ConfirmBatch implements store.MessagePlane in one statement.
func (m *messagePlane) ConfirmBatch(ctx context.Context, rows []store.DeliveryRef) (int, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	seqs, agents, ids := make([]int64, len(rows)), make([]string, len(rows)), make([]string, len(rows))
	for i, r := range rows {
		seqs[i], agents[i], ids[i] = r.Seq, r.AgentID, r.MessageID
	}
	tag, err := m.s().pool.Exec(ctx, confirmBatchSQL, seqs, agents, ids)
	if err != nil {
		return 0, fmt.Errorf("postgres: confirm %d rows: %w", len(rows), err)
	}
	return int(tag.RowsAffected()), nil
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

// DataDepth implements store.MessagePlane: the rows admitted as counted (del's counted).
func (m *messagePlane) DataDepth(ctx context.Context, agentID string) (int, error) {
	var n int
	if err := m.s().pool.QueryRow(ctx, `
		SELECT count(*) FROM deliveries WHERE agent_id = $1 AND confirmed_at IS NULL AND counted`, agentID).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: data depth of %q: %w", agentID, err)
	}
	return n, nil
}

const messageColumns = `message_id, producer_id, recipient_id, correlation_id, message_type,
	state, error_code, note, envelope, created_at, updated_at, dedup_key, expires_at, dedup_producer, traceparent`

// advanceSQL builds Advance's write, a compare-and-set: upd applies the transition if the
// row's state is still $5, the state the caller's LegalFunc judged; ent updates the
// idempotency entry in the same statement when the transition concerns it (entSQL; empty when
// it does not); the final SELECT returns the updated row with applied = true or, when nothing
// was updated, the row as of the statement's snapshot with applied = false (no row: unknown
// message).
//
// The UPDATE is the atomic check-and-write: in READ COMMITTED it locks the row and, when a
// concurrent transaction changed it since the snapshot, re-evaluates the WHERE clause on the
// newest version (EvalPlanQual), so it never replaces a state other than the judged one. The
// entry's row lock is taken after the message's, as before. Parameters: $1 message_id, $2
// state, $3 error code, $4 note, $5 the expected current state.
func advanceSQL(entSQL string) string {
	return `
WITH upd AS (
	UPDATE messages SET state = $2, error_code = $3, note = $4, updated_at = now()
	WHERE message_id = $1 AND tracked AND state = $5
	RETURNING ` + messageColumns + `
)` + entSQL + `
SELECT true, ` + messageColumns + ` FROM upd
UNION ALL
SELECT false, ` + messageColumns + ` FROM messages
WHERE message_id = $1 AND tracked AND NOT EXISTS (SELECT 1 FROM upd)`
}

// The idempotency entry's part of a transition, a CTE following upd (the updated message row).
const (
	// entTimedOutSQL: TIMED_OUT of the entry's latest attempt makes the entry retrying.
	entTimedOutSQL = `,
ent AS (
	UPDATE idempotency_entries AS i SET status = 'retrying', updated_at = now()
	FROM upd
	WHERE upd.dedup_key <> '' AND i.producer_id = upd.dedup_producer AND i.key = upd.dedup_key
	  AND i.status <> 'terminal' AND i.latest_message_id = upd.message_id
)`
	// entCompletedSQL: a completion makes a not yet terminal entry terminal with this
	// message's outcome (the transition's note is the cached result).
	entCompletedSQL = `,
ent AS (
	UPDATE idempotency_entries AS i SET status = 'terminal', original_message_id = upd.message_id,
		terminal_state = upd.state, error_code = upd.error_code, result = upd.note,
		cached_at = now(), updated_at = now()
	FROM upd
	WHERE upd.dedup_key <> '' AND i.producer_id = upd.dedup_producer AND i.key = upd.dedup_key
	  AND i.status <> 'terminal'
)`
)

// entSQLFor returns the entry CTE a transition to the state needs ("" for none).
func entSQLFor(to commonpb.EnvelopeState) string {
	switch {
	case to == commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT:
		return entTimedOutSQL
	case store.IsCompletion(to):
		return entCompletedSQL
	}
	return ""
}

var (
	// advancePlainSQL: the transition does not concern the idempotency entry.
	advancePlainSQL = advanceSQL("")
	// advanceTimedOutSQL: TIMED_OUT of the entry's latest attempt makes the entry retrying.
	advanceTimedOutSQL = advanceSQL(entTimedOutSQL)
	// advanceCompletedSQL: a completion makes a not yet terminal entry terminal.
	advanceCompletedSQL = advanceSQL(entCompletedSQL)
)

// GetMessage implements store.MessagePlane.
func (m *messagePlane) GetMessage(ctx context.Context, messageID string) (store.MessageRecord, error) {
	rec, err := m.getMessage(ctx, messageID)
	if err != nil {
		return store.MessageRecord{}, fmt.Errorf("postgres: get message %q: %w", messageID, err)
	}
	return rec, nil
}

// OperationAttempts implements store.MessagePlane. It reads through messages_correlation_idx
// (a correlation_id is required of every message, §5.2) and keeps in SQL only the rows whose
// envelope bytes contain the token, which the token field of a matching envelope does; the
// decoded envelope then decides, since the bytes may also occur elsewhere in an envelope.
// Messages admitted around the idempotency cache have no dedup_key, so the envelope is the
// one place every attempt carries the token.
func (m *messagePlane) OperationAttempts(ctx context.Context, op store.Operation) ([]store.MessageRecord, error) {
	if !op.Valid() {
		return nil, nil
	}
	rows, err := m.s().pool.Query(ctx, `SELECT `+messageColumns+` FROM messages
		WHERE correlation_id = $1 AND producer_id = $2 AND tracked AND position($3::bytea IN envelope) > 0
		ORDER BY created_at, message_id COLLATE "C"`,
		op.CorrelationID, op.ProducerID, []byte(op.IdempotencyToken))
	if err != nil {
		return nil, fmt.Errorf("postgres: attempts of %s/%s: %w", op.ProducerID, op.IdempotencyToken, err)
	}
	recs, err := pgx.CollectRows(rows, scanMessage)
	if err != nil {
		return nil, fmt.Errorf("postgres: attempts of %s/%s: %w", op.ProducerID, op.IdempotencyToken, err)
	}
	out := recs[:0]
	for _, r := range recs {
		if r.Envelope.GetIdempotencyToken() == op.IdempotencyToken {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// getMessage reads a tracked message, or returns store.ErrNotFound.
func (m *messagePlane) getMessage(ctx context.Context, messageID string) (store.MessageRecord, error) {
	rows, err := m.s().pool.Query(ctx, `SELECT `+messageColumns+` FROM messages WHERE message_id = $1 AND tracked`, messageID)
	if err != nil {
		return store.MessageRecord{}, err
	}
	rec, err := pgx.CollectExactlyOneRow(rows, scanMessage)
	return rec, notFound(err)
}

// Advance implements store.MessagePlane in two round trips and no explicit transaction: it
// reads the record, asks legal about its current state (once, as a store that locked the row
// would), and applies the transition with advanceSQL, a compare-and-set on that state which
// updates the idempotency entry in the same statement. Should a concurrent transition change
// the row in between, the compare-and-set applies nothing and reports the row, and the
// decision is taken again on the newer state — so legal always judges the state the write
// replaces, and of several racing Advances only those legal from the state each one found
// apply, one at a time.
func (m *messagePlane) Advance(ctx context.Context, t store.Transition, legal store.LegalFunc) (store.MessageRecord, bool, error) {
	fail := func(err error) (store.MessageRecord, bool, error) {
		return store.MessageRecord{}, false, fmt.Errorf("postgres: advance %q to %s: %w", t.MessageID, t.To, notFound(err))
	}
	sql := advancePlainSQL
	switch {
	case t.To == commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT:
		sql = advanceTimedOutSQL
	case store.IsCompletion(t.To):
		sql = advanceCompletedSQL
	}
	rec, err := m.getMessage(ctx, t.MessageID)
	if err != nil {
		return fail(err)
	}
	for {
		if rec.State == t.To || legal == nil || !legal(rec.State, t.To) {
			return rec, false, nil
		}
		from := rec.State
		rows, err := m.s().pool.Query(ctx, sql, t.MessageID, int32(t.To), int32(t.ErrorCode), t.Note, int32(from))
		if err != nil {
			return fail(err)
		}
		var applied bool
		rec, err = pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (store.MessageRecord, error) {
			var ms messageScan
			if err := row.Scan(append([]any{&applied}, ms.dest()...)...); err != nil {
				return store.MessageRecord{}, err
			}
			return ms.record()
		})
		if err != nil {
			return fail(err)
		}
		if applied {
			return rec, true, nil
		}
		if rec.State == from {
			// The statement's snapshot still shows the judged state: the row was changed after
			// it, and the UPDATE's re-check found the newer version. Read that version.
			if rec, err = m.getMessage(ctx, t.MessageID); err != nil {
				return fail(err)
			}
		}
	}
}

// ---------------------------------------------------------------------------------------------
// Planned steps (AdvanceWith, ConfirmAndAdvance)

// stepSQL builds the write of AdvanceWith and ConfirmAndAdvance: one statement, so one round
// trip and one commit, that confirms the delivery row (when asked), applies the planned
// transition with the idempotency entry's update (entSQL, as Advance), and admits the step's
// follow-up — all of it, or nothing.
//
// lk locks the message row if its state is still the one plan saw ($5); row_ then locks the
// delivery row if it is still unconfirmed (message before delivery, the order Expire locks
// them in). In READ COMMITTED a row lock waits for a concurrent writer and re-checks the
// condition on the newest version, so ok_ tells whether everything the step was planned on
// still holds; conf and upd write only then. fmsg and fdel admit the follow-up as Admit admits
// untracked control traffic (a known message_id fails the statement on messages_pkey, which
// undoes all of it), ho writes the step's outbox entry (a data-modifying CTE runs
// whether or not the SELECT reads it), and the final SELECT notifies the follow-up's recipient (delivered at
// commit) and reports. Parameters:
//
//	$1 message_id  $2 to  $3 error code  $4 note  $5 the state plan saw  $6 apply the transition
//	$7 seq to confirm (0: none)  $8 its agent_id
//	$9 follow-up message_id ('': none)  $10 producer_id  $11 recipient_id  $12 correlation_id
//	$13 message_type  $14 envelope  $15 lane  $16 expires_at  $17 notify channel
//	$18 outbox entry id ('': none)  $19 kind  $20 workflow_id  $21 payload  $22 lease in seconds
//	$23 the follow-up's hand-over lease (µs; 0: none; see admitStatement's hand)
//	$24 the follow-up's traceparent
func stepSQL(entSQL string) string {
	return enumSQL(`
WITH
lk AS (
	SELECT message_id FROM messages
	WHERE message_id = $1 AND tracked AND state = $5
	FOR UPDATE
),
row_ AS (
	SELECT seq FROM deliveries
	WHERE $7::bigint > 0 AND seq = $7 AND agent_id = $8 AND message_id = $1 AND confirmed_at IS NULL
	  AND EXISTS (SELECT 1 FROM lk)
	FOR UPDATE
),
ok_ AS (
	SELECT EXISTS (SELECT 1 FROM lk) AND ($7::bigint = 0 OR EXISTS (SELECT 1 FROM row_)) AS ok
),
conf AS (
	UPDATE deliveries AS d SET confirmed_at = now(), leased_until = NULL
	FROM row_
	WHERE d.seq = row_.seq AND (SELECT ok FROM ok_)
	RETURNING d.seq, d.agent_id, d.envelope, d.enqueued_at, d.attempts
),
upd AS (
	UPDATE messages AS m SET state = $2, error_code = $3, note = $4, updated_at = now()
	FROM lk
	WHERE m.message_id = lk.message_id AND $6::boolean AND (SELECT ok FROM ok_)
	RETURNING ` + prefixed("m", messageColumns) + `
)` + entSQL + `,
fmsg AS (
	INSERT INTO messages (message_id, tracked, producer_id, recipient_id, correlation_id, message_type,
	                      state, error_code, note, envelope, expires_at, dedup_producer, dedup_key, traceparent)
	SELECT $9, false, $10, $11, $12, $13, {SENT}, 0, '', $14, $16, '', '', $24 FROM upd WHERE $9 <> ''
	RETURNING message_id
),
fhand AS (
	SELECT CASE WHEN $23::bigint > 0 AND NOT EXISTS (` + deliverableOf("$11") + `)
		THEN now() + $23::bigint * interval '1 microsecond' END AS until
),
fdel AS (
	INSERT INTO deliveries (agent_id, message_id, envelope, lane, expires_at, leased_until, attempts, traceparent)
	SELECT $11, $9, $14, $15, $16, fhand.until, CASE WHEN fhand.until IS NULL THEN 0 ELSE 1 END, $24
	FROM fmsg, fhand
	RETURNING seq, leased_until IS NOT NULL AS handed, enqueued_at
),
ho AS (
	INSERT INTO outbox (id, kind, workflow_id, payload, lease_until)
	SELECT $18, $19, $20, $21, now() + make_interval(secs => $22) FROM upd WHERE $18 <> ''
	ON CONFLICT (id) DO NOTHING
)
SELECT EXISTS (SELECT 1 FROM lk), c.seq IS NOT NULL, u.message_id IS NOT NULL,
	(SELECT seq FROM fdel), (SELECT handed FROM fdel), (SELECT enqueued_at FROM fdel),
	(SELECT pg_notify($17, $11)::text FROM fdel WHERE NOT fdel.handed),
	COALESCE(c.seq, 0), COALESCE(c.agent_id, ''), COALESCE(c.envelope, ''::bytea),
	COALESCE(c.enqueued_at, now()), COALESCE(c.attempts, 0),
	` + nullableColumns("u") + `
FROM (SELECT 1) AS one LEFT JOIN conf AS c ON true LEFT JOIN upd AS u ON true`)
}

var (
	stepPlainSQL     = stepSQL("")
	stepTimedOutSQL  = stepSQL(entTimedOutSQL)
	stepCompletedSQL = stepSQL(entCompletedSQL)
)

// nullableColumns selects messageColumns of an outer-joined alias that may be all NULL, with
// placeholders wherever a NULL would not scan (the caller ignores them then).
func nullableColumns(alias string) string {
	a := alias + "."
	return `COALESCE(` + a + `message_id, ''), COALESCE(` + a + `producer_id, ''), COALESCE(` + a + `recipient_id, ''),
	COALESCE(` + a + `correlation_id, ''), COALESCE(` + a + `message_type, 0), COALESCE(` + a + `state, 0),
	COALESCE(` + a + `error_code, 0), COALESCE(` + a + `note, ''), COALESCE(` + a + `envelope, ''::bytea),
	COALESCE(` + a + `created_at, now()), COALESCE(` + a + `updated_at, now()), COALESCE(` + a + `dedup_key, ''),
	` + a + `expires_at, COALESCE(` + a + `dedup_producer, ''), COALESCE(` + a + `traceparent, '')`
}

// stepOutcome is what one execution of stepSQL reported.
type stepOutcome struct {
	// unchanged: the message was still in the state plan saw (else nothing was written).
	unchanged bool
	// confirmed: the delivery row was confirmed; delivery is the row.
	confirmed bool
	delivery  store.Delivery
	// applied: the transition was applied; rec is the record after it.
	applied bool
	rec     store.MessageRecord
	// followSeq is the follow-up's delivery seq, 0 when none.
	followSeq int64
}

// writeStep runs stepSQL once for a step planned on state from (nil step: only the
// confirmation, still conditional on from) and, for seq > 0, the confirmation of (agentID, seq).
func (m *messagePlane) writeStep(ctx context.Context, messageID string, from commonpb.EnvelopeState, step *store.Step, seq int64, agentID string) (stepOutcome, error) {
	var (
		sql  = stepPlainSQL
		to   int32
		code int32
		note string
		f    store.AdmitRequest
		env  []byte
		h    store.OutboxEntry
	)
	if step != nil {
		if step.Outbox != nil {
			h = *step.Outbox
		}
		switch entSQLFor(step.To) {
		case entTimedOutSQL:
			sql = stepTimedOutSQL
		case entCompletedSQL:
			sql = stepCompletedSQL
		}
		to, code, note = int32(step.To), int32(step.ErrorCode), step.Note
		if step.FollowUp != nil {
			f = *step.FollowUp
			var err error
			if env, err = proto.Marshal(f.Envelope); err != nil {
				return stepOutcome{}, fmt.Errorf("marshal follow-up envelope: %w", err)
			}
		}
	}
	var (
		out      stepOutcome
		followID = f.Envelope.GetMessageId()
		fseq     *int64
		fhanded  *bool
		fat      *time.Time
		notified *string
		d        store.Delivery
		envBytes []byte
		ms       messageScan
	)
	var inbox *store.Inbox
	if followID != "" {
		inbox = m.s().hub.Inbox(f.RecipientID)
	}
	dest := append([]any{&out.unchanged, &out.confirmed, &out.applied, &fseq, &fhanded, &fat, &notified,
		&d.Seq, &d.AgentID, &envBytes, &d.EnqueuedAt, &d.Attempts}, ms.dest()...)
	args := []any{messageID, to, code, note, int32(from), step != nil, seq, agentID,
		followID, f.Envelope.GetProducerId(), f.RecipientID, f.Envelope.GetCorrelationId(), int32(f.Envelope.GetMessageType()),
		env, int16(store.LaneRank(f.Lane)), nullTime(f.ExpiresAt), NotifyChannel,
		h.ID, h.Kind, h.WorkflowID, payloadBytes(h.Payload), store.OutboxLease.Seconds(), handLease(inbox), f.TraceParent}
	// The step commits in a group with other writers' (group.go).
	err := m.s().groups.do(ctx, &groupMember{
		queue: func(b *pgx.Batch) { b.Queue(sql, args...) },
		read:  func(br pgx.BatchResults) error { return br.QueryRow().Scan(dest...) },
	})
	if isDuplicateMessage(err) {
		return stepOutcome{}, fmt.Errorf("follow-up %q: %w", followID, store.ErrDuplicateMessage)
	}
	if err != nil {
		return stepOutcome{}, err
	}
	if out.confirmed {
		if out.delivery, err = finishDelivery(d, envBytes); err != nil {
			return stepOutcome{}, err
		}
	}
	if out.applied {
		if out.rec, err = ms.record(); err != nil {
			return stepOutcome{}, err
		}
	}
	if fseq != nil {
		out.followSeq = *fseq
		if fhanded != nil && *fhanded {
			m.handOver(inbox, store.Delivery{Seq: *fseq, AgentID: f.RecipientID, Envelope: f.Envelope,
				EnqueuedAt: utc(*fat), Attempts: 1, Lane: store.LaneClass(store.LaneRank(f.Lane)), TraceParent: f.TraceParent})
		}
	}
	return out, nil
}

// AdvanceWith implements store.MessagePlane: a read, Plan (no transaction open), and the
// conditional write stepSQL — two round trips and one commit, or one when req.Known is right
// (no read); Plan runs again if the state changed in between.
func (m *messagePlane) AdvanceWith(ctx context.Context, req store.StepRequest) (store.StepResult, error) {
	fail := func(err error) (store.StepResult, error) {
		return store.StepResult{}, fmt.Errorf("postgres: advance %q: %w", req.MessageID, notFound(err))
	}
	var rec store.MessageRecord
	fromKnown := req.Known != nil && req.Known.MessageID == req.MessageID
	if fromKnown {
		rec = *req.Known
	} else {
		var err error
		if rec, err = m.getMessage(ctx, req.MessageID); err != nil {
			return fail(err)
		}
	}
	for {
		step, err := store.PlanStep(req.Plan, rec)
		if err != nil {
			return store.StepResult{}, err
		}
		if step == nil && !fromKnown {
			return store.StepResult{Record: rec}, nil
		}
		if step != nil {
			out, err := m.writeStep(ctx, req.MessageID, rec.State, step, 0, "")
			if err != nil {
				return fail(err)
			}
			if out.applied {
				return store.StepResult{Record: out.rec, Applied: true, FollowUpSeq: out.followSeq}, nil
			}
		}
		// Changed since Plan saw it, or no decision to take on the caller's record: plan
		// again on the stored one.
		fromKnown = false
		if rec, err = m.getMessage(ctx, req.MessageID); err != nil {
			return fail(err)
		}
	}
}

// peekSQL starts ConfirmAndAdvance: it confirms the row at once when its message is not
// tracked (control traffic: nothing to plan), and otherwise only reads the row and the
// message's record for plan. A row that is not in the buffer yields no result row; an empty
// $3 matches any message_id. Parameters: $1 seq, $2 agent_id, $3 message_id.
//
// The confirmation of control traffic commits without waiting for the WAL flush (nosync, as
// Claim): it changes no message's lifecycle, and should a crash of PostgreSQL forget it, the
// row — an ACK, a NACK or a notification, which agents already get again whenever a stream
// ends before its confirmation — is delivered once more. A later synchronous commit flushes
// it with it.
var peekSQL = `
WITH
d AS (
	SELECT seq, agent_id, envelope, enqueued_at, attempts, message_id FROM deliveries
	WHERE seq = $1 AND agent_id = $2 AND confirmed_at IS NULL AND ($3 = '' OR message_id = $3)
),
t AS (
	SELECT ` + messageColumns + ` FROM messages
	WHERE message_id = (SELECT message_id FROM d) AND tracked
),
nosync AS (
	SELECT set_config('synchronous_commit', 'off', true) AS on_
),
conf AS (
	UPDATE deliveries SET confirmed_at = now(), leased_until = NULL
	WHERE seq = $1 AND agent_id = $2 AND confirmed_at IS NULL AND ($3 = '' OR message_id = $3)
	  AND NOT EXISTS (SELECT 1 FROM t) AND (SELECT on_ FROM nosync) IS NOT NULL
	RETURNING seq
)
SELECT d.seq, d.agent_id, d.envelope, d.enqueued_at, d.attempts, d.message_id,
	EXISTS (SELECT 1 FROM conf), t.message_id IS NOT NULL,
	` + nullableColumns("t") + `
FROM d LEFT JOIN t ON true`

// ConfirmAndAdvance implements store.MessagePlane. A row of control traffic is confirmed by
// peekSQL alone (one round trip, as Confirm). For a tracked message: peekSQL reads, Plan runs
// (no transaction open), and stepSQL writes the confirmation, the transition and the
// follow-up in one statement — two round trips and one commit, or one when req.Known is right
// (no read); Plan runs again if the message's state changed in between.
func (m *messagePlane) ConfirmAndAdvance(ctx context.Context, req store.ConfirmRequest) (store.ConfirmResult, error) {
	fail := func(err error) (store.ConfirmResult, error) {
		return store.ConfirmResult{}, fmt.Errorf("postgres: confirm %s/%d: %w", req.AgentID, req.Seq, err)
	}
	known := req.Known
	if known != nil && (req.MessageID == "" || known.MessageID != req.MessageID) {
		known = nil
	}
	for {
		var rec store.MessageRecord
		fromKnown := known != nil
		if fromKnown {
			rec, known = *known, nil
		} else {
			var (
				d                  store.Delivery
				envBytes           []byte
				rowMessageID       string
				confirmed, tracked bool
				ms                 messageScan
			)
			dest := append([]any{&d.Seq, &d.AgentID, &envBytes, &d.EnqueuedAt, &d.Attempts, &rowMessageID, &confirmed, &tracked}, ms.dest()...)
			err := m.s().pool.QueryRow(ctx, peekSQL, req.Seq, req.AgentID, req.MessageID).Scan(dest...)
			if errors.Is(err, pgx.ErrNoRows) {
				return store.ConfirmResult{}, nil
			}
			if err != nil {
				return fail(err)
			}
			if confirmed {
				if d, err = finishDelivery(d, envBytes); err != nil {
					return fail(err)
				}
				return store.ConfirmResult{Delivery: d, Confirmed: true}, nil
			}
			if !tracked {
				return store.ConfirmResult{}, nil // confirmed by someone else meanwhile
			}
			if rec, err = ms.record(); err != nil {
				return fail(err)
			}
		}
		step, err := store.PlanStep(req.Plan, rec)
		if err != nil {
			return store.ConfirmResult{}, err
		}
		if step == nil && fromKnown {
			continue // decide on the stored record, not on the caller's
		}
		out, err := m.writeStep(ctx, rec.MessageID, rec.State, step, req.Seq, req.AgentID)
		if err != nil {
			return fail(err)
		}
		if !out.unchanged {
			continue // the message moved on since Plan saw it (or never was as known): plan again
		}
		if !out.confirmed {
			return store.ConfirmResult{}, nil // confirmed by someone else meanwhile
		}
		res := store.ConfirmResult{Delivery: out.delivery, Confirmed: true, Tracked: true, StepResult: store.StepResult{Record: rec}}
		if out.applied {
			res.StepResult = store.StepResult{Record: out.rec, Applied: true, FollowUpSeq: out.followSeq}
		}
		return res, nil
	}
}

// Attach implements store.MessagePlane. Rows are handed over by the statement that admits them
// (admitStatement's hand, stepSQL's fhand), and only to an inbox attached when that statement
// was prepared; one detached before the commit refuses the row (Inbox.Put), which is then
// released as the rows never taken are.
func (m *messagePlane) Attach(agentID string, lease time.Duration) (*store.Inbox, func()) {
	in := store.NewInbox(lease)
	detach := m.s().hub.Attach(agentID, in)
	return in, func() {
		if left := detach(); len(left) > 0 {
			m.releaseHanded(left...)
		}
	}
}

// handLease is the hand-over lease, in µs, that an admission to in's agent asks for: 0 (none)
// when nothing is attached.
func handLease(in *store.Inbox) int64 {
	if in == nil {
		return 0
	}
	return max(in.Lease.Microseconds(), 1)
}

// handOver puts a row its statement handed over, now durable, into in; a detached inbox
// refuses it, and the row is released for a claim.
func (m *messagePlane) handOver(in *store.Inbox, d store.Delivery) {
	// The stream owns what it is handed: the caller goes on with the envelope it admitted.
	d.Envelope = proto.Clone(d.Envelope).(*commonpb.Envelope)
	if !in.Put(d) {
		m.releaseHanded(d)
	}
}

// releaseHandedSQL makes rows handed over but never delivered deliverable again, undoing the
// attempt their hand-over counted, and wakes their agents' streams (at commit).
var releaseHandedSQL = `
WITH rel AS (
	UPDATE deliveries SET leased_until = NULL, attempts = greatest(attempts - 1, 0)
	WHERE seq = ANY($1::bigint[]) AND confirmed_at IS NULL AND leased_until IS NOT NULL
	RETURNING agent_id
)
SELECT count(pg_notify($2, a.agent_id)) FROM (SELECT DISTINCT agent_id FROM rel) AS a`

// releaseHanded releases rows handed to an inbox that no stream will read. It is best
// effort: should it fail, the rows are delivered when their lease runs out, or at once to
// the agent's next stream (ReleaseLeases).
func (m *messagePlane) releaseHanded(ds ...store.Delivery) {
	seqs := make([]int64, len(ds))
	for i, d := range ds {
		seqs[i] = d.Seq
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := m.s().pool.Exec(ctx, releaseHandedSQL, seqs, NotifyChannel); err != nil {
		slog.Default().Warn("postgres: release rows handed to a detached stream; they wait for their lease",
			"seqs", seqs, "error", err)
	}
}

// Subscribe implements store.MessagePlane. Wake-ups come through the LISTEN connection, from
// the notifications that Admit, ReleaseLeases and the follow-ups of AdvanceWith and
// ConfirmAndAdvance send at commit — this process's own as well as every other process's
// sharing the database. This process's writes do not also wake its subscribers directly: the
// notification would then wake each of them a second time, after the claim the first wake-up
// caused, and every admission would cost its consumer's stream a second, empty claim. The
// subscription also ends when ctx is done; the channel is never closed.
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
		&s.expiresAt, &s.dedupProducer, &s.r.TraceParent}
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
