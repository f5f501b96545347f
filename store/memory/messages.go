package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// messagePlane implements store.MessagePlane: admission, delivery rows, the message records
// and planned steps (this file), the idempotency cache (idempotency.go), expiry (expiry.go),
// resumption, retention and buffer metrics (retention.go) and pending responses
// (responses.go). Every method runs under s.mu, so each is atomic like the corresponding
// PostgreSQL transaction.
type messagePlane Store

func (m *messagePlane) s() *Store { return (*Store)(m) }

// AdmitBatch implements store.MessagePlane: each member is admitted in order, each under the
// store's lock as Admit is, so a later member sees the earlier ones.
func (m *messagePlane) AdmitBatch(ctx context.Context, reqs []store.AdmitRequest) []store.AdmitResult {
	out := make([]store.AdmitResult, len(reqs))
	for i, req := range reqs {
		out[i].Seq, out[i].Err = m.Admit(ctx, req)
	}
	return out
}

// Admit implements store.MessagePlane. The idempotency cache answers before the capacity
// check: a duplicate or an operation in progress is refused as such even into a full buffer.
func (m *messagePlane) Admit(ctx context.Context, req store.AdmitRequest) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if req.Envelope == nil || req.Envelope.GetMessageId() == "" {
		return 0, errors.New("memory: admit: envelope with a message_id is required")
	}
	if req.RecipientID == "" {
		return 0, errors.New("memory: admit: recipient_id is required")
	}
	envBytes, err := marshalEnvelope(req.Envelope)
	if err != nil {
		return 0, err
	}
	auditDetails, err := admissionDetails(req.Audit)
	if err != nil {
		return 0, err
	}
	env := req.Envelope
	id := env.GetMessageId()
	dedup := dedupOf(req)
	s := m.s()
	s.mu.Lock()
	defer s.mu.Unlock()

	// The duplicate check comes first: a duplicate "changes nothing", not even a rejection.
	if _, ok := s.messages[id]; ok {
		return 0, fmt.Errorf("memory: admit %q: %w", id, store.ErrDuplicateMessage)
	}
	t := now()
	row := newMessageRow(&req, envBytes, t)
	// reject records a tracked message as REJECTED (never a silent drop) without enqueuing it.
	reject := func(code commonpb.ErrorCode, note string) {
		if !req.Track {
			return
		}
		row.state = commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED
		row.errCode = code
		row.note = note
		s.messages[id] = row
	}

	var entry *store.IdempotencyEntry // the live entry to continue, nil for a new operation
	if dedup != nil {
		row.dedupProducer, row.dedupKey = dedup.ProducerID, dedup.Key
		if e := s.liveEntry(idemKey{dedup.ProducerID, dedup.Key}, dedup.Window, t); e != nil {
			switch e.Status {
			case store.OpInProgress:
				reject(commonpb.ErrorCode_ALREADY_IN_PROGRESS, inProgressNote(e.LatestMessageID))
				return 0, &store.DedupError{Entry: *e, InProgress: true}
			case store.OpTerminal:
				reject(commonpb.ErrorCode_DUPLICATE_DETECTED, duplicateNote(e.OriginalMessageID))
				return 0, &store.DedupError{Entry: *e}
			}
			entry = e // retrying: this is the next attempt
		}
	}
	if req.Capacity > 0 && s.data[req.RecipientID] >= req.Capacity {
		// §13: never a silent drop — the rejection stays visible through GetMessage. The
		// idempotency cache is left as it was.
		reject(commonpb.ErrorCode_BUFFER_FULL, store.BufferFullNote(req.RecipientID, req.Capacity))
		return 0, fmt.Errorf("memory: admit %q to %q: %w", id, req.RecipientID, store.ErrBufferFull)
	}
	s.seq++
	row.seq = s.seq
	s.messages[id] = row
	if req.Track {
		s.sent[id] = struct{}{}
	}
	d := s.addDelivery(row, id, req.Lane, req.Capacity > 0, t)
	if dedup != nil {
		if entry == nil {
			s.idem[idemKey{dedup.ProducerID, dedup.Key}] = &store.IdempotencyEntry{
				ProducerID:        dedup.ProducerID,
				Key:               dedup.Key,
				Status:            store.OpInProgress,
				OriginalMessageID: id,
				LatestMessageID:   id,
				Attempts:          1,
				CreatedAt:         t,
				UpdatedAt:         t,
			}
		} else {
			entry.Status = store.OpInProgress
			entry.LatestMessageID = id
			entry.Attempts++
			entry.UpdatedAt = t
		}
	}
	for _, h := range req.Outbox {
		s.addOutboxLocked(h, store.OutboxLease, t)
	}
	if req.Audit != nil {
		s.appendAdmissionLocked(*req.Audit, auditDetails, id, row.seq, t)
	}
	s.announce(d, t)
	return row.seq, nil
}

