package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// This file holds the parts of the message plane added for lanes, TTL, the idempotency cache,
// stream resumption, retention, back-pressure metrics and pending responses. Every method runs
// under s.mu, so each is atomic like the corresponding PostgreSQL transaction.

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

// setState changes a message's lifecycle state and keeps the Expire candidates in step.
func (s *Store) setState(id string, row *messageRow, to commonpb.EnvelopeState, code commonpb.ErrorCode, note string, at time.Time) {
	row.state = to
	row.errCode = code
	row.note = note
	row.updatedAt = at
	if row.tracked && to == commonpb.EnvelopeState_ENVELOPE_STATE_SENT {
		s.sent[id] = struct{}{}
	} else {
		delete(s.sent, id)
	}
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

// ---------------------------------------------------------------------------------------------
// Planned steps

// AdvanceWith implements store.MessagePlane. Plan runs without s.mu held; the step is
// written under s.mu only if the message's state is still the one Plan saw, else Plan runs
// again on the stored record.
func (m *messagePlane) AdvanceWith(ctx context.Context, req store.StepRequest) (store.StepResult, error) {
	s := m.s()
	known := req.Known
	if known != nil && known.MessageID != req.MessageID {
		known = nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return store.StepResult{}, err
		}
		var rec store.MessageRecord
		fromKnown := known != nil
		if fromKnown {
			rec, known = *known, nil
		} else {
			s.mu.Lock()
			row, ok := s.messages[req.MessageID]
			if !ok || !row.tracked {
				s.mu.Unlock()
				return store.StepResult{}, fmt.Errorf("memory: advance %q: %w", req.MessageID, store.ErrNotFound)
			}
			var err error
			rec, err = row.toRecord(req.MessageID)
			s.mu.Unlock()
			if err != nil {
				return store.StepResult{}, err
			}
		}
		step, err := store.PlanStep(req.Plan, rec)
		if err != nil {
			return store.StepResult{}, err
		}
		if step == nil {
			if fromKnown {
				continue // decide on the stored record, not on the caller's
			}
			return store.StepResult{Record: rec}, nil
		}
		follow, err := encodeFollowUp(step)
		if err != nil {
			return store.StepResult{}, err
		}
		s.mu.Lock()
		row, ok := s.messages[req.MessageID]
		if !ok || !row.tracked || row.state != rec.State {
			s.mu.Unlock()
			continue // changed since Plan saw it (or never was as the caller knew it): plan again
		}
		res, err := s.applyStep(req.MessageID, row, step, follow, now())
		s.mu.Unlock()
		return res, err
	}
}

// ConfirmAndAdvance implements store.MessagePlane. Plan runs without s.mu held; the
// confirmation and the step are written together under s.mu only if the row is still
// unconfirmed and the message's state is still the one Plan saw, else Plan runs again on the
// stored record.
func (m *messagePlane) ConfirmAndAdvance(ctx context.Context, req store.ConfirmRequest) (store.ConfirmResult, error) {
	s := m.s()
	known := req.Known
	if known != nil && (req.MessageID == "" || known.MessageID != req.MessageID) {
		known = nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return store.ConfirmResult{}, err
		}
		var rec store.MessageRecord
		fromKnown := known != nil
		if fromKnown {
			rec, known = *known, nil
		} else {
			s.mu.Lock()
			d := s.unconfirmed(req.AgentID, req.Seq, req.MessageID)
			if d == nil {
				s.mu.Unlock()
				return store.ConfirmResult{}, nil
			}
			row := s.messages[d.messageID]
			if row == nil || !row.tracked {
				// Control traffic: nothing to plan.
				s.confirmRow(d, now())
				del, err := d.toDelivery()
				s.mu.Unlock()
				if err != nil {
					return store.ConfirmResult{}, err
				}
				return store.ConfirmResult{Delivery: del, Confirmed: true}, nil
			}
			var err error
			rec, err = row.toRecord(d.messageID)
			s.mu.Unlock()
			if err != nil {
				return store.ConfirmResult{}, err
			}
		}
		step, err := store.PlanStep(req.Plan, rec)
		if err != nil {
			return store.ConfirmResult{}, err
		}
		if step == nil && fromKnown {
			continue // decide on the stored record, not on the caller's
		}
		follow, err := encodeFollowUp(step)
		if err != nil {
			return store.ConfirmResult{}, err
		}
		s.mu.Lock()
		d := s.unconfirmed(req.AgentID, req.Seq, req.MessageID)
		if d == nil {
			s.mu.Unlock()
			return store.ConfirmResult{}, nil // confirmed (or resumed past) meanwhile
		}
		row := s.messages[d.messageID]
		if row == nil || !row.tracked || d.messageID != rec.MessageID || row.state != rec.State {
			s.mu.Unlock()
			continue // changed since Plan saw it (or never was as the caller knew it): plan again
		}
		res := store.ConfirmResult{Confirmed: true, Tracked: true, StepResult: store.StepResult{Record: rec}}
		if step != nil {
			// The step goes first: a duplicate follow-up must leave the row unconfirmed too.
			if res.StepResult, err = s.applyStep(d.messageID, row, step, follow, now()); err != nil {
				s.mu.Unlock()
				return store.ConfirmResult{}, err
			}
		}
		s.confirmRow(d, now())
		res.Delivery, err = d.toDelivery()
		s.mu.Unlock()
		if err != nil {
			return store.ConfirmResult{}, err
		}
		return res, nil
	}
}

