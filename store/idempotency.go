package store

import (
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
)

// Dedup identifies the logical operation of a tracked message for idempotency (§11.2, §11.3).
// Keys are scoped to the producer, so one agent cannot poison another's cache (§23).
//
// Admission with a Dedup key, in the same transaction as the capacity check and the insert:
//   - no live entry for (ProducerID, Key): admit, and create the entry {in_progress,
//     original = latest = this message_id};
//   - entry in_progress (its latest attempt is not terminal and not TIMED_OUT): record the
//     message REJECTED/ALREADY_IN_PROGRESS (not enqueued) and return a *DedupError with
//     InProgress set;
//   - entry retrying (its latest attempt TIMED_OUT): admit as the next attempt; the entry
//     becomes in_progress with latest = this message_id and Attempts+1;
//   - entry terminal: record the message REJECTED/DUPLICATE_DETECTED (not enqueued) and return
//     a *DedupError carrying the entry (the cached outcome) without re-execution.
//
// ErrBufferFull leaves the cache untouched. An entry is live while its UpdatedAt is within
// Window; an older one is replaced as if absent.
type Dedup struct {
	// ProducerID scopes the key.
	ProducerID string
	// Key is "t:<idempotency_token>", or "s:<sequence_number>:<fingerprint>" when there is
	// no token (protocol.DedupKey).
	Key string
	// Window is the deduplication window (default 3600 s, §11.2, §20).
	Window time.Duration
}

// Idempotency entry statuses.
const (
	// OpInProgress: the latest attempt is being processed.
	OpInProgress = "in_progress"
	// OpRetrying: the latest attempt timed out; the next attempt will be admitted.
	OpRetrying = "retrying"
	// OpTerminal: the operation has an outcome; further attempts get it from the cache.
	OpTerminal = "terminal"
)

// IdempotencyEntry is the cached state of one logical operation (§11.2).
type IdempotencyEntry struct {
	// ProducerID and Key identify the operation.
	ProducerID, Key string
	// Status is OpInProgress, OpRetrying or OpTerminal.
	Status string
	// OriginalMessageID is the first attempt, or, once terminal, the attempt whose outcome is
	// cached (the earliest successful completion, §11.1 rule 4).
	OriginalMessageID string
	// LatestMessageID is the most recent admitted attempt.
	LatestMessageID string
	// Attempts counts admitted attempts.
	Attempts int
	// TerminalState and ErrorCode are the cached outcome once terminal.
	TerminalState commonpb.EnvelopeState
	// ErrorCode accompanies a failed outcome.
	ErrorCode commonpb.ErrorCode
	// Result is the cached result (the completing ACK's note).
	Result string
	// CachedAt is when the outcome was cached.
	CachedAt time.Time
	// CreatedAt and UpdatedAt bound the entry's life in the window.
	CreatedAt, UpdatedAt time.Time
}

// DedupError is returned by Admit when the idempotency cache answers instead of admitting.
type DedupError struct {
	// Entry is the cache entry consulted.
	Entry IdempotencyEntry
	// InProgress distinguishes ALREADY_IN_PROGRESS from DUPLICATE_DETECTED.
	InProgress bool
}

// Error describes the cache decision.
func (e *DedupError) Error() string {
	if e.InProgress {
		return "store: operation already in progress (attempt " + e.Entry.LatestMessageID + ")"
	}
	return "store: duplicate of " + e.Entry.OriginalMessageID
}