// Claim implements store.MessagePlane: the deliverable rows of each lane in seq order,
// interleaved by weighted round robin, PRIVILEGED first.
func (m *messagePlane) Claim(ctx context.Context, req store.ClaimRequest) ([]store.Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := m.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Limit <= 0 {
		return nil, nil
	}
	t := time.Now()
	// No lane can contribute more than Limit rows, so each lane's queue stops there.
	var lanes [3][]*deliveryRow
	for _, seq := range s.pending[req.AgentID] {
		d := s.deliveries[seq]
		// A row whose lease is still running belongs to the stream that claimed it; a row
		// whose TTL ran out is never delivered (Expire settles it).
		if !d.deliverable(t) {
			continue
		}
		if q := &lanes[d.lane-1]; len(*q) < req.Limit {
			*q = append(*q, d)
		}
	}
	weights := req.Weights.InLaneOrder()
	var (
		out  []store.Delivery
		next [3]int
	)
	for len(out) < req.Limit {
		progress := false
		for l := range lanes {
			for n := 0; n < weights[l] && next[l] < len(lanes[l]) && len(out) < req.Limit; n++ {
				d := lanes[l][next[l]]
				next[l]++
				d.leasedUntil = t.Add(req.Lease)
				d.attempts++
				del, err := d.toDelivery()
				if err != nil {
					return nil, err
				}
				out = append(out, del)
				progress = true
			}
		}
		if !progress {
			break
		}
	}
	return out, nil
}

// ReleaseLeases implements store.MessagePlane.
func (m *messagePlane) ReleaseLeases(ctx context.Context, agentID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := m.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	released := false
	for _, seq := range s.pending[agentID] {
		d := s.deliveries[seq]
		if !d.leasedUntil.IsZero() {
			d.leasedUntil = time.Time{}
			released = true
		}
	}
	if released {
		s.hub.Wake(agentID)
	}
	return nil
}

// Confirm implements store.MessagePlane.
func (m *messagePlane) Confirm(ctx context.Context, agentID string, seq int64, messageID string) (store.Delivery, bool, error) {
	if err := ctx.Err(); err != nil {
		return store.Delivery{}, false, err
	}
	s := m.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.unconfirmed(agentID, seq, messageID)
	if d == nil {
		return store.Delivery{}, false, nil
	}
	s.confirmRow(d, now())
	del, err := d.toDelivery()
	if err != nil {
		return store.Delivery{}, false, err
	}
	return del, true, nil
}

// ConfirmBatch implements store.MessagePlane.
func (m *messagePlane) ConfirmBatch(ctx context.Context, rows []store.DeliveryRef) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s := m.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	at, n := now(), 0
	for _, r := range rows {
		d := s.unconfirmed(r.AgentID, r.Seq, r.MessageID)
		if d == nil {
			continue
		}
		s.confirmRow(d, at)
		n++
	}
	return n, nil
}

// unconfirmed returns agentID's unconfirmed row seq, or nil when there is none or its
// message_id does not match a non-empty messageID; the caller holds s.mu.
func (s *Store) unconfirmed(agentID string, seq int64, messageID string) *deliveryRow {
	d, ok := s.deliveries[seq]
	if !ok || !d.confirmedAt.IsZero() || d.agentID != agentID || (messageID != "" && d.messageID != messageID) {
		return nil
	}
	return d
}

// confirmRow marks an unconfirmed row confirmed and takes it out of its agent's buffer. The
// row stays (for Prune) until its retention ends.
func (s *Store) confirmRow(d *deliveryRow, t time.Time) {
	d.leasedUntil = time.Time{}
	d.confirmedAt = t
	s.unqueue(d)
}

