package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

type messagePlane Store

func (m *messagePlane) s() *Store { return (*Store)(m) }

const (
	stateSent     = int32(commonpb.EnvelopeState_ENVELOPE_STATE_SENT)
	stateRejected = int32(commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED)
	codeBufFull   = int32(commonpb.ErrorCode_BUFFER_FULL)
)

const insertMessageSQL = `
INSERT INTO messages (message_id, tracked, producer_id, recipient_id, correlation_id, message_type,
                      state, error_code, note, envelope)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (message_id) DO NOTHING`

// Admit implements store.MessagePlane.
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
	s := m.s()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("postgres: admit %q: begin: %w", id, err)
	}
	defer rollback(tx)

	if req.Capacity > 0 {
		// Serialize capacity-limited admissions to this recipient across every connection and
		// process: without the lock, N concurrent transactions would each count Capacity-1
		// rows and all insert. The lock is transaction-scoped, released at commit, after our
		// row is visible, so the next holder's count (a new READ COMMITTED snapshot) sees it.
		// Two recipients whose ids share a hash merely serialize; correctness is unaffected.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, recipientLockClass, req.RecipientID); err != nil {
			return 0, fmt.Errorf("postgres: admit %q: lock recipient %q: %w", id, req.RecipientID, err)
		}
		var depth int
		// Counting at most Capacity rows keeps the check cheap however deep the buffer is.
		if err := tx.QueryRow(ctx, `
			SELECT count(*) FROM (
				SELECT 1 FROM deliveries WHERE agent_id = $1 AND confirmed_at IS NULL LIMIT $2
			) AS pending`, req.RecipientID, req.Capacity).Scan(&depth); err != nil {
			return 0, fmt.Errorf("postgres: admit %q: count buffer of %q: %w", id, req.RecipientID, err)
		}
		if depth >= req.Capacity {
			return 0, m.reject(ctx, tx, req, envBytes)
		}
	}

	tag, err := tx.Exec(ctx, insertMessageSQL, id, req.Track, env.GetProducerId(), req.RecipientID,
		env.GetCorrelationId(), int32(env.GetMessageType()), stateSent, int32(0), "", envBytes)
	if err != nil {
		return 0, fmt.Errorf("postgres: admit %q: insert message: %w", id, err)
	}
	// The primary key is the duplicate detector: a concurrent admit of the same id waits for
	// our commit and then finds the conflict, so exactly one of them wins.
	if tag.RowsAffected() == 0 {
		return 0, fmt.Errorf("postgres: admit %q: %w", id, store.ErrDuplicateMessage)
	}
	var seq int64
	if err := tx.QueryRow(ctx, `
		INSERT INTO deliveries (agent_id, message_id, envelope) VALUES ($1, $2, $3) RETURNING seq`,
		req.RecipientID, id, envBytes).Scan(&seq); err != nil {
		return 0, fmt.Errorf("postgres: admit %q: insert delivery: %w", id, err)
	}
	// NOTIFY inside the transaction is delivered only if and when it commits, so no listener
	// ever wakes for a row it cannot see yet.
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, NotifyChannel, req.RecipientID); err != nil {
		return 0, fmt.Errorf("postgres: admit %q: notify: %w", id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("postgres: admit %q: commit: %w", id, err)
	}
	// Local subscribers are woken at once as well, without waiting for the round trip through
	// the listener connection (the hub coalesces the second wake-up).
	s.hub.Wake(req.RecipientID)
	return seq, nil
}

