// Package dlq holds the pure rules of the dead-letter queue's operator requests (§21.1): the
// error classes, and the checks of a list, requeue or export request. Nothing here does I/O.
package dlq

import (
	"slices"
	"strings"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/dlqadminpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// The error classes of §21.1, as dead letters record them.
const (
	// ClassRetriesExhausted: the retry budget ran out without success.
	ClassRetriesExhausted = "retries_exhausted"
	// ClassTerminalError: an error that means the operation cannot succeed.
	ClassTerminalError = "terminal_error"
	// ClassPolicyViolation: security or resource-limit policy.
	ClassPolicyViolation = "policy_violation"
	// ClassTTLExpired: the message's TTL ran out.
	ClassTTLExpired = "ttl_expired"
)

// Classes lists the error classes in the order refusals name them.
func Classes() []string {
	return []string{ClassRetriesExhausted, ClassTerminalError, ClassPolicyViolation, ClassTTLExpired}
}

// MaxIDs bounds the ids of one Requeue or Export call.
const MaxIDs = 1000

// Filter selects dead letters (§21.1: time range, error class, route, producer); zero
// fields match everything. ParseFilter checks an operator's; the store reads it as
// store.DLQFilter.
type Filter struct {
	// Since and Until bound the failure time (inclusive, exclusive); zero is unbounded.
	Since, Until time.Time
	// Class matches exactly when set; one of Classes.
	Class string
	// ErrorCode, the last error's code, matches exactly when set.
	ErrorCode commonpb.ErrorCode
	// RecipientID (the route) matches exactly when set.
	RecipientID string
	// ProducerID matches exactly when set.
	ProducerID string
	// CorrelationID and IdempotencyToken, when set, match exactly: with ProducerID they
	// select the dead letters of one logical operation (§11.3), whose attempt histories the
	// router merges into the next one's. Operators' filters do not set them (ParseFilter).
	CorrelationID, IdempotencyToken string
	// IncludeRequeued includes entries already requeued.
	IncludeRequeued bool
	// Limit caps the result (oldest first, newest Limit kept); 0 means the store's default,
	// 1000.
	Limit int
}

// ParseClass accepts a class in any case, with - for _.
func ParseClass(s string) (string, bool) {
	c := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
	return c, slices.Contains(Classes(), c)
}

// ParseErrorCode accepts an ErrorCode enum name in any case; UNSPECIFIED is no code.
func ParseErrorCode(s string) (commonpb.ErrorCode, bool) {
	v, ok := commonpb.ErrorCode_value[strings.ToUpper(strings.TrimSpace(s))]
	if !ok || v == int32(commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED) {
		return 0, false
	}
	return commonpb.ErrorCode(v), true
}

// DistinctIDs drops repeated ids, keeping the first occurrence's position.
func DistinctIDs(ids []int64) []int64 {
	seen := make(map[int64]bool, len(ids))
	var out []int64
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// ParseFilter checks an operator's filter.
func ParseFilter(pf *dlqadminpb.DeadLetterFilter) (Filter, *protocol.Error) {
	f := Filter{
		RecipientID:     strings.TrimSpace(pf.GetRoute()),
		ProducerID:      strings.TrimSpace(pf.GetProducer()),
		IncludeRequeued: pf.GetIncludeRequeued(),
		Limit:           int(pf.GetLimit()),
	}
	if ts := pf.GetSince(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			return Filter{}, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "since: %v", err)
		}
		f.Since = ts.AsTime()
	}
	if ts := pf.GetUntil(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			return Filter{}, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "until: %v", err)
		}
		f.Until = ts.AsTime()
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		return Filter{}, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "until (%s) is before since (%s)",
			f.Until.Format(time.RFC3339Nano), f.Since.Format(time.RFC3339Nano))
	}
	if c := pf.GetErrorClass(); c != "" {
		class, ok := ParseClass(c)
		if !ok {
			return Filter{}, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "unknown error class %q (want one of %s)",
				c, strings.Join(Classes(), ", "))
		}
		f.Class = class
	}
	if c := pf.GetErrorCode(); c != "" {
		code, ok := ParseErrorCode(c)
		if !ok {
			return Filter{}, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR,
				"unknown error code %q (want a sw4rm.common.ErrorCode name such as ACK_TIMEOUT or TTL_EXPIRED)", c)
		}
		f.ErrorCode = code
	}
	return f, nil
}

// ValidateRequeue checks a Requeue request and returns its distinct ids, in order.
func ValidateRequeue(req *dlqadminpb.RequeueRequest) ([]int64, *protocol.Error) {
	ids := DistinctIDs(req.GetIds())
	if len(ids) == 0 {
		return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "name at least one dead letter id (sw4rm dlq list shows them)")
	}
	return ids, checkCount(ids)
}

// ValidateGet checks a GetDeadLetter request and returns its id.
func ValidateGet(req *dlqadminpb.GetDeadLetterRequest) (int64, *protocol.Error) {
	if req.GetId() <= 0 {
		return 0, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "id must be a dead letter id, a positive integer (sw4rm dlq list shows them), got %d", req.GetId())
	}
	return req.GetId(), nil
}

// ValidateExport checks an Export request: it selects by ids (returned distinct, in order)
// or else by filter, never by both.
func ValidateExport(req *dlqadminpb.ExportRequest) ([]int64, Filter, *protocol.Error) {
	ids := DistinctIDs(req.GetIds())
	if len(ids) == 0 {
		f, perr := ParseFilter(req.GetFilter())
		return nil, f, perr
	}
	if pf := req.GetFilter(); pf.GetSince() != nil || pf.GetUntil() != nil || pf.GetErrorClass() != "" ||
		pf.GetErrorCode() != "" || pf.GetRoute() != "" || pf.GetProducer() != "" {
		return nil, Filter{}, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "select dead letters either by id or by filter, not both")
	}
	return ids, Filter{}, checkCount(ids)
}

// checkCount bounds the ids of one call.
func checkCount(ids []int64) *protocol.Error {
	if len(ids) > MaxIDs {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "at most %d ids per call, got %d", MaxIDs, len(ids))
	}
	return nil
}
