// Package audit is the one observability sink of §19: every state transition and decision
// is written once, as a structured slog record and as a row of the audit log, with a UTC
// timestamp, the correlation_id, the actor, the event type and its details.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/protocol/hlc"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// Event is what callers record; Details is marshalled to a JSON object.
type Event struct {
	// CorrelationID links the event to a flow (§5.2).
	CorrelationID string
	// Actor is who caused it: an agent_id, "scheduler" or an operator.
	Actor string
	// Type names the event, e.g. "message.admitted".
	Type string
	// AgentID is the agent concerned, if any.
	AgentID string
	// MessageID is the message concerned, if any.
	MessageID string
	// Details holds the specifics; nil for none.
	Details map[string]any
	// Level is the slog level; zero means Info.
	Level slog.Level
	// HLC is the process's Hybrid Logical Clock reading when the event was recorded (§4);
	// Stamped sets it when the sink has a clock. Workflow code never sets it (determinism):
	// what a workflow records goes through an activity, whose sink stamps it.
	HLC string
	// TraceID is the OpenTelemetry trace the event was recorded in (§19); Stamped sets it
	// from the context's span.
	TraceID string
}

// Sink writes events to slog and to the audit log.
type Sink struct {
	log   *slog.Logger
	audit store.AuditLog
	now   func() time.Time

	// queue, when set, makes audit writes asynchronous: the hot path of the router must not
	// wait for an audit row (§13 latency), but the rows keep their order and are never dropped.
	queue chan store.Event
	done  chan struct{}
	// closing is closed when Close starts, so that a writer waiting for an unavailable
	// store gives up after closeGrace instead of holding shutdown.
	closing chan struct{}
	once    sync.Once
	mu      sync.RWMutex // guards closed and sending on queue against Close
	closed  bool

	// observe, when set, sees every event recorded or logged (SetObserver).
	observe func(Event)
	// clock stamps every event's HLC (SetClock); nil stamps none.
	clock *hlc.Clock
}

// SetClock makes the sink stamp every event it records with a reading of clock, the
// process's one HLC (§4). Call before the sink is used.
func (s *Sink) SetClock(clock *hlc.Clock) { s.clock = clock }

// SetWallClock makes the sink read the time of its rows and lines from now instead of
// time.Now: a process whose physical clock is injected (tests that skew it) records the
// times its host would. Call before the sink is used.
func (s *Sink) SetWallClock(now func() time.Time) { s.now = now }

// Clock is the HLC the sink stamps events with; nil when it has none.
func (s *Sink) Clock() *hlc.Clock {
	if s == nil {
		return nil
	}
	return s.clock
}

// SetObserver makes the sink hand every event it records or logs to observe, in the caller's
// goroutine; metrics counts the patterns' transitions with it. Call before the sink is used.
func (s *Sink) SetObserver(observe func(Event)) { s.observe = observe }

// New returns a sink over a logger and an audit log (either may be nil) that writes audit
// rows synchronously.
func New(log *slog.Logger, audit store.AuditLog) *Sink {
	if log == nil {
		log = slog.Default()
	}
	return &Sink{log: log, audit: audit, now: time.Now}
}

// auditLinger is how long an asynchronous sink's writer waits for more events after the first
// before it writes them as one batch.
const auditLinger = 5 * time.Millisecond

// NewAsync returns a sink that appends audit rows from one background goroutine, in order,
// through a queue of the given size; when the queue is full the caller writes synchronously
// instead, so nothing is dropped. Close drains it.
func NewAsync(log *slog.Logger, audit store.AuditLog, size int) *Sink {
	s := New(log, audit)
	if audit == nil {
		return s
	}
	s.queue = make(chan store.Event, size)
	s.done = make(chan struct{})
	s.closing = make(chan struct{})
	go func() {
		defer close(s.done)
		batcher, canBatch := audit.(store.BatchAuditLog)
		batch := make([]store.Event, 0, 256)
		for e := range s.queue {
			if !canBatch {
				s.appendRetrying(e)
				continue
			}
			// Collect what arrives within auditLinger, so that a busy router's events share
			// one statement (a message's life writes three) instead of each burst of two or
			// three costing one. Nobody waits on the write.
			batch = append(batch[:0], e)
			linger := time.NewTimer(auditLinger)
		collect:
			for len(batch) < cap(batch) {
				select {
				case more, ok := <-s.queue:
					if !ok {
						break collect
					}
					batch = append(batch, more)
				case <-linger.C:
					break collect
				}
			}
			linger.Stop()
			if err := s.untilAvailable(func() error { return batcher.AppendBatch(context.Background(), batch) }); err != nil {
				// One bad event must not cost the others: retry them one by one (each failure
				// is logged by append).
				s.log.Warn("audit batch append failed; appending one by one", slog.Int("events", len(batch)), slog.Any("error", err))
				for _, e := range batch {
					s.appendRetrying(e)
				}
			}
		}
	}()
	return s
}

// Close flushes an asynchronous sink's queue and stops its writer.
func (s *Sink) Close() {
	if s == nil || s.queue == nil {
		return
	}
	s.once.Do(func() {
		close(s.closing)
		s.mu.Lock()
		s.closed = true
		close(s.queue)
		s.mu.Unlock()
		<-s.done
	})
}

