package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// ResumeAfter implements store.MessagePlane. A negative offset is ErrInvalidPosition too.
func (m *messagePlane) ResumeAfter(ctx context.Context, agentID string, offset int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := m.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	if offset < 0 || offset > s.seq {
		return fmt.Errorf("memory: resume %s after %d (last seq %d): %w", agentID, offset, s.seq, store.ErrInvalidPosition)
	}
	if h := s.horizons[agentID]; offset < h {
		return &store.PositionExpiredError{Offset: offset, Horizon: h}
	}
	t := now()
	for _, seq := range slices.Clone(s.pending[agentID]) {
		if seq > offset {
			break
		}
		s.confirmRow(s.deliveries[seq], t)
	}
	return nil
}

// Prune implements store.MessagePlane.
func (m *messagePlane) Prune(ctx context.Context, cutoff, idempotencyCutoff time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	cutoff, idempotencyCutoff = normTime(cutoff), normTime(idempotencyCutoff)
	s := m.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for seq, d := range s.deliveries {
		if d.confirmedAt.IsZero() || !d.confirmedAt.Before(cutoff) {
			continue
		}
		delete(s.deliveries, seq)
		s.horizons[d.agentID] = max(s.horizons[d.agentID], seq)
		n++
	}
	for k, e := range s.idem {
		if e.UpdatedAt.Before(idempotencyCutoff) {
			delete(s.idem, k)
		}
	}
	return n, nil
}

// BufferStats implements store.MessagePlane, ordered by agent_id.
func (m *messagePlane) BufferStats(ctx context.Context) ([]store.BufferStat, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := m.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]store.BufferStat, 0, len(s.pending))
	for _, agentID := range slices.Sorted(maps.Keys(s.pending)) {
		seqs := s.pending[agentID]
		st := store.BufferStat{AgentID: agentID, Depth: len(seqs)}
		for _, seq := range seqs {
			if at := s.deliveries[seq].enqueuedAt; st.OldestEnqueuedAt.IsZero() || at.Before(st.OldestEnqueuedAt) {
				st.OldestEnqueuedAt = at
			}
		}
		out = append(out, st)
	}
	return out, nil
}
