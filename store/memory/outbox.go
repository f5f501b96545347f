package memory

import (
	"context"
	"slices"
	"time"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// outboxRow is one undelivered entry; order is its insertion number (oldest first).
type outboxRow struct {
	h       store.OutboxEntry
	order   int64
	leaseTo time.Time
}

// outbox implements store.Outbox over the Store's maps; it shares s.mu with the message plane
// and the registry, so an entry written with a step or a registration is written atomically
// with it.
type outbox Store

func (o *outbox) s() *Store { return (*Store)(o) }

// Outbox implements store.Store.
func (s *Store) Outbox() store.Outbox { return (*outbox)(s) }

// addOutboxLocked stores h leased for lease; the caller holds s.mu.
func (s *Store) addOutboxLocked(h store.OutboxEntry, lease time.Duration, at time.Time) {
	if _, ok := s.outbox[h.ID]; ok {
		return // written already (a retried write): keep the first
	}
	s.outboxOrder++
	h.CreatedAt, h.Payload = at, slices.Clone(h.Payload)
	s.outbox[h.ID] = &outboxRow{h: h, order: s.outboxOrder, leaseTo: at.Add(lease)}
}

// Add implements store.Outbox.
func (o *outbox) Add(ctx context.Context, hs []store.OutboxEntry, lease time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := o.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	at := now()
	for _, h := range hs {
		s.addOutboxLocked(h, lease, at)
	}
	return nil
}

// sortedOutbox returns the rows oldest first; the caller holds s.mu.
func (s *Store) sortedOutbox() []*outboxRow {
	rows := make([]*outboxRow, 0, len(s.outbox))
	for _, r := range s.outbox {
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b *outboxRow) int { return int(a.order - b.order) })
	return rows
}

func copyOutboxEntry(h store.OutboxEntry) store.OutboxEntry {
	h.Payload = slices.Clone(h.Payload)
	return h
}

// Claim implements store.Outbox.
func (o *outbox) Claim(ctx context.Context, lease time.Duration, limit int) ([]store.OutboxEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := o.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	at := now()
	var out []store.OutboxEntry
	for _, r := range s.sortedOutbox() {
		if len(out) >= limit {
			break
		}
		if r.leaseTo.After(at) {
			continue
		}
		r.leaseTo = at.Add(lease)
		out = append(out, copyOutboxEntry(r.h))
	}
	return out, nil
}

// Complete implements store.Outbox.
func (o *outbox) Complete(ctx context.Context, ids []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := o.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		delete(s.outbox, id)
	}
	return nil
}

// Retry implements store.Outbox.
func (o *outbox) Retry(ctx context.Context, id string, delay time.Duration, lastErr string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := o.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.outbox[id]; ok {
		r.h.Attempts++
		r.h.LastError = lastErr
		r.leaseTo = now().Add(delay)
	}
	return nil
}

// Pending implements store.Outbox.
func (o *outbox) Pending(ctx context.Context, limit int) ([]store.OutboxEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := o.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.OutboxEntry
	for _, r := range s.sortedOutbox() {
		if len(out) >= limit {
			break
		}
		out = append(out, copyOutboxEntry(r.h))
	}
	return out, nil
}
