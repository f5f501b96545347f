package store

import (
	"context"
	"time"
)

// HITL invocation statuses.
const (
	// HITLPending marks an invocation waiting for a decision.
	HITLPending = "pending"
	// HITLDecided marks an invocation with an outcome (a human's or a fallback's).
	HITLDecided = "decided"
)

// HITLRecord is the projection of one HITL invocation (§15): what operators list and decide.
// The workflow hitl/<invocation_id> is the source of truth; this row mirrors it for queries.
type HITLRecord struct {
	// InvocationID identifies the invocation (and its workflow, hitl/<invocation_id>).
	InvocationID string
	// WorkflowID is the HITL workflow's ID.
	WorkflowID string
	// ReasonType is the §15 reason type's enum name, e.g. "SECURITY_APPROVAL".
	ReasonType string
	// CorrelationID links the invocation to the flow that raised it.
	CorrelationID string
	// Subject is a short human-readable subject ("task t1 in repo r").
	Subject string
	// Priority is the invocation's priority.
	Priority int32
	// Deadline is when the fallback applies.
	Deadline time.Time
	// Status is HITLPending or HITLDecided.
	Status string
	// Invocation is the full invocation as JSON (hitl.Invocation).
	Invocation []byte
	// Outcome is the outcome as JSON (hitl.Outcome) once decided.
	Outcome []byte
	// CreatedAt is when the invocation was raised.
	CreatedAt time.Time
	// DecidedAt is when it was decided; zero while pending.
	DecidedAt time.Time
}

// HITLFilter selects invocations; zero fields match everything.
type HITLFilter struct {
	// Status matches exactly when set.
	Status string
	// ReasonType matches exactly when set.
	ReasonType string
	// Limit caps the result; 0 means 1000.
	Limit int
}

// HITL is the projection of HITL invocations.
type HITL interface {
	// PutInvocation records a pending invocation. Recording the same InvocationID again while
	// it is pending replaces it (an activity retry); once decided it returns ErrAlreadyDecided.
	PutInvocation(ctx context.Context, rec HITLRecord) error
	// CompleteInvocation stores the outcome and marks the invocation decided. Completing an
	// already decided invocation with the same outcome bytes is a no-op (idempotent retry);
	// with different bytes it returns ErrAlreadyDecided and changes nothing. Unknown ids give
	// ErrNotFound.
	CompleteInvocation(ctx context.Context, invocationID string, outcome []byte, decidedAt time.Time) error
	// GetInvocation returns one invocation, or ErrNotFound.
	GetInvocation(ctx context.Context, invocationID string) (HITLRecord, error)
	// ListInvocations returns matching invocations ordered by creation time (then
	// invocation_id), oldest first; with more than Limit matches it returns the newest Limit.
	ListInvocations(ctx context.Context, f HITLFilter) ([]HITLRecord, error)
}
