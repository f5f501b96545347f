package store

import (
	"context"
	"time"
)

// Retention deletes the finished records that are older than a cutoff, so that nothing a
// long-running deployment keeps grows without bound (docs/reliability.md, "Retention"). Each
// method deletes at most limit rows (a positive limit; the oldest first where the store can
// tell) and returns how many it deleted: a caller that wants everything older than the cutoff
// gone calls again until fewer than limit come back, so no single statement holds locks on a
// large part of a table. Every method is idempotent and safe to run from several processes
// sharing the store at once. None deletes unfinished work: a pending HITL invocation, an open
// handoff or its fence, a tool call in flight, a message still to be delivered or awaiting a
// response stays whatever its age.
type Retention interface {
	// PruneAudit deletes the audit events whose Time is before cutoff (§19).
	PruneAudit(ctx context.Context, cutoff time.Time, limit int) (int, error)
	// PruneDeadLetters deletes the dead letters that failed before cutoff (§21.1): it is
	// DLQ.PurgeDeadLetters in batches.
	PruneDeadLetters(ctx context.Context, cutoff time.Time, limit int) (int, error)
	// PruneMessages deletes the messages last updated before cutoff that are finished: a
	// tracked message in a terminal state (protocol.MessageStateTerminal) or an untracked
	// one, with no delivery row still in a buffer and no pending response awaiting a reply
	// to it (§11, 004 §1). Delivery rows themselves are MessagePlane.Prune's.
	PruneMessages(ctx context.Context, cutoff time.Time, limit int) (int, error)
	// PruneHandoffs deletes the ended handoffs (neither PENDING nor ACCEPTED) last updated
	// before cutoff (§17.6).
	PruneHandoffs(ctx context.Context, cutoff time.Time, limit int) (int, error)
	// PruneFences deletes the fences set before cutoff whose handoff is not open any more (or
	// is gone), and bumps the fences generation when it deletes any, so that the routers'
	// caches drop them (§17.6).
	PruneFences(ctx context.Context, cutoff time.Time, limit int) (int, error)
	// PruneHITL deletes the decided HITL invocations decided before cutoff (§15).
	PruneHITL(ctx context.Context, cutoff time.Time, limit int) (int, error)
	// PruneToolCalls deletes the tool calls that have their final frame, were created before
	// cutoff and stored no frame since, with their frames (§18.2).
	PruneToolCalls(ctx context.Context, cutoff time.Time, limit int) (int, error)
}