// untilAvailable runs write until it succeeds or fails for another reason than the store's
// unavailability (store.ErrUnavailable): a database restarting must not cost the audit rows
// of what committed just before it went away (§19: every transition is logged). Retries back
// off from 100 ms to 5 s; once Close was called they stop after closeGrace.
func (s *Sink) untilAvailable(write func() error) error {
	delay := 100 * time.Millisecond
	var closingSince time.Time
	for {
		err := write()
		if err == nil || !errors.Is(err, store.ErrUnavailable) {
			return err
		}
		select {
		case <-s.closing:
			if closingSince.IsZero() {
				closingSince = time.Now()
			} else if time.Since(closingSince) > closeGrace {
				return err
			}
		default:
		}
		s.log.Warn("audit store unavailable; retrying", slog.Duration("retry_in", delay), slog.Any("error", err))
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-s.closing:
			t.Stop()
			time.Sleep(min(delay, 200*time.Millisecond)) // keep retrying briefly while closing
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// closeGrace bounds how long Close waits for an unavailable audit store.
const closeGrace = 5 * time.Second

// appendRetrying appends one event from the writer goroutine, waiting out an unavailable
// store; the callers of Record never wait like this.
func (s *Sink) appendRetrying(e store.Event) {
	if err := s.untilAvailable(func() error { _, err := s.audit.Append(context.Background(), e); return err }); err != nil {
		s.log.Warn("audit append failed", slog.String("event", e.Type), slog.Any("error", err))
	}
}

func (s *Sink) append(ctx context.Context, e store.Event) {
	if _, err := s.audit.Append(ctx, e); err != nil {
		s.log.Warn("audit append failed", slog.String("event", e.Type), slog.Any("error", err))
	}
}

// Record logs the event and appends it to the audit log. A failing audit write is logged,
// not returned: losing the audit row must not fail the operation being audited, and the slog
// record still carries the same content.
func (s *Sink) Record(ctx context.Context, e Event) {
	if s == nil {
		return
	}
	e = s.Stamped(ctx, s.Attributed(ctx, e))
	if s.observe != nil {
		s.observe(e)
	}
	at := s.now().UTC()
	s.logAt(ctx, e, at)
	if s.audit == nil {
		return
	}
	ev := Stored(e)
	ev.Time = at
	if s.queue != nil {
		s.mu.RLock()
		queued := false
		if !s.closed {
			select {
			case s.queue <- ev:
				queued = true
			default: // full: write it ourselves rather than drop it
			}
		}
		s.mu.RUnlock()
		if queued {
			return
		}
	}
	s.append(context.WithoutCancel(ctx), ev)
}

// Attributed returns e with the principal the frontend proved for the call that caused it
// (§6.5: access decisions are logged and auditable) among its details, unless they name
// one already.
func (s *Sink) Attributed(ctx context.Context, e Event) Event {
	p := auth.FromContext(ctx)
	if p.Anonymous() {
		return e
	}
	if _, set := e.Details["principal"]; set {
		return e
	}
	d := make(map[string]any, len(e.Details)+2)
	for k, v := range e.Details {
		d[k] = v
	}
	d["principal"] = p.String()
	if p.KeyID != "" {
		d["key_id"] = p.KeyID
	}
	e.Details = d
	return e
}

// Stamped returns e with its HLC (a reading of the sink's clock) and the trace id of the
// context's span, unless it has them already: the columns by which operators order a
// correlation's events causally and join them to traces (§4, §19).
func (s *Sink) Stamped(ctx context.Context, e Event) Event {
	if s == nil {
		return e
	}
	if e.HLC == "" && s.clock != nil {
		e.HLC = s.clock.Now().String()
	}
	if e.TraceID == "" {
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			e.TraceID = sc.TraceID().String()
		}
	}
	return e
}

// Log writes e's log line only: for an event whose audit row another write stores, such as
// an admission's, which the store appends in the admission's own transaction
// (store.AdmitRequest.Audit).
func (s *Sink) Log(ctx context.Context, e Event) {
	if s == nil {
		return
	}
	if s.observe != nil {
		s.observe(e)
	}
	s.logAt(ctx, e, s.now().UTC())
}

func (s *Sink) logAt(ctx context.Context, e Event, at time.Time) {
	attrs := []any{
		slog.String("event", e.Type),
		slog.String("ts", at.Format(time.RFC3339Nano)),
	}
	if e.CorrelationID != "" {
		attrs = append(attrs, slog.String("correlation_id", e.CorrelationID))
	}
	if e.Actor != "" {
		attrs = append(attrs, slog.String("actor", e.Actor))
	}
	if e.AgentID != "" {
		attrs = append(attrs, slog.String("agent_id", e.AgentID))
	}
	if e.MessageID != "" {
		attrs = append(attrs, slog.String("message_id", e.MessageID))
	}
	if e.HLC != "" {
		attrs = append(attrs, slog.String("hlc", e.HLC))
	}
	for k, v := range e.Details {
		attrs = append(attrs, slog.Any(k, v))
	}
	s.log.Log(ctx, e.Level, e.Type, attrs...)
}

// Stored is e as an audit row, its details encoded as JSON ({} when there are none or they
// do not encode) and its time left to the store's clock.
func Stored(e Event) store.Event {
	details := []byte("{}")
	if len(e.Details) > 0 {
		if b, err := json.Marshal(e.Details); err == nil {
			details = b
		}
	}
	return store.Event{CorrelationID: e.CorrelationID, Actor: e.Actor, Type: e.Type,
		AgentID: e.AgentID, MessageID: e.MessageID, Details: details, HLC: e.HLC, TraceID: e.TraceID}
}
