package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// auditLog implements store.AuditLog.
type auditLog Store

func (a *auditLog) s() *Store { return (*Store)(a) }

// Append implements store.AuditLog. Details must be empty or valid JSON, as PostgreSQL's jsonb
// column requires.
func (a *auditLog) Append(ctx context.Context, e store.Event) (store.Event, error) {
	if err := ctx.Err(); err != nil {
		return store.Event{}, err
	}
	if len(e.Details) > 0 && !json.Valid(e.Details) {
		return store.Event{}, fmt.Errorf("memory: append event %q: details are not valid JSON", e.Type)
	}
	e.Details = cloneBytes(e.Details)
	e.Time = normTime(e.Time)
	if e.Time.IsZero() {
		e.Time = now()
	}
	s := a.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eventSeq++
	e.ID = s.eventSeq
	s.events = append(s.events, e)
	out := e
	out.Details = cloneBytes(e.Details)
	return out, nil
}

// List implements store.AuditLog.
func (a *auditLog) List(ctx context.Context, f store.AuditFilter) ([]store.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit <= 0 {
		limit = defaultAuditLimit
	}
	since := normTime(f.Since)
	s := a.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Event
	// Walk newest first so the limit keeps the newest matches, then restore ID order.
	for i := len(s.events) - 1; i >= 0 && len(out) < limit; i-- {
		e := s.events[i]
		if (f.CorrelationID != "" && e.CorrelationID != f.CorrelationID) ||
			(f.AgentID != "" && e.AgentID != f.AgentID) ||
			(f.MessageID != "" && e.MessageID != f.MessageID) ||
			(f.TypePrefix != "" && !strings.HasPrefix(e.Type, f.TypePrefix)) ||
			(!since.IsZero() && e.Time.Before(since)) {
			continue
		}
		e.Details = cloneBytes(e.Details)
		out = append(out, e)
	}
	slices.Reverse(out)
	return out, nil
}
