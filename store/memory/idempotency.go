package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// idemKey identifies one idempotency entry.
type idemKey struct{ producer, key string }

// dedupOf returns the request's effective Dedup (with its window defaulted), or nil when the
// admission does not consult the cache: Dedup applies to tracked messages with a key only.
func dedupOf(req store.AdmitRequest) *store.Dedup {
	if !req.Track || req.Dedup == nil || req.Dedup.Key == "" {
		return nil
	}
	d := *req.Dedup
	d.Window = dedupWindow(d.Window)
	return &d
}

// dedupWindow defaults a zero or negative window and truncates it to microseconds, the
// precision store/postgres compares with.
func dedupWindow(w time.Duration) time.Duration {
	return store.EffectiveDedupWindow(w).Truncate(time.Microsecond)
}

// Notes recorded on messages; store/postgres writes the same texts.
func inProgressNote(latest string) string {
	return "operation already in progress (attempt " + latest + ")"
}

func duplicateNote(original string) string { return "duplicate of " + original }

// liveEntry returns the entry of k when its UpdatedAt is within window of t, else nil.
func (s *Store) liveEntry(k idemKey, window time.Duration, t time.Time) *store.IdempotencyEntry {
	e, ok := s.idem[k]
	if !ok || !e.UpdatedAt.After(t.Add(-window)) {
		return nil
	}
	return e
}

// entryOf returns a copy of the idempotency entry a message was admitted under, or nil.
func (s *Store) entryOf(row *messageRow) *store.IdempotencyEntry {
	if row.dedupKey == "" {
		return nil
	}
	e, ok := s.idem[idemKey{row.dedupProducer, row.dedupKey}]
	if !ok {
		return nil
	}
	c := *e
	return &c
}

// followEntry applies a message's transition to its idempotency entry: TIMED_OUT of the latest
// attempt makes it retrying; a completion (FULFILLED, REJECTED, FAILED) makes it terminal with
// this message's outcome. A terminal entry never changes again.
func (s *Store) followEntry(id string, row *messageRow, to commonpb.EnvelopeState, code commonpb.ErrorCode, note string, at time.Time) {
	if row.dedupKey == "" {
		return
	}
	e, ok := s.idem[idemKey{row.dedupProducer, row.dedupKey}]
	if !ok || e.Status == store.OpTerminal {
		return
	}
	switch to {
	case commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT:
		if e.LatestMessageID == id {
			e.Status = store.OpRetrying
			e.UpdatedAt = at
		}
	case commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED,
		commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED,
		commonpb.EnvelopeState_ENVELOPE_STATE_FAILED:
		makeTerminal(e, id, to, code, note, at)
	}
}

func makeTerminal(e *store.IdempotencyEntry, id string, to commonpb.EnvelopeState, code commonpb.ErrorCode, note string, at time.Time) {
	e.Status = store.OpTerminal
	e.OriginalMessageID = id
	e.TerminalState = to
	e.ErrorCode = code
	e.Result = note
	e.CachedAt = at
	e.UpdatedAt = at
}

// Idempotency implements store.MessagePlane; a zero window means the default (3600 s).
func (m *messagePlane) Idempotency(ctx context.Context, producerID, key string, window time.Duration) (store.IdempotencyEntry, error) {
	if err := ctx.Err(); err != nil {
		return store.IdempotencyEntry{}, err
	}
	s := m.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.liveEntry(idemKey{producerID, key}, dedupWindow(window), now())
	if e == nil {
		return store.IdempotencyEntry{}, fmt.Errorf("memory: idempotency entry %s/%s: %w", producerID, key, store.ErrNotFound)
	}
	return *e, nil
}
