package store

import (
	"time"
)

// PendingResponse tracks a request that requires a response (004 §1–§2).
type PendingResponse struct {
	// RequestMessageID is the current attempt of the request.
	RequestMessageID string
	// OriginalMessageID is its first attempt.
	OriginalMessageID string
	// ProducerID waits for the response; ResponderID owes it.
	ProducerID, ResponderID string
	// CorrelationID is the request's correlation_id.
	CorrelationID string
	// Attempt is the 1-based attempt number; MaxAttempts bounds retries.
	Attempt, MaxAttempts int
	// Timeout is the per-attempt response timeout.
	Timeout time.Duration
	// Deadline is when the current attempt times out.
	Deadline time.Time
	// Status is "pending", "fulfilled", or "expired" (claimed by the sweep).
	Status string
	// ResponseMessageID is the response that fulfilled it.
	ResponseMessageID string
}
