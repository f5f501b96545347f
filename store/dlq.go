package store

import (
	"context"
	"errors"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	pdlq "github.com/sw4rm/sw4rm-temporal/protocol/dlq"
)

// DLQ error classes (§21.1), as protocol/dlq names them.
const (
	// DLQRetriesExhausted: the retry budget ran out without success.
	DLQRetriesExhausted = pdlq.ClassRetriesExhausted
	// DLQTerminalError: an error that means the operation cannot succeed (validation error,
	// permission denied, malformed message, a consumer's permanent failure...).
	DLQTerminalError = pdlq.ClassTerminalError
	// DLQPolicyViolation: security or resource-limit policy (oversize payload, modality...).
	DLQPolicyViolation = pdlq.ClassPolicyViolation
	// DLQTTLExpired: the message's TTL ran out.
	DLQTTLExpired = pdlq.ClassTTLExpired
)

// MaxDLQAttempts bounds a dead letter's attempt history (§21.1: "attempt history with
// timestamps and reasons"; "retention policies to bound storage"). A longer history keeps
// its first DLQAttemptsHead attempts — how the operation began — and its most recent
// MaxDLQAttempts-DLQAttemptsHead — how it ended — and DLQEntry.AttemptsDropped counts the
// attempts left out between them (BoundAttempts).
const MaxDLQAttempts = 20

// DLQAttemptsHead is how many of the first attempts a bounded history keeps.
const DLQAttemptsHead = 5

// DLQAttempt is one attempt in a dead letter's history: one message_id of the logical
// operation (§11.3), admitted or refused.
type DLQAttempt struct {
	// MessageID is the attempt's message_id.
	MessageID string `json:"message_id"`
	// At is when it was admitted or refused.
	At time.Time `json:"at"`
	// State is the lifecycle state's enum name (without ENVELOPE_STATE_) it was in when the
	// entry was written: its final one, unless it was still in flight.
	State string `json:"state"`
	// ErrorCode is the error code's enum name that went with State (ACK_TIMEOUT,
	// ALREADY_IN_PROGRESS...); empty for none.
	ErrorCode string `json:"error_code,omitempty"`
	// Reason says how it ended.
	Reason string `json:"reason"`
	// UpdatedAt is when it reached State; zero when unknown.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// DLQEntry is one dead letter with the diagnostic context §21.1 requires.
type DLQEntry struct {
	// ID is assigned by the store (increasing).
	ID int64
	// MessageID is the last attempt's message_id.
	MessageID string
	// ProducerID, RecipientID (the route) and CorrelationID give the routing context.
	ProducerID, RecipientID, CorrelationID string
	// IdempotencyToken is the envelope's token, kept for requeues.
	IdempotencyToken string
	// ErrorCode is the final error classification's code.
	ErrorCode commonpb.ErrorCode
	// Class is one of the DLQ* classes.
	Class string
	// Reason explains the failure.
	Reason string
	// Attempts is the attempt history with timestamps and reasons, oldest first, at most
	// MaxDLQAttempts of them (see BoundAttempts).
	Attempts []DLQAttempt
	// AttemptsDropped counts the attempts a bounded history left out between its first and
	// its most recent ones; the operation had len(Attempts)+AttemptsDropped attempts.
	AttemptsDropped int
	// Envelope is the whole envelope (the secure reference to the payload).
	Envelope *commonpb.Envelope
	// PayloadSize and ContentType describe the payload.
	PayloadSize int
	// ContentType is the payload's MIME type.
	ContentType string
	// PayloadExcerpt is the payload's first bytes (at most 256).
	PayloadExcerpt []byte
	// FirstSeenAt is when the operation's first attempt was admitted (or refused); FailedAt
	// when it finally failed.
	FirstSeenAt, FailedAt time.Time
	// RequeuedAt and RequeuedAs are set once an operator requeued it.
	RequeuedAt time.Time
	// RequeuedAs is the message_id of the requeued attempt.
	RequeuedAs string
}

// DLQFilter selects dead letters (§21.1: time range, error class, route, producer); zero
// fields match everything. It is the filter an operator's request is checked into
// (protocol/dlq), so the frontend hands it to the store as it is.
type DLQFilter = pdlq.Filter

// ErrAlreadyRequeued reports that a dead letter was requeued before.
var ErrAlreadyRequeued = errors.New("store: dead letter already requeued")

// DLQ is the dead-letter queue (§21.1).
type DLQ interface {
	// PutDeadLetter stores an entry and returns it with ID set. A second entry for the same
	// MessageID returns the existing one unchanged (a sweep retried). Attempts are kept in the
	// order given, bounded by BoundAttempts: what it leaves out is added to AttemptsDropped.
	PutDeadLetter(ctx context.Context, e DLQEntry) (DLQEntry, error)
	// GetDeadLetter returns one entry, or ErrNotFound.
	GetDeadLetter(ctx context.Context, id int64) (DLQEntry, error)
	// ListDeadLetters returns matching entries ordered by ID.
	ListDeadLetters(ctx context.Context, f DLQFilter) ([]DLQEntry, error)
	// MarkRequeued records that the entry was requeued as newMessageID; ErrAlreadyRequeued if
	// it was before, ErrNotFound if unknown.
	MarkRequeued(ctx context.Context, id int64, newMessageID string, at time.Time) error
	// PurgeDeadLetters deletes entries that failed before cutoff (retention) and returns how many.
	PurgeDeadLetters(ctx context.Context, cutoff time.Time) (int, error)
}