// reject finishes an admission that found the buffer full: it records the message as
// REJECTED/BUFFER_FULL when tracked (§13: never a silent drop) and returns ErrBufferFull, or
// ErrDuplicateMessage when the id is already known, in which case nothing changes.
func (m *messagePlane) reject(ctx context.Context, tx pgx.Tx, req store.AdmitRequest, envBytes []byte) error {
	env := req.Envelope
	id := env.GetMessageId()
	if !req.Track {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM messages WHERE message_id = $1)`, id).Scan(&exists); err != nil {
			return fmt.Errorf("postgres: admit %q: check duplicate: %w", id, err)
		}
		if exists {
			return fmt.Errorf("postgres: admit %q: %w", id, store.ErrDuplicateMessage)
		}
		return fmt.Errorf("postgres: admit %q to %q: %w", id, req.RecipientID, store.ErrBufferFull)
	}
	note := fmt.Sprintf("inbound buffer of %s is full (capacity %d)", req.RecipientID, req.Capacity)
	tag, err := tx.Exec(ctx, insertMessageSQL, id, true, env.GetProducerId(), req.RecipientID,
		env.GetCorrelationId(), int32(env.GetMessageType()), stateRejected, codeBufFull, note, envBytes)
	if err != nil {
		return fmt.Errorf("postgres: admit %q: record rejection: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: admit %q: %w", id, store.ErrDuplicateMessage)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: admit %q: commit rejection: %w", id, err)
	}
	return fmt.Errorf("postgres: admit %q to %q: %w", id, req.RecipientID, store.ErrBufferFull)
}

// Claim implements store.MessagePlane.
func (m *messagePlane) Claim(ctx context.Context, agentID string, limit int, lease time.Duration) ([]store.Delivery, error) {
	if limit <= 0 {
		return nil, nil
	}
	// FOR UPDATE SKIP LOCKED lets two streams (or frontends) claim concurrently without
	// handing out the same row twice or waiting on each other. Lease expiry is judged by the
	// database clock (now()), so frontends with skewed clocks still agree.
	rows, err := m.s().pool.Query(ctx, `
		WITH due AS (
			SELECT seq FROM deliveries
			WHERE agent_id = $1 AND confirmed_at IS NULL
			  AND (leased_until IS NULL OR leased_until <= now())
			ORDER BY seq
			LIMIT $2
			FOR UPDATE SKIP LOCKED
		)
		UPDATE deliveries AS d
		SET leased_until = now() + $3::bigint * interval '1 microsecond',
		    attempts = d.attempts + 1
		FROM due
		WHERE d.seq = due.seq
		RETURNING d.seq, d.agent_id, d.envelope, d.enqueued_at, d.attempts`,
		agentID, limit, lease.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("postgres: claim for %q: %w", agentID, err)
	}
	out, err := pgx.CollectRows(rows, scanDelivery)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim for %q: %w", agentID, err)
	}
	// UPDATE ... RETURNING does not preserve the CTE's order.
	sortDeliveries(out)
	return out, nil
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
	state, error_code, note, envelope, created_at, updated_at`

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
		rows, err = tx.Query(ctx, `
			UPDATE messages SET state = $2, error_code = $3, note = $4, updated_at = now()
			WHERE message_id = $1
			RETURNING `+messageColumns, t.MessageID, int32(t.To), int32(t.ErrorCode), t.Note)
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
	var (
		r                       store.MessageRecord
		msgType, state, errCode int32
		envBytes                []byte
	)
	if err := row.Scan(&r.MessageID, &r.ProducerID, &r.RecipientID, &r.CorrelationID, &msgType,
		&state, &errCode, &r.Note, &envBytes, &r.CreatedAt, &r.UpdatedAt); err != nil {
		return store.MessageRecord{}, err
	}
	env := &commonpb.Envelope{}
	if err := proto.Unmarshal(envBytes, env); err != nil {
		return store.MessageRecord{}, fmt.Errorf("unmarshal envelope of %q: %w", r.MessageID, err)
	}
	r.MessageType = commonpb.MessageType(msgType)
	r.State = commonpb.EnvelopeState(state)
	r.ErrorCode = commonpb.ErrorCode(errCode)
	r.Envelope = env
	r.CreatedAt = utc(r.CreatedAt)
	r.UpdatedAt = utc(r.UpdatedAt)
	return r, nil
}

// notFound maps pgx.ErrNoRows to store.ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}

func sortDeliveries(ds []store.Delivery) {
	slices.SortFunc(ds, func(a, b store.Delivery) int { return cmp.Compare(a.Seq, b.Seq) })
}
