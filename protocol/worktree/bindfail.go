package worktree

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Reason is why a bind failed; §16.3 requires it to be recorded on entering BIND_FAILED.
type Reason string

// The bind failure reasons §16.3 names.
const (
	// ReasonWorktreeNotFound: the repository or worktree named does not exist.
	ReasonWorktreeNotFound Reason = "worktree_not_found"
	// ReasonPermissionDenied: the caller may not bind it, or the filesystem refused access.
	ReasonPermissionDenied Reason = "permission_denied"
	// ReasonFilesystemError: creating or opening the worktree failed for another reason.
	ReasonFilesystemError Reason = "filesystem_error"
	// ReasonWorktreeLocked: another binding holds the worktree's lock.
	ReasonWorktreeLocked Reason = "worktree_locked"
)

var reasons = []Reason{ReasonWorktreeNotFound, ReasonPermissionDenied, ReasonFilesystemError, ReasonWorktreeLocked}

// Reasons returns every bind failure reason, in the order §16.3 lists them.
func Reasons() []Reason { return slices.Clone(reasons) }

// Valid reports whether r is one of the §16.3 reasons.
func (r Reason) Valid() bool { return slices.Contains(reasons, r) }

// String returns the reason's spelling.
func (r Reason) String() string { return string(r) }

// ParseReason reads a reason in its spelling, e.g. the type of an activity's application
// error.
func ParseReason(s string) (Reason, error) {
	if r := Reason(s); r.Valid() {
		return r, nil
	}
	return "", fmt.Errorf("worktree: %s is not a bind failure reason; want one of %v (§16.3)", quote(s), reasons)
}

// BindError is a failed bind with its §16.3 reason.
type BindError struct {
	// Reason classifies the failure.
	Reason Reason
	// Msg says what failed, for a person.
	Msg string
}

// Error renders "<reason>: <message>".
func (e *BindError) Error() string { return string(e.Reason) + ": " + e.Msg }

// BindErrorf builds a BindError with a formatted message.
func BindErrorf(r Reason, format string, args ...any) *BindError {
	return &BindError{Reason: r, Msg: fmt.Sprintf(format, args...)}
}

// ReasonOf is the reason of a failed bind: that of a wrapped *BindError, else
// filesystem_error, the reason for a failure nothing classified.
func ReasonOf(err error) Reason {
	var be *BindError
	if errors.As(err, &be) && be.Reason.Valid() {
		return be.Reason
	}
	return ReasonFilesystemError
}

// BindRecoveryTimeout is how long a binding may stay in BIND_FAILED before operators are
// notified (§16.3 "Timeout", RECOMMENDED 60 seconds).
const BindRecoveryTimeout = 60 * time.Second

// RetryPolicy is how a failed bind is retried automatically (§16.3 "Automatic recovery").
// Its fields have the meaning of Temporal's retry policy fields of the same names, so a
// caller may hand it to an activity as is; MaxRetries counts retries, not attempts.
type RetryPolicy struct {
	// MaxRetries is how many times a failed bind is tried again after the first attempt.
	MaxRetries int
	// InitialInterval is the wait before the first retry.
	InitialInterval time.Duration
	// BackoffCoefficient multiplies the wait from one retry to the next.
	BackoffCoefficient float64
	// MaximumInterval caps the wait.
	MaximumInterval time.Duration
}

// BindRetry is the automatic recovery of §16.3: exponential backoff, at most three retries.
// The waits are 1 s, 2 s and 4 s, so the last retry is over about 7 s after the first failure
// (plus the attempts' own time), well inside BindRecoveryTimeout: operators are notified
// only of a binding that the retries could not recover.
var BindRetry = RetryPolicy{
	MaxRetries:         3,
	InitialInterval:    time.Second,
	BackoffCoefficient: 2,
	MaximumInterval:    30 * time.Second,
}

// Delay is the wait before retry number retry (1 for the first retry): InitialInterval ×
// BackoffCoefficient^(retry-1), capped at MaximumInterval. ok is false when retry is outside
// 1..MaxRetries: no retry is left, and the binding stays BIND_FAILED. A coefficient below 1
// is taken as 1, so waits never shrink.
func (p RetryPolicy) Delay(retry int) (wait time.Duration, ok bool) {
	if retry < 1 || retry > p.MaxRetries {
		return 0, false
	}
	coef := max(p.BackoffCoefficient, 1)
	d := p.InitialInterval
	for i := 1; i < retry; i++ {
		// Multiplied step by step and capped at each step, so no retry count can overflow.
		next := float64(d) * coef
		if p.MaximumInterval > 0 && next >= float64(p.MaximumInterval) {
			return p.MaximumInterval, true
		}
		if next >= math.MaxInt64 {
			return time.Duration(math.MaxInt64), true
		}
		d = time.Duration(next)
	}
	if p.MaximumInterval > 0 && d > p.MaximumInterval {
		d = p.MaximumInterval
	}
	return d, true
}

// Delays returns the wait before each retry, in order.
func (p RetryPolicy) Delays() []time.Duration {
	out := make([]time.Duration, 0, max(p.MaxRetries, 0))
	for i := 1; i <= p.MaxRetries; i++ {
		d, _ := p.Delay(i)
		out = append(out, d)
	}
	return out
}
