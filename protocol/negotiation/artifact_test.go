package negotiation

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sw4rm/sw4rm-temporal/proto/activitypb"
)

func TestValidateArtifact(t *testing.T) {
	assert.Nil(t, ValidateArtifact(&activitypb.Artifact{NegotiationId: "n", Kind: "k", Version: "1"}))
	for art, want := range map[*activitypb.Artifact]string{
		nil:                                "validation_error: artifact is required",
		{Kind: "k", Version: "1"}:          "validation_error: artifact.negotiation_id is required",
		{NegotiationId: "n", Version: "1"}: "validation_error: artifact.kind is required",
		{NegotiationId: "n", Kind: "k"}:    "validation_error: artifact.version is required",
	} {
		assert.Equal(t, want, ValidateArtifact(art).Error())
	}
	assert.Equal(t, "validation_error: negotiation_id is required", ValidateArtifactQuery(&activitypb.ListArtifactsRequest{}).Error())
	assert.Nil(t, ValidateArtifactQuery(&activitypb.ListArtifactsRequest{NegotiationId: "n"}))
}
