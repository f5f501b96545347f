package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// defaultDLQLimit is the ListDeadLetters limit used when DLQFilter.Limit is zero (see
// store.DLQFilter).
const defaultDLQLimit = 1000

// maxDLQExcerpt bounds DLQEntry.PayloadExcerpt (store.DLQEntry: at most 256 bytes); a longer
// excerpt is cut to its first maxDLQExcerpt bytes.
const maxDLQExcerpt = 256

// dlq is the PostgreSQL dead-letter queue (§21.1), table dead_letters.
type dlq Store

func (d *dlq) s() *Store { return (*Store)(d) }

// DLQ returns the dead-letter queue.
func (s *Store) DLQ() store.DLQ { return (*dlq)(s) }

// dlqColumns reads attempts as text, so the JSON is decoded here, not by pgx.
const dlqColumns = `id, message_id, producer_id, recipient_id, correlation_id, idempotency_token,
	error_code, class, reason, attempts::text AS attempts, attempts_dropped, envelope, payload_size,
	content_type, payload_excerpt, first_seen_at, failed_at, requeued_at, requeued_as`

// PutDeadLetter implements store.DLQ. The store assigns ID and records the entry as not
// requeued whatever ID, RequeuedAt and RequeuedAs say; a zero FailedAt means the database
// clock's now, a zero FirstSeenAt stays zero. MessageID is required and Class must be one of
// the store.DLQ* classes. A PayloadExcerpt longer than 256 bytes is cut to its first 256;
// Attempts are bounded by store.BoundAttempts.
func (d *dlq) PutDeadLetter(ctx context.Context, e store.DLQEntry) (store.DLQEntry, error) {
	if err := store.CheckDeadLetter(e); err != nil {
		return store.DLQEntry{}, fmt.Errorf("postgres: put dead letter: %w", err)
	}
	var envBytes []byte
	if e.Envelope != nil {
		b, err := proto.Marshal(e.Envelope)
		if err != nil {
			return store.DLQEntry{}, fmt.Errorf("postgres: put dead letter %q: marshal envelope: %w", e.MessageID, err)
		}
		// An empty envelope is still an envelope: store empty bytes, not NULL.
		envBytes = append([]byte{}, b...)
	}
	kept, dropped := store.BoundAttempts(e.Attempts)
	attempts, err := marshalAttempts(kept)
	if err != nil {
		return store.DLQEntry{}, fmt.Errorf("postgres: put dead letter %q: %w", e.MessageID, err)
	}
	excerpt := e.PayloadExcerpt
	if len(excerpt) > maxDLQExcerpt {
		excerpt = excerpt[:maxDLQExcerpt]
	}
	// On a conflict the no-op update makes RETURNING yield the row that was there, unchanged,
	// in the same statement: concurrent puts of one message_id all get the same entry.
	rows, err := d.s().pool.Query(ctx, `
		INSERT INTO dead_letters (message_id, producer_id, recipient_id, correlation_id,
			idempotency_token, error_code, class, reason, attempts, attempts_dropped, envelope,
			payload_size, content_type, payload_excerpt, first_seen_at, failed_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $16, $10, $11, $12, $13, $14, COALESCE($15, now()))
		ON CONFLICT ON CONSTRAINT dead_letters_message_id_key DO UPDATE SET message_id = dead_letters.message_id
		RETURNING `+dlqColumns,
		e.MessageID, e.ProducerID, e.RecipientID, e.CorrelationID, e.IdempotencyToken, int32(e.ErrorCode),
		e.Class, e.Reason, attempts, envBytes, int64(e.PayloadSize), e.ContentType, nullBytes(excerpt),
		nullTime(e.FirstSeenAt), nullTime(e.FailedAt), e.AttemptsDropped+dropped)
	if err != nil {
		return store.DLQEntry{}, fmt.Errorf("postgres: put dead letter %q: %w", e.MessageID, err)
	}
	out, err := pgx.CollectExactlyOneRow(rows, scanDeadLetter)
	if err != nil {
		return store.DLQEntry{}, fmt.Errorf("postgres: put dead letter %q: %w", e.MessageID, err)
	}
	return out, nil
}

