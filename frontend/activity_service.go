package frontend

import (
	"context"
	"errors"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/activitypb"
	"github.com/sw4rm/sw4rm-temporal/protocol/negotiation"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// activityService serves sw4rm.activity.ActivityService: versioned negotiation artifacts.
type activityService struct {
	activitypb.UnimplementedActivityServiceServer
	s *Server
}

// AppendArtifact stores one artifact version, stamping created_at with the server's time; a
// missing key field or an existing version answers ok=false with the reason.
func (a *activityService) AppendArtifact(ctx context.Context, req *activitypb.AppendArtifactRequest) (*activitypb.AppendArtifactResponse, error) {
	art := req.GetArtifact()
	if perr := negotiation.ValidateArtifact(art); perr != nil {
		return &activitypb.AppendArtifactResponse{Ok: false, Reason: perr.Error()}, nil
	}
	// created_at is the server's: the store stamps it, so artifacts order by arrival.
	err := a.s.store.Artifacts().AppendArtifact(ctx, store.Artifact{
		NegotiationID: art.GetNegotiationId(), Kind: art.GetKind(), Version: art.GetVersion(),
		ContentType: art.GetContentType(), Content: art.GetContent(),
	})
	if errors.Is(err, store.ErrDuplicateArtifact) {
		return &activitypb.AppendArtifactResponse{Ok: false, Reason: "duplicate_detected: version " + art.GetVersion() + " of " + art.GetKind() + " already exists"}, nil
	}
	if err != nil {
		return nil, failed("artifact write", err)
	}
	return &activitypb.AppendArtifactResponse{Ok: true}, nil
}

// ListArtifacts returns a negotiation's artifacts, optionally of one kind.
func (a *activityService) ListArtifacts(ctx context.Context, req *activitypb.ListArtifactsRequest) (*activitypb.ListArtifactsResponse, error) {
	if perr := negotiation.ValidateArtifactQuery(req); perr != nil {
		return nil, perr
	}
	arts, err := a.s.store.Artifacts().ListArtifacts(ctx, req.GetNegotiationId(), req.GetKind())
	if err != nil {
		return nil, failed("artifact read", err)
	}
	out := &activitypb.ListArtifactsResponse{}
	for _, x := range arts {
		out.Items = append(out.Items, &activitypb.Artifact{
			NegotiationId: x.NegotiationID, Kind: x.Kind, Version: x.Version, ContentType: x.ContentType,
			Content: x.Content, CreatedAt: x.CreatedAt.UTC().Format(time.RFC3339Nano),
		})
	}
	return out, nil
}
