package store

import (
	"context"
	"errors"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
)

// ErrDuplicateHandoff reports that a handoff with the same request_id exists (§17.6: a reuse
// answers with the existing handoff, never starts a second one).
var ErrDuplicateHandoff = errors.New("store: duplicate handoff request_id")

// HandoffRecord is the store's projection of one handoff (§17.6): what GetPendingHandoffs,
// routing and CancelDelegation read. The handoff workflow owns the state machine; this is its
// projection plus the one thing the workflow never holds, the context snapshot.
type HandoffRecord struct {
	// RequestID is the handoff's request_id (its workflow is handoff/<request_id>).
	RequestID string
	// Correlation is the correlation the context belongs to (fencing and CancelDelegation).
	Correlation string
	// From is the originating agent.
	From string
	// Target is the agent currently offered the handoff (or that accepted it).
	Target string
	// AcceptedBy is the agent that accepted, once one did.
	AcceptedBy string
	// Status is the handoff's state.
	Status handoffpb.HandoffStatus
	// Request is the HandoffRequest as received, marshalled (it holds the context snapshot).
	Request []byte
	// ContextContentType is the snapshot's content type (004 item 8).
	ContextContentType string
	// EndReason says why a handoff ended other than COMPLETED.
	EndReason string
	// CreatedAt and UpdatedAt are set by the store.
	CreatedAt, UpdatedAt time.Time
}

// Fence records that an agent handed a correlation's context away: it must not continue work
// on it (§17.6).
type Fence struct {
	// Correlation is the fenced correlation.
	Correlation string
	// AgentID is the fenced agent (the originator of the completed handoff).
	AgentID string
	// RequestID is the handoff that completed.
	RequestID string
	// NewOwner is the agent that owns the context now.
	NewOwner string
	// At is when the fence was set.
	At time.Time
}

// Handoffs holds the handoff projection and the fences.
type Handoffs interface {
	// CreateHandoff stores a new handoff and writes outbox entries (its workflow's start) to the
	// Outbox in the same transaction, leased for OutboxLease, and returns the record as
	// stored. The store sets CreatedAt and UpdatedAt; a zero Status is stored as PENDING. When
	// the request_id exists it writes nothing (neither record nor handoffs) and returns the
	// existing record with ErrDuplicateHandoff: of concurrent creations of one request_id,
	// exactly one succeeds.
	CreateHandoff(ctx context.Context, rec HandoffRecord, entries ...OutboxEntry) (HandoffRecord, error)
	// GetHandoff returns one handoff, or ErrNotFound.
	GetHandoff(ctx context.Context, requestID string) (HandoffRecord, error)
	// UpdateHandoff records a transition: status, the current target, the accepting agent and
	// the end reason (empty strings, and HANDOFF_STATUS_UNSPECIFIED, keep the stored values)
	// and sets UpdatedAt; ErrNotFound for an unknown id.
	UpdateHandoff(ctx context.Context, requestID string, status handoffpb.HandoffStatus, target, acceptedBy, endReason string) error
	// ListOfferedTo returns the PENDING handoffs whose Target is agentID, oldest first.
	ListOfferedTo(ctx context.Context, agentID string) ([]HandoffRecord, error)
	// ListAcceptedBy returns the ACCEPTED handoffs whose AcceptedBy is agentID (Target when
	// no AcceptedBy was recorded), oldest first: the work an agent took and has not
	// completed, which it recovers after a restart (§17.6).
	ListAcceptedBy(ctx context.Context, agentID string) ([]HandoffRecord, error)
	// ListByCorrelation returns every handoff of a correlation, oldest first.
	ListByCorrelation(ctx context.Context, correlation string) ([]HandoffRecord, error)
	// OpenDelegations counts, per agent, the handoffs PENDING with it as Target or ACCEPTED by
	// it (AcceptedBy, or Target when no AcceptedBy was recorded); agents with none are absent.
	OpenDelegations(ctx context.Context) (map[string]int, error)
	// Fence records a fence; a zero At means now. Setting a fence on a (Correlation, AgentID)
	// that has one changes nothing (the first stands) and leaves FencesGeneration as it was.
	Fence(ctx context.Context, f Fence) error
	// Fenced returns the fence of (correlation, agentID), if there is one.
	Fenced(ctx context.Context, correlation, agentID string) (Fence, bool, error)
	// ListFences returns every fence, ordered by correlation and agent; the router holds them
	// all so that no message costs a store round trip (router/fence.go).
	ListFences(ctx context.Context) ([]Fence, error)
	// FencesGeneration returns a number that changes whenever a fence is added; frontends
	// poll it to refresh the fences they cache.
	FencesGeneration(ctx context.Context) (int64, error)
}
