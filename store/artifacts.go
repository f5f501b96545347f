package store

import (
	"context"
	"time"
)

// Artifact is one versioned negotiation artifact (activity.proto).
type Artifact struct {
	// NegotiationID groups the artifacts of one negotiation.
	NegotiationID string
	// Kind is the artifact kind, e.g. "proposal" or "decision".
	Kind string
	// Version distinguishes revisions of the same kind.
	Version string
	// ContentType is the MIME type of Content.
	ContentType string
	// Content is the artifact body.
	Content []byte
	// CreatedAt is when it was stored.
	CreatedAt time.Time
}

// Artifacts stores negotiation artifacts.
type Artifacts interface {
	// AppendArtifact stores an artifact, or returns ErrDuplicateArtifact when the same
	// (NegotiationID, Kind, Version) exists.
	AppendArtifact(ctx context.Context, a Artifact) error
	// ListArtifacts returns the artifacts of a negotiation, filtered by kind when kind is not
	// empty, in insertion order.
	ListArtifacts(ctx context.Context, negotiationID, kind string) ([]Artifact, error)
}
