package store

import (
	"errors"
	"fmt"
	"slices"
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

// LaneClass maps a lane back to its communication class; an unknown lane is STANDARD.
func LaneClass(lane int) commonpb.CommunicationClass {
	switch lane {
	case LanePrivileged:
		return commonpb.CommunicationClass_PRIVILEGED
	case LaneBulk:
		return commonpb.CommunicationClass_BULK
	default:
		return commonpb.CommunicationClass_STANDARD
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

// ErrInvalidFollowUp reports a Step.FollowUp that is not control traffic.
var ErrInvalidFollowUp = errors.New("store: a step's follow-up must be an untracked admission without capacity or idempotency key, with a message_id and a recipient")

// ValidFollowUp checks a Step's follow-up admission (nil is valid: there is none).
func (s *Step) ValidFollowUp() error {
	f := s.FollowUp
	if f == nil {
		return nil
	}
	if f.Track || f.Capacity != 0 || f.Dedup != nil || f.Envelope.GetMessageId() == "" || f.RecipientID == "" {
		return ErrInvalidFollowUp
	}
	return nil
}

// PlanStep calls plan with rec and returns the step to write: nil when plan has none, or when
// its step goes to rec's current state (it would change nothing). An invalid follow-up is an
// error. Both stores decide with it.
func PlanStep(plan PlanFunc, rec MessageRecord) (*Step, error) {
	if plan == nil {
		return nil, nil
	}
	step, err := plan(rec)
	if err != nil || step == nil || step.To == rec.State {
		return nil, err
	}
	if err := step.ValidFollowUp(); err != nil {
		return nil, err
	}
	return step, nil
}

// CheckDeadLetter refuses a dead-letter entry that PostgreSQL's constraints would refuse, with
// the same message in both stores: a message_id, one of the four classes (§21.1) and no
// negative AttemptsDropped.
func CheckDeadLetter(e DLQEntry) error {
	if e.MessageID == "" {
		return errors.New("message_id is required")
	}
	if e.AttemptsDropped < 0 {
		return fmt.Errorf("message %q: attempts_dropped %d is negative", e.MessageID, e.AttemptsDropped)
	}
	switch e.Class {
	case DLQRetriesExhausted, DLQTerminalError, DLQPolicyViolation, DLQTTLExpired:
	default:
		return fmt.Errorf("message %q: unknown class %q", e.MessageID, e.Class)
	}
	return nil
}

// BoundAttempts bounds an attempt history to MaxDLQAttempts: a longer one keeps its first
// DLQAttemptsHead attempts and its last MaxDLQAttempts-DLQAttemptsHead, and dropped counts
// the attempts left out between them. kept shares no memory with attempts. Both stores
// bound what PutDeadLetter stores with it.
func BoundAttempts(attempts []DLQAttempt) (kept []DLQAttempt, dropped int) {
	if len(attempts) <= MaxDLQAttempts {
		return slices.Clone(attempts), 0
	}
	tail := MaxDLQAttempts - DLQAttemptsHead
	kept = make([]DLQAttempt, 0, MaxDLQAttempts)
	kept = append(kept, attempts[:DLQAttemptsHead]...)
	kept = append(kept, attempts[len(attempts)-tail:]...)
	return kept, len(attempts) - MaxDLQAttempts
}
