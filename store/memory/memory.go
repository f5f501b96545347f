// Package memory is the in-process implementation of store.Store: the embedded default for
// `sw4rm dev` and unit tests. Everything lives in mutex-protected maps and is lost when the
// process exits, like the Temporal dev server's default database. It passes the same
// conformance suite (store/storetest) as store/postgres, so code tested against it behaves
// the same in production.
package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/internal/hub"
)

// defaultAuditLimit is the List limit used when AuditFilter.Limit is zero (see store.AuditFilter).
const defaultAuditLimit = 1000

// Store is the in-memory store.Store. The zero value is not usable; create one with New.
type Store struct {
	mu sync.Mutex

	// dlq is the dead-letter queue; it has its own lock (see dlq.go).
	dlq *dlqState

	// seq is the last delivery seq handed out; seqs start at 1 and are global to the store.
	seq int64
	// messages holds every admitted or recorded message_id, tracked or not, so that
	// duplicates are detected even for untracked control traffic.
	messages map[string]*messageRow
	// deliveries holds the delivery rows by seq, unconfirmed and confirmed; Prune deletes
	// confirmed ones (and Expire/CancelUndelivered never-claimed ones).
	deliveries map[int64]*deliveryRow
	// pending lists each agent's unconfirmed seqs in increasing order (the inbound buffer).
	pending map[string][]int64
	// data counts each agent's unconfirmed rows admitted with a capacity: what the capacity
	// limits (§13), without the control traffic pending also holds.
	data map[string]int
	// sent holds the ids of tracked messages in state SENT: the candidates of Expire.
	sent map[string]struct{}
	// idem is the idempotency cache by (producer, key).
	idem map[idemKey]*store.IdempotencyEntry
	// horizons is each agent's resume horizon: the highest seq Prune deleted.
	horizons map[string]int64
	// responses holds the pending responses by request message_id; resolving or expiring one
	// removes it.
	responses map[string]*store.PendingResponse

	agents map[string]*agentRow

	eventSeq int64
	events   []store.Event

	artifacts []store.Artifact

	// hitl holds the HITL invocation projection by invocation_id; the records own their byte
	// slices (copied on the way in and out).
	hitl map[string]*store.HITLRecord

	// handoffs holds the undelivered handoffs to Temporal by ID (see outbox.go);
	// handoffOrder numbers them in insertion order.
	handoffs     map[string]*handoffRow
	handoffOrder int64

	// hub fans wake-ups out to Subscribe channels. It has its own lock and never blocks, so
	// it is safe to wake it while s.mu is held.
	hub *hub.Hub
}

type messageRow struct {
	tracked   bool
	recipient string
	producer  string
	corrID    string
	msgType   commonpb.MessageType
	state     commonpb.EnvelopeState
	errCode   commonpb.ErrorCode
	note      string
	envelope  []byte
	createdAt time.Time
	updatedAt time.Time
	expiresAt time.Time // zero: no TTL
	// dedupProducer and dedupKey name the idempotency entry it was admitted under.
	dedupProducer string
	dedupKey      string
	// seq is the message's delivery row (0 when it never had one).
	seq int64
}

type deliveryRow struct {
	seq         int64
	agentID     string
	messageID   string
	envelope    []byte
	enqueuedAt  time.Time
	leasedUntil time.Time // zero when not leased
	attempts    int
	lane        int32     // store.LaneRank of the row's communication class
	expiresAt   time.Time // zero: no TTL
	confirmedAt time.Time // zero while the row is in the buffer
	// counted marks a row admitted with a capacity (data), which takes a slot of it.
	counted bool
}

type agentRow struct {
	descriptor    []byte
	state         commonpb.AgentState
	health        map[string]string
	registeredAt  time.Time
	lastHeartbeat time.Time
}

var _ store.Store = (*Store)(nil)