// dropRow deletes an unconfirmed row outright (it was never delivered).
func (s *Store) dropRow(d *deliveryRow) {
	s.unqueue(d)
	delete(s.deliveries, d.seq)
}

// unqueue removes a row from its agent's buffer list.
func (s *Store) unqueue(d *deliveryRow) {
	s.pending[d.agentID] = slices.DeleteFunc(s.pending[d.agentID], func(x int64) bool { return x == d.seq })
	if len(s.pending[d.agentID]) == 0 {
		delete(s.pending, d.agentID)
	}
	if d.counted {
		if s.data[d.agentID]--; s.data[d.agentID] <= 0 {
			delete(s.data, d.agentID)
		}
	}
}

// Depth implements store.MessagePlane.
func (m *messagePlane) Depth(ctx context.Context, agentID string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s := m.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending[agentID]), nil
}

// DataDepth implements store.MessagePlane.
func (m *messagePlane) DataDepth(ctx context.Context, agentID string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s := m.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data[agentID], nil
}

// GetMessage implements store.MessagePlane.
func (m *messagePlane) GetMessage(ctx context.Context, messageID string) (store.MessageRecord, error) {
	if err := ctx.Err(); err != nil {
		return store.MessageRecord{}, err
	}
	s := m.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.messages[messageID]
	if !ok || !row.tracked {
		return store.MessageRecord{}, fmt.Errorf("memory: message %q: %w", messageID, store.ErrNotFound)
	}
	return row.toRecord(messageID)
}

// OperationAttempts implements store.MessagePlane. It walks every message under the store's
// lock: a dead letter is rare, and the memory store serves one process in development.
func (m *messagePlane) OperationAttempts(ctx context.Context, op store.Operation) ([]store.MessageRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !op.Valid() {
		return nil, nil
	}
	s := m.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.MessageRecord
	for id, row := range s.messages {
		if !row.tracked || row.producer != op.ProducerID || row.corrID != op.CorrelationID {
			continue
		}
		rec, err := row.toRecord(id)
		if err != nil {
			return nil, fmt.Errorf("memory: attempts of %s/%s: %w", op.ProducerID, op.IdempotencyToken, err)
		}
		if rec.Envelope.GetIdempotencyToken() == op.IdempotencyToken {
			out = append(out, rec)
		}
	}
	slices.SortFunc(out, func(a, b store.MessageRecord) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.MessageID, b.MessageID)
	})
	return out, nil
}

// Advance implements store.MessagePlane.
func (m *messagePlane) Advance(ctx context.Context, t store.Transition, legal store.LegalFunc) (store.MessageRecord, bool, error) {
	if err := ctx.Err(); err != nil {
		return store.MessageRecord{}, false, err
	}
	s := m.s()
	// The whole check-and-write runs under the store lock, so legal sees the state it changes.
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.messages[t.MessageID]
	if !ok || !row.tracked {
		return store.MessageRecord{}, false, fmt.Errorf("memory: advance %q: %w", t.MessageID, store.ErrNotFound)
	}
	if row.state == t.To || legal == nil || !legal(row.state, t.To) {
		rec, err := row.toRecord(t.MessageID)
		return rec, false, err
	}
	at := now()
	s.setState(t.MessageID, row, t.To, t.ErrorCode, t.Note, at)
	// The idempotency entry follows in the same critical section.
	s.followEntry(t.MessageID, row, t.To, t.ErrorCode, t.Note, at)
	rec, err := row.toRecord(t.MessageID)
	if err != nil {
		return store.MessageRecord{}, false, err
	}
	return rec, true, nil
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

		traceParent: req.TraceParent,
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
	s.announce(s.addDelivery(row, id, req.Lane, false, t), t)
	return row.seq
}

// announce makes a row just added known to its agent's stream: handed straight to the inbox
// attached for the agent when none of the agent's other rows is deliverable (Attach), else
// by waking the subscribers to claim it. The caller holds s.mu.
func (s *Store) announce(d *deliveryRow, t time.Time) {
	in := s.hub.Inbox(d.agentID)
	if in != nil && !s.othersDeliverable(d, t) {
		d.leasedUntil = t.Add(in.Lease)
		d.attempts = 1
		if del, err := d.toDelivery(); err == nil && in.Put(del) {
			return
		}
		d.leasedUntil, d.attempts = time.Time{}, 0
	}
	s.hub.Wake(d.agentID)
}

