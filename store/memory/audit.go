package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

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
	since, until := normTime(f.Since), normTime(f.Until)
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
			(!since.IsZero() && e.Time.Before(since)) ||
			(!until.IsZero() && !e.Time.Before(until)) {
			continue
		}
		e.Details = cloneBytes(e.Details)
		out = append(out, e)
	}
	slices.Reverse(out)
	if f.OrderByHLC {
		// Text order of HLC is causal order (protocol/hlc); events without one come first.
		slices.SortStableFunc(out, func(a, b store.Event) int { return strings.Compare(a.HLC, b.HLC) })
	}
	return out, nil
}

// MaxHLC implements store.AuditLog.
func (a *auditLog) MaxHLC(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s := a.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	var top string
	for _, e := range s.events {
		top = max(top, e.HLC)
	}
	return top, nil
}

// admissionDetails reads the details of an admission's audit event (store.AdmitRequest.Audit),
// a JSON object or empty, before the admission changes anything.
func admissionDetails(e *store.Event) (map[string]any, error) {
	details := map[string]any{}
	if e == nil || len(e.Details) == 0 {
		return details, nil
	}
	if err := json.Unmarshal(e.Details, &details); err != nil {
		return nil, fmt.Errorf("memory: admit: the audit event's details are not a JSON object: %w", err)
	}
	return details, nil
}

// appendAdmissionLocked appends an admission's audit event with the admitted message's id
// and its delivery's seq added to details (from admissionDetails). The caller holds s.mu.
func (s *Store) appendAdmissionLocked(e store.Event, details map[string]any, messageID string, seq int64, t time.Time) {
	details["seq"] = seq
	b, _ := json.Marshal(details) // decoded from JSON plus an int64: always encodes
	e.MessageID, e.Time, e.Details = messageID, t, b
	s.eventSeq++
	e.ID = s.eventSeq
	s.events = append(s.events, e)
}
