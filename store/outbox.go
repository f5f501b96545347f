package store

import (
	"context"
	"time"
)

// Handoff is a promise that a store write makes to Temporal: one signal or workflow start
// that must reach its workflow after the write committed, even when Temporal is unreachable
// at that moment or the process dies right after the commit. It is written in the same
// transaction as the state it reports (the transactional outbox pattern), so the store
// write and the hand-off can never disagree; a relay (package outbox) then delivers it until
// Temporal takes it. Delivery is at least once: whatever a handoff does must be idempotent
// (a repeated signal changes nothing, a repeated start attaches to the running workflow).
type Handoff struct {
	// ID identifies the handoff; a UUID chosen by the writer.
	ID string
	// Kind names the relay handler that delivers it, e.g. "scheduler.control_ack".
	Kind string
	// WorkflowID is the workflow it is for; logs, metrics and operators read it.
	WorkflowID string
	// Payload is the handler's argument, JSON encoded.
	Payload []byte
	// CreatedAt is when it was written (set by the store).
	CreatedAt time.Time
	// Attempts counts failed delivery attempts.
	Attempts int
	// LastError is the last failed attempt's error, for operators.
	LastError string
}

// Outbox holds the handoffs to Temporal that writes made and the relay has not delivered
// yet. A handoff is claimable once its lease has passed: a writer holds the lease while it
// makes the first attempt in-line, and each claim or failed attempt sets a new one, so any
// number of processes can relay from one store without delivering a handoff twice at once.
type Outbox interface {
	// AddHandoffs stores handoffs that go with no other write (or follow one that could not
	// include them), leased to the caller for lease so that it can make the first attempt.
	AddHandoffs(ctx context.Context, hs []Handoff, lease time.Duration) error
	// ClaimHandoffs leases up to limit handoffs whose lease has passed, oldest first, for
	// lease, and returns them.
	ClaimHandoffs(ctx context.Context, lease time.Duration, limit int) ([]Handoff, error)
	// CompleteHandoffs removes delivered handoffs; unknown IDs are ignored.
	CompleteHandoffs(ctx context.Context, ids []string) error
	// RetryHandoff records a failed attempt (Attempts+1, LastError) and makes the handoff
	// claimable again after delay; an unknown ID is ignored.
	RetryHandoff(ctx context.Context, id string, delay time.Duration, lastErr string) error
	// PendingHandoffs returns up to limit undelivered handoffs, oldest first, for operators
	// and tests.
	PendingHandoffs(ctx context.Context, limit int) ([]Handoff, error)
}

// HandoffLease is how long a writer holds a handoff it wrote for its in-line first attempt
// before a relay may claim it. It bounds how late a handoff whose writer died is delivered.
const HandoffLease = 5 * time.Second
