package hitl

import (
	"strings"
	"unicode"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// MaxIdempotencyKey bounds a caller's idempotency key, as §11.2 tokens are bounded in
// practice.
const MaxIdempotencyKey = 256

// ValidateReasonType checks the reason of a HitlService.Decide request: one of the eight §15
// reason types.
func ValidateReasonType(r commonpb.HitlReasonType) *protocol.Error {
	if r == commonpb.HitlReasonType_HITL_REASON_UNSPECIFIED || commonpb.HitlReasonType_name[int32(r)] == "" {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "reason_type must be one of the eight §15 reason types, got %d", int32(r))
	}
	return nil
}

// ParseIdempotencyKey reads the values of the wire.IdempotencyKey metadata: empty when there
// are none, else the first, trimmed, which must be 1 to MaxIdempotencyKey characters without
// control characters.
func ParseIdempotencyKey(values []string) (string, *protocol.Error) {
	if len(values) == 0 {
		return "", nil
	}
	key := strings.TrimSpace(values[0])
	if key == "" || len(key) > MaxIdempotencyKey || strings.ContainsFunc(key, unicode.IsControl) {
		return "", protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "metadata %s must be 1 to %d characters without control characters",
			wire.IdempotencyKey, MaxIdempotencyKey)
	}
	return key, nil
}

// DecisionOf checks an operator's HitlAdminService.Decide request and returns the decision it
// makes, by operator through the door via ("cli", "web" or "grpc").
func DecisionOf(req *hitladminpb.DecideRequest, operator, via string) (Decision, *protocol.Error) {
	action, err := ParseAction(req.GetDecision())
	if err != nil {
		return Decision{}, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%v", err)
	}
	d := Decision{InvocationID: req.GetInvocationId(), Decision: action, Rationale: req.GetRationale(), Patch: req.GetPatch(), Operator: operator, Via: via}
	if err := d.Check(); err != nil {
		// Check's reasons already start with the code they refuse with.
		return Decision{}, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s", strings.TrimPrefix(err.Error(), "validation_error: "))
	}
	return d, nil
}
