package memory

import (
	"context"
	"slices"
	"time"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// handoffRow is one undelivered handoff; order is its insertion number (oldest first).
type handoffRow struct {
	h       store.Handoff
	order   int64
	leaseTo time.Time
}

// outbox implements store.Outbox over the Store's maps; it shares s.mu with the message plane
// and the registry, so a handoff written with a step or a registration is written atomically
// with it.
type outbox Store

func (o *outbox) s() *Store { return (*Store)(o) }

// Outbox implements store.Store.
func (s *Store) Outbox() store.Outbox { return (*outbox)(s) }

// addHandoffLocked stores h leased for lease; the caller holds s.mu.
func (s *Store) addHandoffLocked(h store.Handoff, lease time.Duration, at time.Time) {
	if _, ok := s.handoffs[h.ID]; ok {
		return // written already (a retried write): keep the first
	}
	s.handoffOrder++
	h.CreatedAt, h.Payload = at, slices.Clone(h.Payload)
	s.handoffs[h.ID] = &handoffRow{h: h, order: s.handoffOrder, leaseTo: at.Add(lease)}
}

// AddHandoffs implements store.Outbox.
func (o *outbox) AddHandoffs(ctx context.Context, hs []store.Handoff, lease time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := o.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	at := now()
	for _, h := range hs {
		s.addHandoffLocked(h, lease, at)
	}
	return nil
}

// sortedHandoffs returns the rows oldest first; the caller holds s.mu.
func (s *Store) sortedHandoffs() []*handoffRow {
	rows := make([]*handoffRow, 0, len(s.handoffs))
	for _, r := range s.handoffs {
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b *handoffRow) int { return int(a.order - b.order) })
	return rows
}

func copyHandoff(h store.Handoff) store.Handoff {
	h.Payload = slices.Clone(h.Payload)
	return h
}

// ClaimHandoffs implements store.Outbox.
func (o *outbox) ClaimHandoffs(ctx context.Context, lease time.Duration, limit int) ([]store.Handoff, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := o.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	at := now()
	var out []store.Handoff
	for _, r := range s.sortedHandoffs() {
		if len(out) >= limit {
			break
		}
		if r.leaseTo.After(at) {
			continue
		}
		r.leaseTo = at.Add(lease)
		out = append(out, copyHandoff(r.h))
	}
	return out, nil
}

// CompleteHandoffs implements store.Outbox.
func (o *outbox) CompleteHandoffs(ctx context.Context, ids []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := o.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		delete(s.handoffs, id)
	}
	return nil
}

// RetryHandoff implements store.Outbox.
func (o *outbox) RetryHandoff(ctx context.Context, id string, delay time.Duration, lastErr string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := o.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.handoffs[id]; ok {
		r.h.Attempts++
		r.h.LastError = lastErr
		r.leaseTo = now().Add(delay)
	}
	return nil
}

// PendingHandoffs implements store.Outbox.
func (o *outbox) PendingHandoffs(ctx context.Context, limit int) ([]store.Handoff, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := o.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Handoff
	for _, r := range s.sortedHandoffs() {
		if len(out) >= limit {
			break
		}
		out = append(out, copyHandoff(r.h))
	}
	return out, nil
}