// encodeFollowUp marshals the envelope of a step's follow-up admission (nil when there is
// none) before the store lock is taken.
func encodeFollowUp(step *store.Step) ([]byte, error) {
	if step == nil || step.FollowUp == nil {
		return nil, nil
	}
	return marshalEnvelope(step.FollowUp.Envelope)
}

// applyStep writes a planned step and its follow-up; the caller holds s.mu and has checked
// that the message is still in the state the step was planned for. A duplicate follow-up
// message_id changes nothing.
func (s *Store) applyStep(id string, row *messageRow, step *store.Step, follow []byte, at time.Time) (store.StepResult, error) {
	f := step.FollowUp
	if f != nil {
		if _, dup := s.messages[f.Envelope.GetMessageId()]; dup {
			return store.StepResult{}, fmt.Errorf("memory: follow-up %q: %w", f.Envelope.GetMessageId(), store.ErrDuplicateMessage)
		}
	}
	s.setState(id, row, step.To, step.ErrorCode, step.Note, at)
	s.followEntry(id, row, step.To, step.ErrorCode, step.Note, at)
	rec, err := row.toRecord(id)
	if err != nil {
		return store.StepResult{}, err
	}
	res := store.StepResult{Record: rec, Applied: true}
	if f != nil {
		res.FollowUpSeq = s.enqueueControl(f, follow, at)
	}
	if step.Outbox != nil {
		s.addOutboxLocked(*step.Outbox, store.OutboxLease, at)
	}
	return res, nil
}

// newMessageRow is an admitted message's row in state SENT.
func newMessageRow(req *store.AdmitRequest, envBytes []byte, t time.Time) *messageRow {
	env := req.Envelope
	return &messageRow{
		tracked:   req.Track,
		recipient: req.RecipientID,
		producer:  env.GetProducerId(),
		corrID:    env.GetCorrelationId(),
		msgType:   env.GetMessageType(),
		state:     commonpb.EnvelopeState_ENVELOPE_STATE_SENT,
		envelope:  envBytes,
		createdAt: t,
		updatedAt: t,
		expiresAt: normTime(req.ExpiresAt),
	}
}

// enqueueControl admits control traffic (untracked — Step.FollowUp never sets Track — and no
// capacity limit) the way Admit does; the caller holds s.mu and has checked that the
// message_id is new.
func (s *Store) enqueueControl(req *store.AdmitRequest, envBytes []byte, t time.Time) int64 {
	id := req.Envelope.GetMessageId()
	s.seq++
	row := newMessageRow(req, envBytes, t)
	row.seq = s.seq
	s.messages[id] = row
	s.addDelivery(row, id, req.Lane, false, t)
	s.hub.Wake(req.RecipientID)
	return row.seq
}

// addDelivery puts the delivery row of a message just stored as row (with its seq) into its
// recipient's buffer; counted says it takes a slot of the buffer's capacity (data, not
// control traffic). The caller holds s.mu.
func (s *Store) addDelivery(row *messageRow, id string, lane commonpb.CommunicationClass, counted bool, t time.Time) {
	d := &deliveryRow{
		seq:        row.seq,
		agentID:    row.recipient,
		messageID:  id,
		envelope:   row.envelope,
		enqueuedAt: t,
		lane:       int32(store.LaneRank(lane)),
		expiresAt:  row.expiresAt,
		counted:    counted,
	}
	s.deliveries[d.seq] = d
	if counted {
		s.data[row.recipient]++
	}
	// Seqs only grow, so appending keeps the buffer sorted.
	s.pending[row.recipient] = append(s.pending[row.recipient], d.seq)
}
