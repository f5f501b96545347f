package memory

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

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

// dlqState is the in-memory dead-letter queue (§21.1). It has its own lock: nothing in it is
// read or written together with the message plane's state.
type dlqState struct {
	mu sync.Mutex
	// lastID is the last ID handed out; IDs start at 1 and are never reused.
	lastID int64
	// rows holds the entries in ID order.
	rows []*store.DLQEntry
	// byID and byMessage index rows.
	byID      map[int64]*store.DLQEntry
	byMessage map[string]*store.DLQEntry
}

func newDLQState() *dlqState {
	return &dlqState{byID: make(map[int64]*store.DLQEntry), byMessage: make(map[string]*store.DLQEntry)}
}

// PutDeadLetter implements store.DLQ. The store assigns ID and records the entry as not
// requeued whatever ID, RequeuedAt and RequeuedAs say; a zero FailedAt means now, a zero
// FirstSeenAt stays zero. MessageID is required and Class must be one of the store.DLQ*
// classes. A PayloadExcerpt longer than 256 bytes is cut to its first 256; Attempts are
// bounded by store.BoundAttempts.
func (d *dlqState) PutDeadLetter(ctx context.Context, e store.DLQEntry) (store.DLQEntry, error) {
	if err := ctx.Err(); err != nil {
		return store.DLQEntry{}, err
	}
	if err := store.CheckDeadLetter(e); err != nil {
		return store.DLQEntry{}, fmt.Errorf("memory: put dead letter: %w", err)
	}
	row := copyDeadLetter(&e)
	row.ID = 0
	row.RequeuedAt, row.RequeuedAs = time.Time{}, ""
	if len(row.PayloadExcerpt) > maxDLQExcerpt {
		row.PayloadExcerpt = row.PayloadExcerpt[:maxDLQExcerpt:maxDLQExcerpt]
	}
	var dropped int
	row.Attempts, dropped = store.BoundAttempts(row.Attempts)
	row.AttemptsDropped += dropped
	for i := range row.Attempts {
		row.Attempts[i].At = normTime(row.Attempts[i].At)
		row.Attempts[i].UpdatedAt = normTime(row.Attempts[i].UpdatedAt)
	}
	row.FirstSeenAt = normTime(row.FirstSeenAt)
	row.FailedAt = normTime(row.FailedAt)
	if row.FailedAt.IsZero() {
		row.FailedAt = now()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.byMessage[row.MessageID]; ok {
		return copyDeadLetter(old), nil // a retried sweep: the first entry stands
	}
	d.lastID++
	row.ID = d.lastID
	d.rows = append(d.rows, &row)
	d.byID[row.ID] = &row
	d.byMessage[row.MessageID] = &row
	return copyDeadLetter(&row), nil
}

// GetDeadLetter implements store.DLQ.
func (d *dlqState) GetDeadLetter(ctx context.Context, id int64) (store.DLQEntry, error) {
	if err := ctx.Err(); err != nil {
		return store.DLQEntry{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	row, ok := d.byID[id]
	if !ok {
		return store.DLQEntry{}, fmt.Errorf("memory: dead letter %d: %w", id, store.ErrNotFound)
	}
	return copyDeadLetter(row), nil
}

// ListDeadLetters implements store.DLQ: matching entries in ID order, the newest Limit of them.
func (d *dlqState) ListDeadLetters(ctx context.Context, f store.DLQFilter) ([]store.DLQEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit <= 0 {
		limit = defaultDLQLimit
	}
	// Bounds compare at the stored (microsecond) precision, as PostgreSQL does.
	f.Since, f.Until = normTime(f.Since), normTime(f.Until)
	d.mu.Lock()
	defer d.mu.Unlock()
	// Walk from the newest so only the entries returned are copied.
	var out []store.DLQEntry
	for i := len(d.rows) - 1; i >= 0 && len(out) < limit; i-- {
		if row := d.rows[i]; dlqMatches(row, f) {
			out = append(out, copyDeadLetter(row))
		}
	}
	slices.Reverse(out)
	return out, nil
}

// MarkRequeued implements store.DLQ. newMessageID is required; a zero at means now.
func (d *dlqState) MarkRequeued(ctx context.Context, id int64, newMessageID string, at time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if newMessageID == "" {
		return fmt.Errorf("memory: requeue dead letter %d: the new message_id is required", id)
	}
	at = normTime(at)
	if at.IsZero() {
		at = now()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	row, ok := d.byID[id]
	if !ok {
		return fmt.Errorf("memory: requeue dead letter %d: %w", id, store.ErrNotFound)
	}
	if !row.RequeuedAt.IsZero() {
		return fmt.Errorf("memory: requeue dead letter %d (requeued as %s): %w", id, row.RequeuedAs, store.ErrAlreadyRequeued)
	}
	row.RequeuedAt = at
	row.RequeuedAs = newMessageID
	return nil
}

// PurgeDeadLetters implements store.DLQ: entries with FailedAt before cutoff are deleted.
func (d *dlqState) PurgeDeadLetters(ctx context.Context, cutoff time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	cutoff = normTime(cutoff)
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	d.rows = slices.DeleteFunc(d.rows, func(row *store.DLQEntry) bool {
		if !row.FailedAt.Before(cutoff) {
			return false
		}
		delete(d.byID, row.ID)
		delete(d.byMessage, row.MessageID)
		n++
		return true
	})
	return n, nil
}

// dlqMatches applies a DLQFilter to one entry.
func dlqMatches(row *store.DLQEntry, f store.DLQFilter) bool {
	switch {
	case !f.Since.IsZero() && row.FailedAt.Before(f.Since),
		!f.Until.IsZero() && !row.FailedAt.Before(f.Until),
		f.Class != "" && row.Class != f.Class,
		f.ErrorCode != commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED && row.ErrorCode != f.ErrorCode,
		f.RecipientID != "" && row.RecipientID != f.RecipientID,
		f.ProducerID != "" && row.ProducerID != f.ProducerID,
		f.CorrelationID != "" && row.CorrelationID != f.CorrelationID,
		f.IdempotencyToken != "" && row.IdempotencyToken != f.IdempotencyToken,
		!f.IncludeRequeued && !row.RequeuedAt.IsZero():
		return false
	}
	return true
}

// copyDeadLetter returns a copy of an entry that shares no memory with it.
func copyDeadLetter(row *store.DLQEntry) store.DLQEntry {
	out := *row
	if row.Envelope != nil {
		out.Envelope = proto.Clone(row.Envelope).(*commonpb.Envelope)
	}
	if len(row.Attempts) > 0 {
		out.Attempts = slices.Clone(row.Attempts)
	} else {
		out.Attempts = nil
	}
	out.PayloadExcerpt = cloneBytes(row.PayloadExcerpt)
	return out
}
