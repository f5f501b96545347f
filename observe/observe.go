// Package observe is the one observability sink of §19: every state transition and decision
// is written once, as a structured slog record and as a row of the audit log, with a UTC
// timestamp, the correlation_id, the actor, the event type and its details.
package observe

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

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
}

// Sink writes events to slog and to the audit log.
type Sink struct {
	log   *slog.Logger
	audit store.AuditLog
	now   func() time.Time
}

// New returns a sink over a logger and an audit log (either may be nil).
func New(log *slog.Logger, audit store.AuditLog) *Sink {
	if log == nil {
		log = slog.Default()
	}
	return &Sink{log: log, audit: audit, now: time.Now}
}

// Record logs the event and appends it to the audit log. A failing audit write is logged,
// not returned: losing the audit row must not fail the operation being audited, and the slog
// record still carries the same content.
func (s *Sink) Record(ctx context.Context, e Event) {
	if s == nil {
		return
	}
	at := s.now().UTC()
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
	for k, v := range e.Details {
		attrs = append(attrs, slog.Any(k, v))
	}
	s.log.Log(ctx, e.Level, e.Type, attrs...)
	if s.audit == nil {
		return
	}
	details := []byte("{}")
	if len(e.Details) > 0 {
		if b, err := json.Marshal(e.Details); err == nil {
			details = b
		}
	}
	if _, err := s.audit.Append(ctx, store.Event{
		Time: at, CorrelationID: e.CorrelationID, Actor: e.Actor, Type: e.Type,
		AgentID: e.AgentID, MessageID: e.MessageID, Details: details,
	}); err != nil {
		s.log.Warn("audit append failed", slog.String("event", e.Type), slog.Any("error", err))
	}
}
