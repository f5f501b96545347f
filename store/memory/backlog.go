package memory

import (
	"context"

	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// Backlog implements store.Store.
func (s *Store) Backlog(ctx context.Context) (store.Backlog, error) {
	if err := ctx.Err(); err != nil {
		return store.Backlog{}, err
	}
	var b store.Backlog
	s.mu.Lock()
	for _, r := range s.hitl {
		if r.Status == store.HITLPending {
			b.PendingHITL++
		}
	}
	for _, r := range s.handoffReqs {
		if st := r.rec.Status; st == handoffpb.HandoffStatus_PENDING || st == handoffpb.HandoffStatus_ACCEPTED {
			b.OpenHandoffs++
		}
	}
	for _, r := range s.toolCalls {
		if !r.rec.Final {
			b.OpenToolCalls++
		}
	}
	s.mu.Unlock()
	// The dead-letter queue has its own lock (dlq.go).
	d := s.dlq
	d.mu.Lock()
	for _, e := range d.rows {
		if e.RequeuedAt.IsZero() {
			b.DeadLetters++
		}
	}
	d.mu.Unlock()
	return b, nil
}
