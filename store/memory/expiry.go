package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// Expire implements store.MessagePlane. The oldest messages go first; each ExpiredMessage's
// Entry is the entry as the whole sweep left it.
func (m *messagePlane) Expire(ctx context.Context, ackTimeout time.Duration, limit int) ([]store.ExpiredMessage, error) {
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
	cutoff := t.Add(-ackTimeout.Truncate(time.Microsecond))
	type cand struct {
		id  string
		row *messageRow
	}
	var due []cand
	for id := range s.sent {
		row := s.messages[id]
		ttl := !row.expiresAt.IsZero() && !row.expiresAt.After(t)
		if ttl || !row.createdAt.After(cutoff) {
			due = append(due, cand{id, row})
		}
	}
	slices.SortFunc(due, func(a, b cand) int {
		return cmp.Or(a.row.createdAt.Compare(b.row.createdAt), cmp.Compare(a.id, b.id))
	})
	due = due[:min(len(due), limit)]

	timeoutNote := store.AckTimeoutNote(ackTimeout)
	for _, c := range due {
		to, code, note := commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT, commonpb.ErrorCode_ACK_TIMEOUT, timeoutNote
		if !c.row.expiresAt.IsZero() && !c.row.expiresAt.After(t) {
			to, code, note = commonpb.EnvelopeState_ENVELOPE_STATE_FAILED, commonpb.ErrorCode_TTL_EXPIRED, store.TTLExpiredNote
		}
		s.setState(c.id, c.row, to, code, note, t)
		// A row no stream has claimed leaves the buffer; a claimed one stays until confirmed.
		if d, ok := s.deliveries[c.row.seq]; ok && d.confirmedAt.IsZero() && d.attempts == 0 {
			s.dropRow(d)
		}
		s.followEntry(c.id, c.row, to, code, note, t)
	}
	out := make([]store.ExpiredMessage, 0, len(due))
	for _, c := range due {
		rec, err := c.row.toRecord(c.id)
		if err != nil {
			return nil, err
		}
		out = append(out, store.ExpiredMessage{Record: rec, Entry: s.entryOf(c.row)})
	}
	return out, nil
}

// RecordLateAck implements store.MessagePlane. Only a message in TIMED_OUT is reconciled;
// for any other state the call reports the record and entry and changes nothing.
func (m *messagePlane) RecordLateAck(ctx context.Context, messageID string, stage commonpb.EnvelopeState, code commonpb.ErrorCode, note string) (store.LateAck, error) {
	if err := ctx.Err(); err != nil {
		return store.LateAck{}, err
	}
	s := m.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.messages[messageID]
	if !ok || !row.tracked {
		return store.LateAck{}, fmt.Errorf("memory: late ack for %q: %w", messageID, store.ErrNotFound)
	}
	var out store.LateAck
	if row.dedupKey != "" && row.state == commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT && store.IsCompletion(stage) {
		if e, ok := s.idem[idemKey{row.dedupProducer, row.dedupKey}]; ok && e.Status != store.OpTerminal {
			makeTerminal(e, messageID, stage, code, note, now())
			out.Reconciled = true
		}
	}
	rec, err := row.toRecord(messageID)
	if err != nil {
		return store.LateAck{}, err
	}
	out.Record = rec
	out.Entry = s.entryOf(row)
	return out, nil
}

// CancelUndelivered implements store.MessagePlane.
func (m *messagePlane) CancelUndelivered(ctx context.Context, messageID string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s := m.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.messages[messageID]
	if !ok {
		return false, nil
	}
	d, ok := s.deliveries[row.seq]
	if !ok || !d.confirmedAt.IsZero() || d.attempts > 0 {
		return false, nil
	}
	s.dropRow(d)
	return true, nil
}
