package signing

import (
	"strings"
	"unicode"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/keyadminpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// MaxRevokeReason bounds a revocation's reason, which is kept with the key and audited.
const MaxRevokeReason = 1024

// Revocation is an operator's checked request to revoke keys (§6.5, §23).
type Revocation struct {
	// AgentID is the agent whose keys are revoked.
	AgentID string
	// KeyID is the one key revoked; empty revokes every key of the agent.
	KeyID string
	// Reason is why, trimmed.
	Reason string
}

// RevocationOf checks a RevokeKey request: an agent_id, and a reason of at most
// MaxRevokeReason bytes without control characters other than newline and tab.
func RevocationOf(req *keyadminpb.RevokeKeyRequest) (Revocation, *protocol.Error) {
	r := Revocation{AgentID: req.GetAgentId(), KeyID: req.GetKeyId(), Reason: strings.TrimSpace(req.GetReason())}
	switch {
	case r.AgentID == "":
		return Revocation{}, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "agent_id is required (sw4rm keys list shows the agents' keys)")
	case r.Reason == "":
		return Revocation{}, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "a reason is required; it is kept with the key and audited")
	case len(r.Reason) > MaxRevokeReason || strings.ContainsFunc(r.Reason, func(c rune) bool { return unicode.IsControl(c) && c != '\n' && c != '\t' }):
		return Revocation{}, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "the reason must be at most %d bytes without control characters", MaxRevokeReason)
	}
	return r, nil
}
