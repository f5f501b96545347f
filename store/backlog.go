package store

import "context"

// Backlog counts what waits on people or is in flight, across every process that shares the
// store: the gauges that metrics reads at scrape time (docs/observability.md, "Metrics").
type Backlog struct {
	// PendingHITL counts the HITL invocations waiting for a decision (§15).
	PendingHITL int64
	// DeadLetters counts the dead letters not requeued (§21.1).
	DeadLetters int64
	// OpenHandoffs counts the handoffs PENDING or ACCEPTED: offered and not yet answered, or
	// taken and not yet completed (§17.6).
	OpenHandoffs int64
	// OpenToolCalls counts the tool calls without their final frame: those still running
	// (§18.2).
	OpenToolCalls int64
}

// BacklogCounter counts the Backlog; Store includes it.
type BacklogCounter interface {
	// Backlog returns the counts, each one indexed read of the open rows.
	Backlog(ctx context.Context) (Backlog, error)
}