// othersDeliverable reports whether a row of d's agent other than d could be claimed at t.
// The caller holds s.mu.
func (s *Store) othersDeliverable(d *deliveryRow, t time.Time) bool {
	for _, seq := range s.pending[d.agentID] {
		if o := s.deliveries[seq]; seq != d.seq && o.deliverable(t) {
			return true
		}
	}
	return false
}

// deliverable reports whether a claim at t could hand the row out: not leased (or its lease
// ran out) and within its TTL.
func (d *deliveryRow) deliverable(t time.Time) bool {
	return (d.leasedUntil.IsZero() || !d.leasedUntil.After(t)) && (d.expiresAt.IsZero() || d.expiresAt.After(t))
}

// Attach implements store.MessagePlane.
func (m *messagePlane) Attach(agentID string, lease time.Duration) (*store.Inbox, func()) {
	s := m.s()
	in := store.NewInbox(lease)
	detach := s.hub.Attach(agentID, in)
	return in, func() {
		left := detach()
		if len(left) == 0 {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, l := range left {
			if d := s.deliveries[l.Seq]; d != nil && d.confirmedAt.IsZero() && !d.leasedUntil.IsZero() {
				d.leasedUntil = time.Time{}
				d.attempts = max(d.attempts-1, 0)
			}
		}
		s.hub.Wake(agentID)
	}
}

// addDelivery puts the delivery row of a message just stored as row (with its seq) into its
// recipient's buffer; counted says it takes a slot of the buffer's capacity (data, not
// control traffic). The caller holds s.mu.
func (s *Store) addDelivery(row *messageRow, id string, lane commonpb.CommunicationClass, counted bool, t time.Time) *deliveryRow {
	d := &deliveryRow{
		seq:        row.seq,
		agentID:    row.recipient,
		messageID:  id,
		envelope:   row.envelope,
		enqueuedAt: t,
		lane:       int32(store.LaneRank(lane)),
		expiresAt:  row.expiresAt,
		counted:    counted,

		traceParent: row.traceParent,
	}
	s.deliveries[d.seq] = d
	if counted {
		s.data[row.recipient]++
	}
	// Seqs only grow, so appending keeps the buffer sorted.
	s.pending[row.recipient] = append(s.pending[row.recipient], d.seq)
	return d
}

// Subscribe implements store.MessagePlane. The subscription also ends when ctx is done; the
// channel is never closed, so a reader selecting on it after cancel does not spin.
func (m *messagePlane) Subscribe(ctx context.Context, agentID string) (<-chan struct{}, func()) {
	return m.s().hub.Subscribe(ctx, agentID)
}

func (d *deliveryRow) toDelivery() (store.Delivery, error) {
	env, err := unmarshalEnvelope(d.envelope)
	if err != nil {
		return store.Delivery{}, err
	}
	return store.Delivery{
		Seq:        d.seq,
		AgentID:    d.agentID,
		Envelope:   env,
		EnqueuedAt: d.enqueuedAt,
		Attempts:   d.attempts,
		Lane:       store.LaneClass(int(d.lane)),

		TraceParent: d.traceParent,
	}, nil
}

func (r *messageRow) toRecord(messageID string) (store.MessageRecord, error) {
	env, err := unmarshalEnvelope(r.envelope)
	if err != nil {
		return store.MessageRecord{}, err
	}
	return store.MessageRecord{
		MessageID:     messageID,
		ProducerID:    r.producer,
		RecipientID:   r.recipient,
		CorrelationID: r.corrID,
		MessageType:   r.msgType,
		State:         r.state,
		ErrorCode:     r.errCode,
		Note:          r.note,
		Envelope:      env,
		DedupKey:      r.dedupKey,
		ExpiresAt:     r.expiresAt,
		CreatedAt:     r.createdAt,
		UpdatedAt:     r.updatedAt,
		TraceParent:   r.traceParent,
	}, nil
}