// New returns an empty in-memory store.
func New() *Store {
	return &Store{
		messages:   make(map[string]*messageRow),
		deliveries: make(map[int64]*deliveryRow),
		pending:    make(map[string][]int64),
		data:       make(map[string]int),
		sent:       make(map[string]struct{}),
		idem:       make(map[idemKey]*store.IdempotencyEntry),
		horizons:   make(map[string]int64),
		responses:  make(map[string]*store.PendingResponse),
		agents:     make(map[string]*agentRow),
		hitl:       make(map[string]*store.HITLRecord),
		handoffs:   make(map[string]*handoffRow),
		hub:        hub.New(),
		dlq:        newDLQState(),
	}
}

// Messages returns the routed message plane.
func (s *Store) Messages() store.MessagePlane { return (*messagePlane)(s) }

// Registry returns the agent registry projection.
func (s *Store) Registry() store.Registry { return (*registry)(s) }

// Audit returns the audit log.
func (s *Store) Audit() store.AuditLog { return (*auditLog)(s) }

// Artifacts returns the negotiation artifact store.
func (s *Store) Artifacts() store.Artifacts { return (*artifacts)(s) }

// HITL returns the human-in-the-loop invocation projection.
func (s *Store) HITL() store.HITL { return (*hitl)(s) }

// DLQ returns the dead-letter queue.
func (s *Store) DLQ() store.DLQ { return s.dlq }

// Kind returns "memory".
func (s *Store) Kind() string { return "memory" }

// Close ends every subscription. The data stays readable; the store has no connections or
// goroutines to release.
func (s *Store) Close() {
	s.hub.Close()
}

// now returns the current time in UTC at microsecond precision, the precision PostgreSQL
// keeps, so both implementations hand back identical timestamps.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// normTime converts a caller-supplied time the same way PostgreSQL's timestamptz would.
func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Microsecond)
}

func marshalEnvelope(env *commonpb.Envelope) ([]byte, error) {
	b, err := proto.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("memory: marshal envelope: %w", err)
	}
	return b, nil
}

// unmarshalEnvelope decodes stored bytes into a fresh message, so every caller gets its own
// copy and can never reach the stored state.
func unmarshalEnvelope(b []byte) (*commonpb.Envelope, error) {
	env := &commonpb.Envelope{}
	if err := proto.Unmarshal(b, env); err != nil {
		return nil, fmt.Errorf("memory: unmarshal envelope: %w", err)
	}
	return env, nil
}

// ---------------------------------------------------------------------------------------------
// Message plane

type messagePlane Store

func (m *messagePlane) s() *Store { return (*Store)(m) }

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
	s.addDelivery(row, id, req.Lane, req.Capacity > 0, t)
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
	s.hub.Wake(req.RecipientID)
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
		if (!d.leasedUntil.IsZero() && d.leasedUntil.After(t)) || (!d.expiresAt.IsZero() && !d.expiresAt.After(t)) {
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
	}, nil
}

// ---------------------------------------------------------------------------------------------
// Registry

type registry Store

func (r *registry) s() *Store { return (*Store)(r) }

// PutAgent implements store.Registry.
func (r *registry) PutAgent(ctx context.Context, rec store.AgentRecord, handoffs ...store.Handoff) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	id := rec.Descriptor.GetAgentId()
	if id == "" {
		return errors.New("memory: put agent: descriptor with an agent_id is required")
	}
	b, err := proto.Marshal(rec.Descriptor)
	if err != nil {
		return fmt.Errorf("memory: put agent %q: marshal descriptor: %w", id, err)
	}
	row := &agentRow{
		descriptor:    b,
		state:         rec.State,
		health:        copyHealth(rec.Health),
		registeredAt:  normTime(rec.RegisteredAt),
		lastHeartbeat: normTime(rec.LastHeartbeat),
	}
	if row.registeredAt.IsZero() {
		row.registeredAt = now()
	}
	s := r.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.agents[id] = row
	at := now()
	for _, h := range handoffs {
		s.addHandoffLocked(h, store.HandoffLease, at)
	}
	return nil
}

