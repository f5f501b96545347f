package memory

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// defaultHITLLimit is the ListInvocations limit used when HITLFilter.Limit is zero (see
// store.HITLFilter).
const defaultHITLLimit = 1000

type hitl Store

func (h *hitl) s() *Store { return (*Store)(h) }

// PutInvocation implements store.HITL. The record is stored as pending whatever its Status,
// Outcome and DecidedAt say; a zero CreatedAt means now. Invocation must be empty or valid
// JSON, as PostgreSQL's json column requires.
func (h *hitl) PutInvocation(ctx context.Context, rec store.HITLRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if rec.InvocationID == "" {
		return errors.New("memory: put invocation: invocation_id is required")
	}
	if err := validJSON(rec.Invocation); err != nil {
		return fmt.Errorf("memory: put invocation %q: invocation %w", rec.InvocationID, err)
	}
	row := rec
	row.Status = store.HITLPending
	row.Invocation = cloneBytes(rec.Invocation)
	row.Outcome = nil
	row.Deadline = normTime(rec.Deadline)
	row.CreatedAt = normTime(rec.CreatedAt)
	if row.CreatedAt.IsZero() {
		row.CreatedAt = now()
	}
	row.DecidedAt = time.Time{}
	s := h.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.hitl[rec.InvocationID]; ok && old.Status != store.HITLPending {
		return fmt.Errorf("memory: put invocation %q: %w", rec.InvocationID, store.ErrAlreadyDecided)
	}
	s.hitl[rec.InvocationID] = &row
	return nil
}

// CompleteInvocation implements store.HITL. The outcome must be valid JSON; a zero decidedAt
// means now.
func (h *hitl) CompleteInvocation(ctx context.Context, invocationID string, outcome []byte, decidedAt time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(outcome) == 0 {
		return fmt.Errorf("memory: complete invocation %q: an outcome is required", invocationID)
	}
	if err := validJSON(outcome); err != nil {
		return fmt.Errorf("memory: complete invocation %q: outcome %w", invocationID, err)
	}
	at := normTime(decidedAt)
	if at.IsZero() {
		at = now()
	}
	s := h.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.hitl[invocationID]
	if !ok {
		return fmt.Errorf("memory: complete invocation %q: %w", invocationID, store.ErrNotFound)
	}
	if row.Status == store.HITLDecided {
		if bytes.Equal(row.Outcome, outcome) {
			return nil // an idempotent retry
		}
		return fmt.Errorf("memory: complete invocation %q: %w", invocationID, store.ErrAlreadyDecided)
	}
	row.Status = store.HITLDecided
	row.Outcome = cloneBytes(outcome)
	row.DecidedAt = at
	return nil
}

// GetInvocation implements store.HITL.
func (h *hitl) GetInvocation(ctx context.Context, invocationID string) (store.HITLRecord, error) {
	if err := ctx.Err(); err != nil {
		return store.HITLRecord{}, err
	}
	s := h.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.hitl[invocationID]
	if !ok {
		return store.HITLRecord{}, fmt.Errorf("memory: invocation %q: %w", invocationID, store.ErrNotFound)
	}
	return copyHITL(row), nil
}

// ListInvocations implements store.HITL.
func (h *hitl) ListInvocations(ctx context.Context, f store.HITLFilter) ([]store.HITLRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit <= 0 {
		limit = defaultHITLLimit
	}
	s := h.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.HITLRecord
	for _, row := range s.hitl {
		if (f.Status != "" && row.Status != f.Status) || (f.ReasonType != "" && row.ReasonType != f.ReasonType) {
			continue
		}
		out = append(out, copyHITL(row))
	}
	slices.SortFunc(out, func(a, b store.HITLRecord) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.InvocationID, b.InvocationID))
	})
	// Keep the newest limit matches, oldest first.
	if len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, nil
}

// copyHITL returns a copy of a stored record that shares no memory with it.
func copyHITL(row *store.HITLRecord) store.HITLRecord {
	out := *row
	out.Invocation = cloneBytes(row.Invocation)
	out.Outcome = cloneBytes(row.Outcome)
	return out
}

// validJSON accepts empty input or valid UTF-8 JSON: what PostgreSQL's json column accepts.
func validJSON(b []byte) error {
	if len(b) > 0 && (!utf8.Valid(b) || !json.Valid(b)) {
		return errors.New("is not valid JSON")
	}
	return nil
}
