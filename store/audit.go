package store

import (
	"context"
	"time"
)

// Event is one audit/observability record (§19): every state transition and every decision.
type Event struct {
	// ID is assigned by the store on Append (increasing).
	ID int64
	// Time is the event time in UTC.
	Time time.Time
	// CorrelationID links the event to a flow (§5.2).
	CorrelationID string
	// Actor is who caused the event: an agent_id, "scheduler", or an operator.
	Actor string
	// Type names the event, e.g. "message.admitted" or "agent.state".
	Type string
	// AgentID is the agent the event concerns, if any.
	AgentID string
	// MessageID is the message the event concerns, if any.
	MessageID string
	// Details is a JSON object with the event's specifics.
	Details []byte
	// HLC is the Hybrid Logical Clock reading of the process that recorded the event, in
	// protocol/hlc's text form (§4); "" for events recorded without one. Text order is
	// causal order.
	HLC string
	// TraceID is the OpenTelemetry trace the event was recorded in (32 hex digits, §19);
	// "" when none was.
	TraceID string
}

// AuditFilter selects events; zero fields match everything.
type AuditFilter struct {
	// CorrelationID matches exactly when set.
	CorrelationID string
	// AgentID matches exactly when set.
	AgentID string
	// MessageID matches exactly when set.
	MessageID string
	// TypePrefix matches events whose Type starts with it.
	TypePrefix string
	// Since keeps events at or after it.
	Since time.Time
	// Until keeps events before it.
	Until time.Time
	// OrderByHLC orders the result by HLC (then ID) rather than by ID: a correlation's causal
	// order when its events were recorded by processes whose clocks disagree. The Limit still
	// keeps the newest matches by ID.
	OrderByHLC bool
	// Limit caps the result (newest last); 0 means 1000.
	Limit int
}

// AuditLog is the append-only audit trail.
type AuditLog interface {
	// Append stores an event and returns it with its ID (and Time, if it was zero) filled in.
	Append(ctx context.Context, e Event) (Event, error)
	// List returns matching events in ID order, oldest first; with more than Limit matches it
	// returns the newest Limit of them.
	List(ctx context.Context, f AuditFilter) ([]Event, error)
	// MaxHLC returns the highest HLC among the events ("" when none has one): a process seeds
	// its clock with it at startup, so it never stamps below what the store holds (§4).
	MaxHLC(ctx context.Context) (string, error)
}

// BatchAuditLog is implemented by audit logs that can append several events in one round
// trip, in order; the observability sink's background writer uses it when available.
type BatchAuditLog interface {
	// AppendBatch appends the events in order (IDs increasing in slice order) and returns
	// an error if any could not be appended; a failure may leave a prefix appended.
	AppendBatch(ctx context.Context, events []Event) error
}