// GetDeadLetter implements store.DLQ.
func (d *dlq) GetDeadLetter(ctx context.Context, id int64) (store.DLQEntry, error) {
	rows, err := d.s().pool.Query(ctx, `SELECT `+dlqColumns+` FROM dead_letters WHERE id = $1`, id)
	if err != nil {
		return store.DLQEntry{}, fmt.Errorf("postgres: get dead letter %d: %w", id, err)
	}
	e, err := pgx.CollectExactlyOneRow(rows, scanDeadLetter)
	if err != nil {
		return store.DLQEntry{}, fmt.Errorf("postgres: get dead letter %d: %w", id, notFound(err))
	}
	return e, nil
}

// ListDeadLetters implements store.DLQ: matching entries in ID order, the newest Limit of them.
func (d *dlq) ListDeadLetters(ctx context.Context, f store.DLQFilter) ([]store.DLQEntry, error) {
	var q listQuery
	if !f.Since.IsZero() {
		q.add("failed_at >= ?", f.Since)
	}
	if !f.Until.IsZero() {
		q.add("failed_at < ?", f.Until)
	}
	if f.Class != "" {
		q.add("class = ?", f.Class)
	}
	if f.ErrorCode != commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
		q.add("error_code = ?", int32(f.ErrorCode))
	}
	if f.RecipientID != "" {
		q.add("recipient_id = ?", f.RecipientID)
	}
	if f.ProducerID != "" {
		q.add("producer_id = ?", f.ProducerID)
	}
	if f.CorrelationID != "" {
		q.add("correlation_id = ?", f.CorrelationID)
	}
	if f.IdempotencyToken != "" {
		q.add("idempotency_token = ?", f.IdempotencyToken)
	}
	if !f.IncludeRequeued {
		q.addConst("requeued_at IS NULL")
	}
	limit := q.limit(f.Limit, defaultDLQLimit)
	// The inner query picks the newest matches, the outer one restores oldest-first order.
	rows, err := d.s().pool.Query(ctx, `
		SELECT * FROM (
			SELECT `+dlqColumns+` FROM dead_letters `+q.where()+`
			ORDER BY id DESC
			LIMIT `+limit+`
		) AS newest ORDER BY id`, q.args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list dead letters: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return nil, fmt.Errorf("postgres: list dead letters: %w", err)
	}
	return out, nil
}

