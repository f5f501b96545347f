package store

import (
	"fmt"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
)

// This file holds the rules both store implementations apply in the same way, so the memory
// and PostgreSQL stores cannot drift apart on them (the conformance suite compares their
// behaviour, these make it the same code).

// DefaultDedupWindow is the idempotency window used when a zero or negative one is given
// (§11.2, §20).
const DefaultDedupWindow = time.Hour

// Lane ranks, in the order a weighted-round-robin round visits the lanes (§7.3); PostgreSQL
// stores them in deliveries.lane.
const (
	LanePrivileged = 1
	LaneStandard   = 2
	LaneBulk       = 3
)

// LaneRank maps a communication class to its lane; unspecified (or unknown) is STANDARD.
func LaneRank(c commonpb.CommunicationClass) int {
	switch c {
	case commonpb.CommunicationClass_PRIVILEGED:
		return LanePrivileged
	case commonpb.CommunicationClass_BULK:
		return LaneBulk
	default:
		return LaneStandard
	}
}

// InLaneOrder returns the weights in lane order, a zero or negative weight counting as 1 so no
// lane starves, and capped so a sum cannot overflow.
func (w LaneWeights) InLaneOrder() [3]int {
	out := [3]int{w.Privileged, w.Standard, w.Bulk}
	for i := range out {
		out[i] = min(max(out[i], 1), 1<<30)
	}
	return out
}

// EffectiveDedupWindow defaults a zero or negative window to DefaultDedupWindow.
func EffectiveDedupWindow(w time.Duration) time.Duration {
	if w <= 0 {
		return DefaultDedupWindow
	}
	return w
}

// IsCompletion reports whether a state completes an operation for the idempotency cache
// (§11.1 rule 4): FULFILLED, REJECTED or FAILED.
func IsCompletion(s commonpb.EnvelopeState) bool {
	switch s {
	case commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED,
		commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED,
		commonpb.EnvelopeState_ENVELOPE_STATE_FAILED:
		return true
	}
	return false
}

// Notes the stores record on messages they move themselves.
const (
	// TTLExpiredNote is the note of a message failed by its TTL.
	TTLExpiredNote = "ttl expired"
)

// BufferFullNote is the note of a message rejected by a full buffer.
func BufferFullNote(recipient string, capacity int) string {
	return fmt.Sprintf("inbound buffer of %s is full (capacity %d)", recipient, capacity)
}

// AckTimeoutNote is the note of a message that timed out (§11).
func AckTimeoutNote(timeout time.Duration) string {
	return fmt.Sprintf("no acknowledgement within %s", timeout)
}
