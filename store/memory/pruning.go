package memory

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// retention implements store.Retention over the Store's maps, under s.mu.
type retention Store

func (r *retention) s() *Store { return (*Store)(r) }

// Retention implements store.Store.
func (s *Store) Retention() store.Retention { return (*retention)(s) }

// prune deletes, under s.mu, the oldest at most limit of the candidates (key → its time)
// that are before cutoff, by calling del on each, then calls after (if any) when it deleted
// some, and returns how many it deleted.
func prune[K comparable](ctx context.Context, r *retention, cutoff time.Time, limit int,
	candidates func(yield func(K, time.Time)), del func(K), after func()) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	cutoff = normTime(cutoff)
	s := r.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	type cand struct {
		k  K
		at time.Time
	}
	var cs []cand
	candidates(func(k K, at time.Time) {
		if at.Before(cutoff) {
			cs = append(cs, cand{k, at})
		}
	})
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].at.Before(cs[j].at) })
	if limit > 0 && len(cs) > limit {
		cs = cs[:limit]
	}
	for _, c := range cs {
		del(c.k)
	}
	if len(cs) > 0 && after != nil {
		after()
	}
	return len(cs), nil
}

// PruneAudit implements store.Retention.
func (r *retention) PruneAudit(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	s := r.s()
	gone := map[int64]bool{}
	return prune(ctx, r, cutoff, limit, func(yield func(int64, time.Time)) {
		for _, e := range s.events {
			yield(e.ID, e.Time)
		}
	}, func(id int64) { gone[id] = true }, func() {
		s.events = slices.DeleteFunc(s.events, func(e store.Event) bool { return gone[e.ID] })
	})
}

// PruneDeadLetters implements store.Retention over the DLQ's own state and lock; its rows are
// in ID order, which is the order they failed in but for clock skew between frontends.
func (r *retention) PruneDeadLetters(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	cutoff = normTime(cutoff)
	d := r.s().dlq
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	d.rows = slices.DeleteFunc(d.rows, func(row *store.DLQEntry) bool {
		if n >= limit || !row.FailedAt.Before(cutoff) {
			return false
		}
		delete(d.byID, row.ID)
		delete(d.byMessage, row.MessageID)
		n++
		return true
	})
	return n, nil
}

// PruneMessages implements store.Retention.
func (r *retention) PruneMessages(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	s := r.s()
	return prune(ctx, r, cutoff, limit, func(yield func(string, time.Time)) {
		for id, m := range s.messages {
			if m.tracked && !protocol.MessageStateTerminal(m.state) {
				continue
			}
			if d, ok := s.deliveries[m.seq]; ok && d.confirmedAt.IsZero() {
				continue // still in its recipient's buffer
			}
			if _, ok := s.responses[id]; ok {
				continue // a response to it is still awaited
			}
			yield(id, m.updatedAt)
		}
	}, func(id string) { delete(s.messages, id) }, nil)
}

// openHandoff reports whether a handoff status is PENDING or ACCEPTED.
func openHandoff(st handoffpb.HandoffStatus) bool {
	return st == handoffpb.HandoffStatus_PENDING || st == handoffpb.HandoffStatus_ACCEPTED
}

// PruneHandoffs implements store.Retention.
func (r *retention) PruneHandoffs(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	s := r.s()
	return prune(ctx, r, cutoff, limit, func(yield func(string, time.Time)) {
		for id, h := range s.handoffReqs {
			if !openHandoff(h.rec.Status) {
				yield(id, h.rec.UpdatedAt)
			}
		}
	}, func(id string) { delete(s.handoffReqs, id) }, nil)
}

// PruneFences implements store.Retention.
func (r *retention) PruneFences(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	s := r.s()
	return prune(ctx, r, cutoff, limit, func(yield func(fenceKey, time.Time)) {
		for k, f := range s.fences {
			if h, ok := s.handoffReqs[f.RequestID]; ok && openHandoff(h.rec.Status) {
				continue
			}
			yield(k, f.At)
		}
	}, func(k fenceKey) { delete(s.fences, k) }, func() { s.fencesGeneration++ })
}

// PruneHITL implements store.Retention.
func (r *retention) PruneHITL(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	s := r.s()
	return prune(ctx, r, cutoff, limit, func(yield func(string, time.Time)) {
		for id, h := range s.hitl {
			if h.Status == store.HITLDecided {
				yield(id, h.DecidedAt)
			}
		}
	}, func(id string) { delete(s.hitl, id) }, nil)
}

// PruneToolCalls implements store.Retention.
func (r *retention) PruneToolCalls(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	s := r.s()
	return prune(ctx, r, cutoff, limit, func(yield func(string, time.Time)) {
		for id, c := range s.toolCalls {
			if !c.rec.Final {
				continue
			}
			// The call's last activity: its creation or its latest frame.
			last := c.rec.CreatedAt
			for _, f := range c.frames {
				if f.At.After(last) {
					last = f.At
				}
			}
			yield(id, last)
		}
	}, func(id string) { delete(s.toolCalls, id) }, nil)
}
