package negotiation

import (
	"github.com/sw4rm/sw4rm-temporal/proto/activitypb"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// ValidateArtifact checks an artifact appended to a negotiation's record: its key fields
// negotiation_id, kind and version are required.
func ValidateArtifact(art *activitypb.Artifact) *protocol.Error {
	switch {
	case art == nil:
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "artifact is required")
	case art.GetNegotiationId() == "":
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "artifact.negotiation_id is required")
	case art.GetKind() == "":
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "artifact.kind is required")
	case art.GetVersion() == "":
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "artifact.version is required")
	}
	return nil
}

// ValidateArtifactQuery checks a ListArtifacts request: negotiation_id is required.
func ValidateArtifactQuery(req *activitypb.ListArtifactsRequest) *protocol.Error {
	if req.GetNegotiationId() == "" {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "negotiation_id is required")
	}
	return nil
}