// MarkRequeued implements store.DLQ. newMessageID is required; a zero at means the database
// clock's now. The update only applies to a row not requeued yet: under concurrent calls the
// row lock makes every caller but the first see it requeued, so exactly one wins.
func (d *dlq) MarkRequeued(ctx context.Context, id int64, newMessageID string, at time.Time) error {
	if newMessageID == "" {
		return fmt.Errorf("postgres: requeue dead letter %d: the new message_id is required", id)
	}
	tag, err := d.s().pool.Exec(ctx, `
		UPDATE dead_letters SET requeued_at = COALESCE($3, now()), requeued_as = $2
		WHERE id = $1 AND requeued_at IS NULL`,
		id, newMessageID, nullTime(at))
	if err != nil {
		return fmt.Errorf("postgres: requeue dead letter %d: %w", id, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	// Nothing updated: the entry is unknown or was requeued (which is never undone).
	var (
		requeuedAs string
		requeuedAt *time.Time
	)
	err = d.s().pool.QueryRow(ctx, `SELECT requeued_as, requeued_at FROM dead_letters WHERE id = $1`, id).
		Scan(&requeuedAs, &requeuedAt)
	if err != nil {
		return fmt.Errorf("postgres: requeue dead letter %d: %w", id, notFound(err))
	}
	if requeuedAt == nil {
		// The row did not exist when the update ran: it was inserted since.
		return fmt.Errorf("postgres: requeue dead letter %d: %w", id, store.ErrNotFound)
	}
	return fmt.Errorf("postgres: requeue dead letter %d (requeued as %s): %w", id, requeuedAs, store.ErrAlreadyRequeued)
}

// PurgeDeadLetters implements store.DLQ: entries with FailedAt before cutoff are deleted.
func (d *dlq) PurgeDeadLetters(ctx context.Context, cutoff time.Time) (int, error) {
	tag, err := d.s().pool.Exec(ctx, `DELETE FROM dead_letters WHERE failed_at < $1`, cutoff)
	if err != nil {
		return 0, fmt.Errorf("postgres: purge dead letters: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// scanDeadLetter reads dlqColumns.
func scanDeadLetter(row pgx.CollectableRow) (store.DLQEntry, error) {
	var (
		e                                 store.DLQEntry
		errCode                           int32
		payloadSize                       int64
		attempts                          *string
		envBytes, excerpt                 []byte
		firstSeenAt, failedAt, requeuedAt *time.Time
	)
	if err := row.Scan(&e.ID, &e.MessageID, &e.ProducerID, &e.RecipientID, &e.CorrelationID, &e.IdempotencyToken,
		&errCode, &e.Class, &e.Reason, &attempts, &e.AttemptsDropped, &envBytes, &payloadSize, &e.ContentType,
		&excerpt, &firstSeenAt, &failedAt, &requeuedAt, &e.RequeuedAs); err != nil {
		return store.DLQEntry{}, err
	}
	e.ErrorCode = commonpb.ErrorCode(errCode)
	e.PayloadSize = int(payloadSize)
	if attempts != nil && *attempts != "" {
		if err := json.Unmarshal([]byte(*attempts), &e.Attempts); err != nil {
			return store.DLQEntry{}, fmt.Errorf("unmarshal attempts of dead letter %d: %w", e.ID, err)
		}
		if len(e.Attempts) == 0 {
			e.Attempts = nil
		}
		for i := range e.Attempts {
			e.Attempts[i].At = utc(e.Attempts[i].At)
			e.Attempts[i].UpdatedAt = utc(e.Attempts[i].UpdatedAt)
		}
	}
	if envBytes != nil {
		env := &commonpb.Envelope{}
		if err := proto.Unmarshal(envBytes, env); err != nil {
			return store.DLQEntry{}, fmt.Errorf("unmarshal envelope of dead letter %d: %w", e.ID, err)
		}
		e.Envelope = env
	}
	e.PayloadExcerpt = cloneBytes(excerpt)
	if firstSeenAt != nil {
		e.FirstSeenAt = firstSeenAt.UTC()
	}
	if failedAt != nil {
		e.FailedAt = failedAt.UTC()
	}
	if requeuedAt != nil {
		e.RequeuedAt = requeuedAt.UTC()
	}
	return e, nil
}

// marshalAttempts encodes the attempt history for the json column (nil for NULL) with every
// time in UTC at the column types' microsecond precision, as the timestamps read back.
func marshalAttempts(attempts []store.DLQAttempt) (*string, error) {
	if len(attempts) == 0 {
		return nil, nil
	}
	norm := make([]store.DLQAttempt, len(attempts))
	for i, a := range attempts {
		if !a.At.IsZero() {
			a.At = a.At.UTC().Truncate(time.Microsecond)
		}
		if !a.UpdatedAt.IsZero() {
			a.UpdatedAt = a.UpdatedAt.UTC().Truncate(time.Microsecond)
		}
		norm[i] = a
	}
	b, err := json.Marshal(norm)
	if err != nil {
		return nil, fmt.Errorf("marshal attempts: %w", err)
	}
	s := string(b)
	return &s, nil
}
