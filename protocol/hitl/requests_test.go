package hitl

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
)

func TestValidateReasonType(t *testing.T) {
	assert.Nil(t, ValidateReasonType(commonpb.HitlReasonType_CONFLICT))
	assert.Equal(t, "validation_error: reason_type must be one of the eight §15 reason types, got 0",
		ValidateReasonType(commonpb.HitlReasonType_HITL_REASON_UNSPECIFIED).Error())
	assert.NotNil(t, ValidateReasonType(commonpb.HitlReasonType(99)))
}

func TestParseIdempotencyKey(t *testing.T) {
	k, perr := ParseIdempotencyKey(nil)
	assert.Nil(t, perr)
	assert.Empty(t, k)
	k, perr = ParseIdempotencyKey([]string{" abc ", "ignored"})
	assert.Nil(t, perr)
	assert.Equal(t, "abc", k)
	for _, bad := range []string{"", " ", "a\x00b", strings.Repeat("k", MaxIdempotencyKey+1)} {
		_, perr := ParseIdempotencyKey([]string{bad})
		require.NotNil(t, perr, "%q", bad)
		assert.Equal(t, "validation_error: metadata sw4rm-idempotency-key must be 1 to 256 characters without control characters", perr.Error())
	}
}

func TestDecisionOf(t *testing.T) {
	d, perr := DecisionOf(&hitladminpb.DecideRequest{InvocationId: "i", Decision: "approve", Rationale: "ok"}, "alice", "cli")
	require.Nil(t, perr)
	assert.Equal(t, Decision{InvocationID: "i", Decision: Approve, Rationale: "ok", Operator: "alice", Via: "cli"}, d)
	_, perr = DecisionOf(&hitladminpb.DecideRequest{InvocationId: "i", Decision: "maybe", Rationale: "ok"}, "alice", "cli")
	assert.Equal(t, `validation_error: decision "maybe" is not one of approve, deny, modify, defer`, perr.Error())
	_, perr = DecisionOf(&hitladminpb.DecideRequest{InvocationId: "i", Decision: "approve"}, "alice", "cli")
	assert.Equal(t, "validation_error: a rationale is required (§15.1)", perr.Error())
}
