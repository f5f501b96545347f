package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// handoffReqRow is one stored handoff; order is its insertion number, which breaks ties
// between handoffs created in the same microsecond (oldest first).
type handoffReqRow struct {
	rec   store.HandoffRecord
	order int64
}

// fenceKey identifies a fence: a correlation and the agent fenced on it.
type fenceKey struct{ correlation, agentID string }

// handoffsStore implements store.Handoffs over the Store's maps, under s.mu.
type handoffsStore Store

func (h *handoffsStore) s() *Store { return (*Store)(h) }

// Handoffs implements store.Store.
func (s *Store) Handoffs() store.Handoffs { return (*handoffsStore)(s) }

// copyHandoffRecord gives the caller (or the store) its own Request bytes.
func copyHandoffRecord(rec store.HandoffRecord) store.HandoffRecord {
	rec.Request = cloneBytes(rec.Request)
	return rec
}

// CreateHandoff implements store.Handoffs. The record and its outbox entries are written
// under one hold of s.mu, so no reader sees one without the other.
func (h *handoffsStore) CreateHandoff(ctx context.Context, rec store.HandoffRecord, entries ...store.OutboxEntry) (store.HandoffRecord, error) {
	if err := ctx.Err(); err != nil {
		return store.HandoffRecord{}, err
	}
	if rec.RequestID == "" {
		return store.HandoffRecord{}, errors.New("memory: create handoff: request_id is required")
	}
	s := h.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	if row, ok := s.handoffReqs[rec.RequestID]; ok {
		return copyHandoffRecord(row.rec), fmt.Errorf("memory: create handoff %q: %w", rec.RequestID, store.ErrDuplicateHandoff)
	}
	if rec.Status == handoffpb.HandoffStatus_HANDOFF_STATUS_UNSPECIFIED {
		rec.Status = handoffpb.HandoffStatus_PENDING
	}
	at := now()
	rec.CreatedAt, rec.UpdatedAt = at, at
	rec = copyHandoffRecord(rec)
	s.handoffReqOrder++
	s.handoffReqs[rec.RequestID] = &handoffReqRow{rec: rec, order: s.handoffReqOrder}
	for _, ho := range entries {
		s.addOutboxLocked(ho, store.OutboxLease, at)
	}
	return copyHandoffRecord(rec), nil
}

// GetHandoff implements store.Handoffs.
func (h *handoffsStore) GetHandoff(ctx context.Context, requestID string) (store.HandoffRecord, error) {
	if err := ctx.Err(); err != nil {
		return store.HandoffRecord{}, err
	}
	s := h.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.handoffReqs[requestID]
	if !ok {
		return store.HandoffRecord{}, fmt.Errorf("memory: handoff %q: %w", requestID, store.ErrNotFound)
	}
	return copyHandoffRecord(row.rec), nil
}

// UpdateHandoff implements store.Handoffs.
func (h *handoffsStore) UpdateHandoff(ctx context.Context, requestID string, status handoffpb.HandoffStatus, target, acceptedBy, endReason string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := h.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.handoffReqs[requestID]
	if !ok {
		return fmt.Errorf("memory: update handoff %q: %w", requestID, store.ErrNotFound)
	}
	if status != handoffpb.HandoffStatus_HANDOFF_STATUS_UNSPECIFIED {
		row.rec.Status = status
	}
	if target != "" {
		row.rec.Target = target
	}
	if acceptedBy != "" {
		row.rec.AcceptedBy = acceptedBy
	}
	if endReason != "" {
		row.rec.EndReason = endReason
	}
	row.rec.UpdatedAt = now()
	return nil
}

// listHandoffsLocked returns copies of the records keep selects, oldest first; the caller
// holds s.mu.
func (s *Store) listHandoffsLocked(keep func(store.HandoffRecord) bool) []store.HandoffRecord {
	var rows []*handoffReqRow
	for _, row := range s.handoffReqs {
		if keep(row.rec) {
			rows = append(rows, row)
		}
	}
	slices.SortFunc(rows, func(a, b *handoffReqRow) int {
		if c := a.rec.CreatedAt.Compare(b.rec.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.order, b.order)
	})
	out := make([]store.HandoffRecord, len(rows))
	for i, row := range rows {
		out[i] = copyHandoffRecord(row.rec)
	}
	return out
}

// ListOfferedTo implements store.Handoffs.
func (h *handoffsStore) ListOfferedTo(ctx context.Context, agentID string) ([]store.HandoffRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := h.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listHandoffsLocked(func(rec store.HandoffRecord) bool {
		return rec.Status == handoffpb.HandoffStatus_PENDING && rec.Target == agentID
	}), nil
}

// ListAcceptedBy implements store.Handoffs.
func (h *handoffsStore) ListAcceptedBy(ctx context.Context, agentID string) ([]store.HandoffRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := h.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listHandoffsLocked(func(rec store.HandoffRecord) bool {
		return rec.Status == handoffpb.HandoffStatus_ACCEPTED && openDelegate(rec) == agentID
	}), nil
}

// ListByCorrelation implements store.Handoffs.
func (h *handoffsStore) ListByCorrelation(ctx context.Context, correlation string) ([]store.HandoffRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := h.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listHandoffsLocked(func(rec store.HandoffRecord) bool { return rec.Correlation == correlation }), nil
}

// OpenDelegations implements store.Handoffs.
func (h *handoffsStore) OpenDelegations(ctx context.Context) (map[string]int, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := h.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, row := range s.handoffReqs {
		if agent := openDelegate(row.rec); agent != "" {
			out[agent]++
		}
	}
	return out, nil
}

// openDelegate returns the agent an open handoff occupies: the target of a PENDING one, the
// accepter of an ACCEPTED one (its target when AcceptedBy is not recorded); "" otherwise.
func openDelegate(rec store.HandoffRecord) string {
	switch rec.Status {
	case handoffpb.HandoffStatus_PENDING:
		return rec.Target
	case handoffpb.HandoffStatus_ACCEPTED:
		return cmp.Or(rec.AcceptedBy, rec.Target)
	}
	return ""
}

// Fence implements store.Handoffs.
func (h *handoffsStore) Fence(ctx context.Context, f store.Fence) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if f.Correlation == "" || f.AgentID == "" {
		return errors.New("memory: fence: correlation and agent_id are required")
	}
	f.At = normTime(f.At)
	if f.At.IsZero() {
		f.At = now()
	}
	s := h.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	k := fenceKey{f.Correlation, f.AgentID}
	if _, ok := s.fences[k]; ok {
		return nil // set already: the first fence stands
	}
	s.fences[k] = f
	s.fencesGeneration++
	return nil
}

// Fenced implements store.Handoffs.
func (h *handoffsStore) Fenced(ctx context.Context, correlation, agentID string) (store.Fence, bool, error) {
	if err := ctx.Err(); err != nil {
		return store.Fence{}, false, err
	}
	s := h.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.fences[fenceKey{correlation, agentID}]
	return f, ok, nil
}

// ListFences implements store.Handoffs.
func (h *handoffsStore) ListFences(ctx context.Context) ([]store.Fence, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := h.s()
	s.mu.Lock()
	out := make([]store.Fence, 0, len(s.fences))
	for _, f := range s.fences {
		out = append(out, f)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b store.Fence) int {
		return cmp.Or(cmp.Compare(a.Correlation, b.Correlation), cmp.Compare(a.AgentID, b.AgentID))
	})
	return out, nil
}

// FencesGeneration implements store.Handoffs.
func (h *handoffsStore) FencesGeneration(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s := h.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fencesGeneration, nil
}
