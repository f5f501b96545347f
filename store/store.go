// Package store defines the persistent state that SW4RM keeps outside Temporal: the routed
// message plane (per-agent inbound buffers and ACK states, §11–§13), the registry projection
// (§14), the audit log (§19) and negotiation artifacts. Two implementations satisfy these
// interfaces — store/memory for `sw4rm dev` and unit tests, store/postgres for production —
// and store/storetest holds the one conformance suite that both must pass.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
)

// Sentinel errors shared by every implementation; callers match them with errors.Is.
var (
	// ErrNotFound reports that the addressed record does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrBufferFull reports that the recipient's inbound buffer is at capacity (§13).
	ErrBufferFull = errors.New("store: inbound buffer full")
	// ErrDuplicateMessage reports that a message with the same message_id was already admitted.
	ErrDuplicateMessage = errors.New("store: duplicate message_id")
	// ErrAlreadyDecided reports that a HITL invocation was already completed.
	ErrAlreadyDecided = errors.New("store: hitl invocation already decided")
	// ErrDuplicateArtifact reports that an artifact with the same (negotiation_id, kind, version) exists.
	ErrDuplicateArtifact = errors.New("store: duplicate artifact version")
)

// Store bundles the interfaces that the frontend, the activities and the CLI use.
type Store interface {
	// Messages returns the routed message plane.
	Messages() MessagePlane
	// Registry returns the agent registry projection.
	Registry() Registry
	// Audit returns the audit log.
	Audit() AuditLog
	// Artifacts returns the negotiation artifact store.
	Artifacts() Artifacts
	// HITL returns the human-in-the-loop invocation projection.
	HITL() HITL
	// Kind names the implementation ("memory" or "postgres") for logs.
	Kind() string
	// Close releases connections and stops background work.
	Close()
}

// MessageRecord is the router's durable view of one message attempt (one message_id) and
// where it stands in the lifecycle of §11 and Appendix C.
type MessageRecord struct {
	// MessageID is the envelope's message_id (unique per attempt).
	MessageID string
	// ProducerID is the envelope's producer_id.
	ProducerID string
	// RecipientID is the agent the router resolved as the destination.
	RecipientID string
	// CorrelationID is the envelope's correlation_id.
	CorrelationID string
	// MessageType is the envelope's message_type.
	MessageType commonpb.MessageType
	// State is the current lifecycle state.
	State commonpb.EnvelopeState
	// ErrorCode is set when State is REJECTED, FAILED or TIMED_OUT.
	ErrorCode commonpb.ErrorCode
	// Note is a human-readable explanation of the last transition.
	Note string
	// Envelope is the envelope as admitted (a copy; never mutated by the store).
	Envelope *commonpb.Envelope
	// CreatedAt is when the message was admitted (or rejected).
	CreatedAt time.Time
	// UpdatedAt is when State last changed.
	UpdatedAt time.Time
}

// AdmitRequest asks the message plane to admit one envelope into a recipient's inbound buffer.
type AdmitRequest struct {
	// Envelope is the envelope to store and deliver; its message_id must be set.
	Envelope *commonpb.Envelope
	// RecipientID is the agent whose buffer receives the envelope.
	RecipientID string
	// Capacity is the buffer limit to enforce: the admission fails with ErrBufferFull when the
	// recipient already holds Capacity unconfirmed deliveries. Zero means no limit; the router
	// uses that for its own control traffic (ACK forwards, NACKs, registry notifications), which
	// must never be dropped and is bounded by what the recipient itself sent.
	Capacity int
	// Track creates a MessageRecord in state SENT so the message's lifecycle can be advanced by
	// ACKs. Control traffic that nobody acknowledges (ACK forwards, NACKs) is not tracked.
	Track bool
}

// Delivery is one row of an agent's inbound buffer as handed to its stream.
type Delivery struct {
	// Seq is the row's position: unique and increasing across the whole store.
	Seq int64
	// AgentID is the recipient.
	AgentID string
	// Envelope is the stored envelope.
	Envelope *commonpb.Envelope
	// EnqueuedAt is when the row was admitted.
	EnqueuedAt time.Time
	// Attempts counts how many times the row has been claimed for delivery.
	Attempts int
}

// Transition asks for a lifecycle change of one message.
type Transition struct {
	// MessageID names the message.
	MessageID string
	// To is the requested state.
	To commonpb.EnvelopeState
	// ErrorCode accompanies terminal error states.
	ErrorCode commonpb.ErrorCode
	// Note explains the change.
	Note string
}

// LegalFunc decides whether a lifecycle transition is allowed; protocol.MessageTransitionLegal
// is the one the router uses. The store calls it while holding the record's lock so that the
// check and the write are atomic.
type LegalFunc func(from, to commonpb.EnvelopeState) bool

