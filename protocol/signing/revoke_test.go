package signing

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/keyadminpb"
)

func TestRevocationOf(t *testing.T) {
	r, perr := RevocationOf(&keyadminpb.RevokeKeyRequest{AgentId: "a", KeyId: "k", Reason: " lost\nlaptop "})
	require.Nil(t, perr)
	assert.Equal(t, Revocation{AgentID: "a", KeyID: "k", Reason: "lost\nlaptop"}, r)
	for req, want := range map[*keyadminpb.RevokeKeyRequest]string{
		{Reason: "x"}:                                     "validation_error: agent_id is required (sw4rm keys list shows the agents' keys)",
		{AgentId: "a", Reason: "  "}:                      "validation_error: a reason is required; it is kept with the key and audited",
		{AgentId: "a", Reason: "a\x00b"}:                  "validation_error: the reason must be at most 1024 bytes without control characters",
		{AgentId: "a", Reason: strings.Repeat("r", 1025)}: "validation_error: the reason must be at most 1024 bytes without control characters",
	} {
		_, perr := RevocationOf(req)
		require.NotNil(t, perr)
		assert.Equal(t, want, perr.Error())
	}
}
