package store

import (
	"context"
	"time"
)

// OutboxEntry is a promise that a store write makes to Temporal: one signal or workflow start
// that must reach its workflow after the write committed, even when Temporal is unreachable
// at that moment or the process dies right after the commit. It is written in the same
// transaction as the state it reports (the transactional outbox pattern), so the store
// write and the outbox entry can never disagree; a relay (package outbox) then delivers it until
// Temporal takes it. Delivery is at least once: whatever an entry does must be idempotent
// (a repeated signal changes nothing, a repeated start attaches to the running workflow).
type OutboxEntry struct {
	// ID identifies the entry; a UUID chosen by the writer.
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

// Outbox holds the entries to Temporal that writes made and the relay has not delivered
// yet. An entry is claimable once its lease has passed: a writer holds the lease while it
// makes the first attempt in-line, and each claim or failed attempt sets a new one, so any
// number of processes can relay from one store without delivering an entry twice at once.
type Outbox interface {
	// Add stores entries that go with no other write (or follow one that could not
	// include them), leased to the caller for lease so that it can make the first attempt.
	Add(ctx context.Context, hs []OutboxEntry, lease time.Duration) error
	// Claim leases up to limit entries whose lease has passed, oldest first, for
	// lease, and returns them.
	Claim(ctx context.Context, lease time.Duration, limit int) ([]OutboxEntry, error)
	// Complete removes delivered entries; unknown IDs are ignored.
	Complete(ctx context.Context, ids []string) error
	// Retry records a failed attempt (Attempts+1, LastError) and makes the entry
	// claimable again after delay; an unknown ID is ignored.
	Retry(ctx context.Context, id string, delay time.Duration, lastErr string) error
	// Pending returns up to limit undelivered entries, oldest first, for operators
	// and tests.
	Pending(ctx context.Context, limit int) ([]OutboxEntry, error)
}

// OutboxLease is how long a writer holds an entry it wrote for its in-line first attempt
// before a relay may claim it. It bounds how late an entry whose writer died is delivered.
const OutboxLease = 5 * time.Second