// GetAgent implements store.Registry.
func (r *registry) GetAgent(ctx context.Context, agentID string) (store.AgentRecord, error) {
	if err := ctx.Err(); err != nil {
		return store.AgentRecord{}, err
	}
	s := r.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.agents[agentID]
	if !ok {
		return store.AgentRecord{}, fmt.Errorf("memory: agent %q: %w", agentID, store.ErrNotFound)
	}
	return row.toRecord()
}

// ListAgents implements store.Registry.
func (r *registry) ListAgents(ctx context.Context) ([]store.AgentRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := r.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := slices.Sorted(maps.Keys(s.agents))
	out := make([]store.AgentRecord, 0, len(ids))
	for _, id := range ids {
		rec, err := s.agents[id].toRecord()
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, nil
}

// DeleteAgent implements store.Registry.
func (r *registry) DeleteAgent(ctx context.Context, agentID string, handoffs ...store.Handoff) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s := r.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.agents[agentID]
	if !ok {
		return false, nil
	}
	delete(s.agents, agentID)
	at := now()
	for _, h := range handoffs {
		s.addHandoffLocked(h, store.HandoffLease, at)
	}
	return true, nil
}

// RecordHeartbeat implements store.Registry.
func (r *registry) RecordHeartbeat(ctx context.Context, agentID string, health map[string]string, at time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := r.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.agents[agentID]
	if !ok {
		return fmt.Errorf("memory: heartbeat of %q: %w", agentID, store.ErrNotFound)
	}
	row.health = copyHealth(health)
	row.lastHeartbeat = normTime(at)
	return nil
}

// SetAgentState implements store.Registry.
func (r *registry) SetAgentState(ctx context.Context, agentID string, state commonpb.AgentState) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := r.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.agents[agentID]
	if !ok {
		return fmt.Errorf("memory: set state of %q: %w", agentID, store.ErrNotFound)
	}
	row.state = state
	return nil
}

func (a *agentRow) toRecord() (store.AgentRecord, error) {
	desc := &registrypb.AgentDescriptor{}
	if err := proto.Unmarshal(a.descriptor, desc); err != nil {
		return store.AgentRecord{}, fmt.Errorf("memory: unmarshal descriptor: %w", err)
	}
	return store.AgentRecord{
		Descriptor:    desc,
		State:         a.state,
		Health:        copyHealth(a.health),
		RegisteredAt:  a.registeredAt,
		LastHeartbeat: a.lastHeartbeat,
	}, nil
}

// copyHealth copies a health map; an empty map becomes nil, as it does in store/postgres.
func copyHealth(h map[string]string) map[string]string {
	if len(h) == 0 {
		return nil
	}
	return maps.Clone(h)
}

// ---------------------------------------------------------------------------------------------
// Audit log

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

// ---------------------------------------------------------------------------------------------
// Artifacts

type artifacts Store

func (a *artifacts) s() *Store { return (*Store)(a) }

// AppendArtifact implements store.Artifacts.
func (a *artifacts) AppendArtifact(ctx context.Context, art store.Artifact) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if art.NegotiationID == "" {
		return errors.New("memory: append artifact: negotiation_id is required")
	}
	art.Content = cloneBytes(art.Content)
	// CreatedAt is when the store kept it, whatever the caller put there.
	art.CreatedAt = now()
	s := a.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.artifacts {
		if x.NegotiationID == art.NegotiationID && x.Kind == art.Kind && x.Version == art.Version {
			return fmt.Errorf("memory: artifact %s/%s/%s: %w", art.NegotiationID, art.Kind, art.Version, store.ErrDuplicateArtifact)
		}
	}
	s.artifacts = append(s.artifacts, art)
	return nil
}

// ListArtifacts implements store.Artifacts.
func (a *artifacts) ListArtifacts(ctx context.Context, negotiationID, kind string) ([]store.Artifact, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := a.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Artifact
	for _, x := range s.artifacts {
		if x.NegotiationID != negotiationID || (kind != "" && x.Kind != kind) {
			continue
		}
		x.Content = cloneBytes(x.Content)
		out = append(out, x)
	}
	return out, nil
}

// cloneBytes copies b; empty becomes nil, as a NULL column reads back in store/postgres.
func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return slices.Clone(b)
}
