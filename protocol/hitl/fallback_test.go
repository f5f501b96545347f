package hitl

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParseFallback: a configured fallback (§15.4) is read from text, names in any case; an
// unknown policy, AUTO_DECIDE_THRESHOLD without a threshold in (0, 1], EXTEND_TIMEOUT beyond
// 3 extensions, and values the chosen policy (or no policy) would ignore are refused, the
// error naming the field at fault.
func TestParseFallback(t *testing.T) {
	ok := []struct {
		in   [4]string
		want Fallback
	}{
		{[4]string{"", "", "", ""}, Fallback{}},
		{[4]string{"deny_by_default", "", "", ""}, Fallback{Policy: DenyByDefault}},
		{[4]string{"AUTO_DECIDE_THRESHOLD", "0.75", "", ""}, Fallback{Policy: AutoDecideThreshold, Threshold: 0.75}},
		{[4]string{" Extend_Timeout ", "", "2", "45s"}, Fallback{Policy: ExtendTimeout, MaxExtensions: 2, ExtendBy: 45 * time.Second}},
		{[4]string{"EXTEND_TIMEOUT", "", "", ""}, Fallback{Policy: ExtendTimeout}},
	}
	for _, c := range ok {
		got, err := ParseFallback(c.in[0], c.in[1], c.in[2], c.in[3])
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, got, c.in)
	}
	bad := []struct {
		in    [4]string
		field string
	}{
		{[4]string{"ASK_LATER", "", "", ""}, FieldPolicy},
		{[4]string{"AUTO_DECIDE_THRESHOLD", "", "", ""}, FieldThreshold},
		{[4]string{"AUTO_DECIDE_THRESHOLD", "0", "", ""}, FieldThreshold},
		{[4]string{"AUTO_DECIDE_THRESHOLD", "1.5", "", ""}, FieldThreshold},
		{[4]string{"AUTO_DECIDE_THRESHOLD", "NaN", "", ""}, FieldThreshold},
		{[4]string{"AUTO_DECIDE_THRESHOLD", "high", "", ""}, FieldThreshold},
		{[4]string{"DENY_BY_DEFAULT", "0.5", "", ""}, FieldThreshold},
		{[4]string{"", "0.5", "", ""}, FieldThreshold},
		{[4]string{"EXTEND_TIMEOUT", "", "4", ""}, FieldMaxExtensions},
		{[4]string{"EXTEND_TIMEOUT", "", "0", ""}, FieldMaxExtensions},
		{[4]string{"EXTEND_TIMEOUT", "", "many", ""}, FieldMaxExtensions},
		{[4]string{"AUTO_DECIDE_THRESHOLD", "0.5", "2", ""}, FieldMaxExtensions},
		{[4]string{"", "", "2", ""}, FieldMaxExtensions},
		{[4]string{"EXTEND_TIMEOUT", "", "", "-1s"}, FieldExtendBy},
		{[4]string{"EXTEND_TIMEOUT", "", "", "soon"}, FieldExtendBy},
		{[4]string{"DENY_BY_DEFAULT", "", "", "1m"}, FieldExtendBy},
		{[4]string{"", "", "", "1m"}, FieldExtendBy},
	}
	for _, c := range bad {
		_, err := ParseFallback(c.in[0], c.in[1], c.in[2], c.in[3])
		var ferr *FallbackError
		require.True(t, errors.As(err, &ferr), "%v: %v", c.in, err)
		assert.Equal(t, c.field, ferr.Field, "%v: %v", c.in, err)
	}
}

// TestFallbackFor: an invocation that sets a policy keeps its fallback; one that sets none
// gets the deployment's, or DENY_BY_DEFAULT, with its own score.
func TestFallbackFor(t *testing.T) {
	deployed := Policy{Fallback: &Fallback{Policy: AutoDecideThreshold, Threshold: 0.7, Score: 0.1}}
	assert.Equal(t, Fallback{Policy: AutoDecideThreshold, Threshold: 0.7, Score: 0.9}, deployed.FallbackFor(Fallback{Score: 0.9}))
	own := Fallback{Policy: ExtendTimeout, MaxExtensions: 1, Score: 0.2}
	assert.Equal(t, own, deployed.FallbackFor(own))
	assert.Equal(t, Fallback{Policy: DenyByDefault, Score: 0.4}, Policy{}.FallbackFor(Fallback{Score: 0.4}))
	assert.Equal(t, Fallback{Policy: DenyByDefault}, Policy{Fallback: &Fallback{}}.FallbackFor(Fallback{}))
}
