package negotiation

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
)

func TestValidateProfiles(t *testing.T) {
	require.NoError(t, ValidateProfiles([]*policypb.PolicyProfile{{Name: "fast"}, {Name: "slow", Policy: &policypb.NegotiationPolicy{}}}))
	err := ValidateProfiles([]*policypb.PolicyProfile{{Name: " "}, {Name: "a"}, {Name: "a"}, {Name: strings.Repeat("é", MaxProfileNameLength+1)}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "profile 0 has no name")
	assert.Contains(t, err.Error(), `profile "a" is given twice`)
	assert.Contains(t, err.Error(), "is longer than 64 characters")
}
