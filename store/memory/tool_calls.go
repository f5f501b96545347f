package memory

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// toolCallRow is one call and its frames, in order.
type toolCallRow struct {
	rec    store.ToolCallRecord
	frames []store.ToolFrameRecord
}

// toolCallsStore implements store.ToolCalls over s.toolCalls, under s.mu.
type toolCallsStore Store

func (c *toolCallsStore) s() *Store { return (*Store)(c) }

// ToolCalls implements store.Store.
func (s *Store) ToolCalls() store.ToolCalls { return (*toolCallsStore)(s) }

// CreateCall implements store.ToolCalls.
func (c *toolCallsStore) CreateCall(ctx context.Context, rec store.ToolCallRecord, entries ...store.OutboxEntry) (store.ToolCallRecord, bool, error) {
	if err := ctx.Err(); err != nil {
		return store.ToolCallRecord{}, false, err
	}
	if rec.CallID == "" {
		return store.ToolCallRecord{}, false, errors.New("memory: create tool call: call_id is required")
	}
	s := c.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.toolCalls == nil {
		s.toolCalls = make(map[string]*toolCallRow)
	}
	if row, ok := s.toolCalls[rec.CallID]; ok {
		return row.rec, false, nil
	}
	rec.Frames, rec.Bytes, rec.Final, rec.CreatedAt = 0, 0, false, now()
	s.toolCalls[rec.CallID] = &toolCallRow{rec: rec}
	for _, h := range entries {
		s.addOutboxLocked(h, store.OutboxLease, rec.CreatedAt)
	}
	return rec, true, nil
}

// GetCall implements store.ToolCalls.
func (c *toolCallsStore) GetCall(ctx context.Context, callID string) (store.ToolCallRecord, error) {
	if err := ctx.Err(); err != nil {
		return store.ToolCallRecord{}, err
	}
	s := c.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.toolCalls[callID]
	if !ok {
		return store.ToolCallRecord{}, store.ErrNotFound
	}
	return row.rec, nil
}

// OpenCalls implements store.ToolCalls.
func (c *toolCallsStore) OpenCalls(ctx context.Context, caller, providerID string) ([]store.ToolCallRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := c.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []store.ToolCallRecord{}
	for _, row := range s.toolCalls {
		r := row.rec
		if !r.Final && ((caller != "" && r.Caller == caller) || (providerID != "" && r.ProviderID == providerID)) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b store.ToolCallRecord) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.CallID, b.CallID))
	})
	return out, nil
}

// ListCalls implements store.ToolCalls.
func (c *toolCallsStore) ListCalls(ctx context.Context, f store.ToolCallFilter) ([]store.ListedToolCall, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := c.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []store.ListedToolCall{}
	for _, row := range s.toolCalls {
		r := row.rec
		switch {
		case f.Caller != "" && r.Caller != f.Caller, f.ProviderID != "" && r.ProviderID != f.ProviderID,
			f.ToolName != "" && r.ToolName != f.ToolName,
			f.Phase == store.OpenToolCall && r.Final, f.Phase == store.FinalToolCall && !r.Final:
			continue
		}
		l := store.ListedToolCall{ToolCallRecord: r}
		if r.Final {
			l.Summary = bytes.Clone(row.frames[len(row.frames)-1].Summary)
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b store.ListedToolCall) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(a.CallID, b.CallID))
	})
	limit := f.Limit
	if limit <= 0 {
		limit = store.DefaultToolCallListLimit
	}
	return out[:min(limit, len(out))], nil
}

// AppendFrame implements store.ToolCalls.
func (c *toolCallsStore) AppendFrame(ctx context.Context, callID, contentType string, data []byte) (store.ToolFrameRecord, error) {
	if err := ctx.Err(); err != nil {
		return store.ToolFrameRecord{}, err
	}
	s := c.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.toolCalls[callID]
	if !ok {
		return store.ToolFrameRecord{}, store.ErrNotFound
	}
	if row.rec.Final {
		return store.ToolFrameRecord{}, store.ErrCallClosed
	}
	return row.add(store.ToolFrameRecord{ContentType: contentType, Data: bytes.Clone(data)}), nil
}

// Finish implements store.ToolCalls.
func (c *toolCallsStore) Finish(ctx context.Context, callID, contentType string, data []byte, summarize func(frames, bytes uint64) []byte) (store.ToolFrameRecord, bool, error) {
	if err := ctx.Err(); err != nil {
		return store.ToolFrameRecord{}, false, err
	}
	s := c.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.toolCalls[callID]
	if !ok {
		return store.ToolFrameRecord{}, false, store.ErrNotFound
	}
	if row.rec.Final {
		return cloneFrame(row.frames[len(row.frames)-1]), false, nil
	}
	var summary []byte
	if summarize != nil {
		summary = bytes.Clone(summarize(row.rec.Frames, row.rec.Bytes))
	}
	f := row.add(store.ToolFrameRecord{Final: true, ContentType: contentType, Data: bytes.Clone(data), Summary: summary})
	row.rec.Final = true
	return f, true, nil
}

// Frames implements store.ToolCalls.
func (c *toolCallsStore) Frames(ctx context.Context, callID string, after uint64, limit int) ([]store.ToolFrameRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := c.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []store.ToolFrameRecord{}
	row, ok := s.toolCalls[callID]
	if !ok {
		return out, nil
	}
	// Frames are numbered from 1 without gaps, so frame n sits at index n-1.
	for i := after; i < uint64(len(row.frames)) && (limit <= 0 || len(out) < limit); i++ {
		out = append(out, cloneFrame(row.frames[i]))
	}
	return out, nil
}

// add numbers f as the row's next frame, stores it and returns a copy.
func (r *toolCallRow) add(f store.ToolFrameRecord) store.ToolFrameRecord {
	r.rec.Frames++
	r.rec.Bytes += uint64(len(f.Data))
	f.CallID, f.FrameNo, f.At = r.rec.CallID, r.rec.Frames, now()
	r.frames = append(r.frames, f)
	return cloneFrame(f)
}

// cloneFrame copies a frame's byte slices, so that callers never share the store's.
func cloneFrame(f store.ToolFrameRecord) store.ToolFrameRecord {
	f.Data, f.Summary = bytes.Clone(f.Data), bytes.Clone(f.Summary)
	return f
}

// slotKey names a tool for its concurrency slots.
type slotKey struct{ provider, tool string }

// AcquireSlot implements store.ToolCalls.
func (c *toolCallsStore) AcquireSlot(ctx context.Context, providerID, toolName, callID string, limit int, lease time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s := c.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.toolSlots == nil {
		s.toolSlots = make(map[slotKey]map[string]time.Time)
	}
	k := slotKey{providerID, toolName}
	held := s.toolSlots[k]
	if held == nil {
		held = make(map[string]time.Time)
		s.toolSlots[k] = held
	}
	at := time.Now()
	for id, until := range held {
		if !until.After(at) {
			delete(held, id)
		}
	}
	if _, mine := held[callID]; !mine && len(held) >= limit {
		return false, nil
	}
	held[callID] = at.Add(lease)
	return true, nil
}

// ReleaseSlot implements store.ToolCalls.
func (c *toolCallsStore) ReleaseSlot(ctx context.Context, providerID, toolName, callID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := c.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.toolSlots[slotKey{providerID, toolName}], callID)
	return nil
}
