package voting

import (
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// The checks of NegotiationRoomService requests that need nothing but the request, as the
// spec's validation_error.

// ValidateSubmission checks a SubmitProposal's proposal: present and valid
// (ValidateProposal).
func ValidateSubmission(p *negotiationroompb.NegotiationProposal) *protocol.Error {
	if p == nil {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "proposal is required")
	}
	if err := ValidateProposal(p); err != nil {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%v", err)
	}
	return nil
}

// ValidateVoteRequest checks a SubmitVote's vote names its artifact and critic; the
// coordinator checks the rest.
func ValidateVoteRequest(v *negotiationroompb.NegotiationVote) *protocol.Error {
	if v == nil {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "vote is required")
	}
	if v.GetArtifactId() == "" || v.GetCriticId() == "" {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "vote.artifact_id and vote.critic_id are required")
	}
	return nil
}

// ValidateArtifactRequest checks the artifact_id of GetVotes, GetDecision and
// WaitForDecision.
func ValidateArtifactRequest(artifactID string) *protocol.Error {
	if artifactID == "" {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "artifact_id is required")
	}
	return nil
}
