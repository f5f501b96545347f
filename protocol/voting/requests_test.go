package voting

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
)

func TestValidateRoomRequests(t *testing.T) {
	assert.Contains(t, ValidateSubmission(nil).Msg, "proposal is required")
	assert.NotNil(t, ValidateSubmission(&negotiationroompb.NegotiationProposal{}))
	assert.Contains(t, ValidateVoteRequest(nil).Msg, "vote is required")
	assert.Contains(t, ValidateVoteRequest(&negotiationroompb.NegotiationVote{ArtifactId: "a"}).Msg, "critic_id")
	assert.Nil(t, ValidateVoteRequest(&negotiationroompb.NegotiationVote{ArtifactId: "a", CriticId: "c"}))
	assert.NotNil(t, ValidateArtifactRequest(""))
	assert.Nil(t, ValidateArtifactRequest("a"))
}
