package memory

import (
	"context"
	"errors"
	"fmt"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// artifacts implements store.Artifacts.
type artifacts Store

func (a *artifacts) s() *Store { return (*Store)(a) }

// AppendArtifact implements store.Artifacts.
func (a *artifacts) AppendArtifact(ctx context.Context, art store.Artifact) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if art.NegotiationID == "" {
		return errors.New("memory: append artifact: negotiation_id is required")
	}
	art.Content = cloneBytes(art.Content)
	// CreatedAt is when the store kept it, whatever the caller put there.
	art.CreatedAt = now()
	s := a.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.artifacts {
		if x.NegotiationID == art.NegotiationID && x.Kind == art.Kind && x.Version == art.Version {
			return fmt.Errorf("memory: artifact %s/%s/%s: %w", art.NegotiationID, art.Kind, art.Version, store.ErrDuplicateArtifact)
		}
	}
	s.artifacts = append(s.artifacts, art)
	return nil
}

// ListArtifacts implements store.Artifacts.
func (a *artifacts) ListArtifacts(ctx context.Context, negotiationID, kind string) ([]store.Artifact, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := a.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Artifact
	for _, x := range s.artifacts {
		if x.NegotiationID != negotiationID || (kind != "" && x.Kind != kind) {
			continue
		}
		x.Content = cloneBytes(x.Content)
		out = append(out, x)
	}
	return out, nil
}
