package memory

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// AddPendingResponse implements store.MessagePlane. A zero Deadline means now + Timeout; an
// empty OriginalMessageID means RequestMessageID (the first attempt).
func (m *messagePlane) AddPendingResponse(ctx context.Context, p store.PendingResponse, entries ...store.OutboxEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.RequestMessageID == "" {
		return errors.New("memory: add pending response: request message_id is required")
	}
	if p.OriginalMessageID == "" {
		p.OriginalMessageID = p.RequestMessageID
	}
	p.Timeout = p.Timeout.Truncate(time.Microsecond)
	p.Deadline = normTime(p.Deadline)
	if p.Deadline.IsZero() {
		p.Deadline = now().Add(p.Timeout)
	}
	p.Status = "pending"
	p.ResponseMessageID = ""
	s := m.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.responses[p.RequestMessageID] = &p
	at := now()
	for _, h := range entries {
		s.addOutboxLocked(h, store.OutboxLease, at)
	}
	return nil
}

// ResolvePendingResponse implements store.MessagePlane.
func (m *messagePlane) ResolvePendingResponse(ctx context.Context, requestMessageID, responseMessageID string, entries ...store.OutboxEntry) (store.PendingResponse, bool, error) {
	if err := ctx.Err(); err != nil {
		return store.PendingResponse{}, false, err
	}
	s := m.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.responses[requestMessageID]
	if !ok {
		return store.PendingResponse{}, false, nil
	}
	delete(s.responses, requestMessageID)
	at := now()
	for _, h := range entries {
		s.addOutboxLocked(h, store.OutboxLease, at)
	}
	out := *p
	out.Status = "fulfilled"
	out.ResponseMessageID = responseMessageID
	return out, true, nil
}

// ExpirePendingResponses implements store.MessagePlane, most overdue first.
func (m *messagePlane) ExpirePendingResponses(ctx context.Context, limit int) ([]store.PendingResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	s := m.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	t := now()
	var due []store.PendingResponse
	for _, p := range s.responses {
		if !p.Deadline.After(t) {
			due = append(due, *p)
		}
	}
	sortPending(due)
	due = due[:min(len(due), limit)]
	for i := range due {
		delete(s.responses, due[i].RequestMessageID)
		due[i].Status = "expired"
	}
	return due, nil
}

// PendingResponses implements store.MessagePlane, ordered by deadline.
func (m *messagePlane) PendingResponses(ctx context.Context, producerID string) ([]store.PendingResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := m.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.PendingResponse
	for _, p := range s.responses {
		if producerID == "" || p.ProducerID == producerID {
			out = append(out, *p)
		}
	}
	sortPending(out)
	return out, nil
}

func sortPending(ps []store.PendingResponse) {
	slices.SortFunc(ps, func(a, b store.PendingResponse) int {
		return cmp.Or(a.Deadline.Compare(b.Deadline), cmp.Compare(a.RequestMessageID, b.RequestMessageID))
	})
}