// MessagePlane is the routed message plane: inbound buffers, delivery confirmation and the
// message lifecycle. Every method is safe for concurrent use by many frontends sharing one
// store.
type MessagePlane interface {
	// Admit stores the envelope and appends it to the recipient's buffer atomically. It
	// returns the new delivery seq. With Capacity > 0 and the buffer full it returns
	// ErrBufferFull and, if Track is set, records the message as REJECTED with BUFFER_FULL so
	// the rejection is visible (§13: never a silent drop). A message_id that was already
	// admitted or recorded returns ErrDuplicateMessage and changes nothing.
	Admit(ctx context.Context, req AdmitRequest) (seq int64, err error)

	// Claim hands out up to limit deliverable rows of agentID in seq order and leases them for
	// lease: a row is deliverable when it is unconfirmed and not leased, or its lease expired.
	// Each claimed row's Attempts is incremented.
	Claim(ctx context.Context, agentID string, limit int, lease time.Duration) ([]Delivery, error)

	// ReleaseLeases makes every unconfirmed row of agentID deliverable again at once; the
	// router calls it when the agent opens a new stream, so whatever the previous stream got
	// but never confirmed is redelivered.
	ReleaseLeases(ctx context.Context, agentID string) error

	// Confirm marks the row (agentID, seq) as confirmed and removes it from the buffer. When
	// messageID is not empty it must match the row's message_id. It returns the confirmed row
	// and true, or false (and no error) for an unknown seq, an already-confirmed seq, another
	// agent's seq or a mismatched message_id.
	Confirm(ctx context.Context, agentID string, seq int64, messageID string) (Delivery, bool, error)

	// Depth returns how many unconfirmed rows agentID holds.
	Depth(ctx context.Context, agentID string) (int, error)

	// GetMessage returns a tracked message's record, or ErrNotFound.
	GetMessage(ctx context.Context, messageID string) (MessageRecord, error)

	// Advance applies a lifecycle transition if legal(current, t.To) holds. It returns the
	// record after the call and whether the transition was applied; an illegal or no-op
	// transition returns the unchanged record and false. Unknown messages give ErrNotFound.
	Advance(ctx context.Context, t Transition, legal LegalFunc) (MessageRecord, bool, error)

	// Subscribe returns a channel that receives a value (coalesced, never blocking the sender)
	// whenever a row may have become deliverable for agentID — also when it was admitted by
	// another process sharing the store — and a func that ends the subscription.
	Subscribe(ctx context.Context, agentID string) (<-chan struct{}, func())
}

// AgentRecord is the registry's projection of one agent (§14).
type AgentRecord struct {
	// Descriptor is the descriptor the agent registered with.
	Descriptor *registrypb.AgentDescriptor
	// State is the lifecycle state last recorded by the agent's lifecycle workflow (§8).
	State commonpb.AgentState
	// Health is the health map of the last heartbeat.
	Health map[string]string
	// RegisteredAt is when the agent (last) registered.
	RegisteredAt time.Time
	// LastHeartbeat is when the agent last sent a heartbeat; zero if never.
	LastHeartbeat time.Time
}

// Registry is the agent registry projection; the lifecycle workflow owns the state machine,
// this is what routing and discovery read.
type Registry interface {
	// PutAgent inserts or replaces an agent record (registration and re-registration).
	PutAgent(ctx context.Context, rec AgentRecord) error
	// GetAgent returns one agent, or ErrNotFound.
	GetAgent(ctx context.Context, agentID string) (AgentRecord, error)
	// ListAgents returns every registered agent ordered by agent_id.
	ListAgents(ctx context.Context) ([]AgentRecord, error)
	// DeleteAgent removes an agent; it reports whether one was removed.
	DeleteAgent(ctx context.Context, agentID string) (bool, error)
	// RecordHeartbeat stores a heartbeat's time and health map, or returns ErrNotFound.
	RecordHeartbeat(ctx context.Context, agentID string, health map[string]string, at time.Time) error
	// SetAgentState records the lifecycle state, or returns ErrNotFound.
	SetAgentState(ctx context.Context, agentID string, state commonpb.AgentState) error
}

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
}

// Artifact is one versioned negotiation artifact (activity.proto).
type Artifact struct {
	// NegotiationID groups the artifacts of one negotiation.
	NegotiationID string
	// Kind is the artifact kind, e.g. "proposal" or "decision".
	Kind string
	// Version distinguishes revisions of the same kind.
	Version string
	// ContentType is the MIME type of Content.
	ContentType string
	// Content is the artifact body.
	Content []byte
	// CreatedAt is when it was stored.
	CreatedAt time.Time
}

// Artifacts stores negotiation artifacts.
type Artifacts interface {
	// AppendArtifact stores an artifact, or returns ErrDuplicateArtifact when the same
	// (NegotiationID, Kind, Version) exists.
	AppendArtifact(ctx context.Context, a Artifact) error
	// ListArtifacts returns the artifacts of a negotiation, filtered by kind when kind is not
	// empty, in insertion order.
	ListArtifacts(ctx context.Context, negotiationID, kind string) ([]Artifact, error)
}

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
	// Invocation is the full invocation as JSON (hitlsignals.Invocation).
	Invocation []byte
	// Outcome is the outcome as JSON (hitlsignals.Outcome) once decided.
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
