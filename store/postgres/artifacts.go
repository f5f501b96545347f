package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// artifacts implements store.Artifacts on the artifacts table.
type artifacts Store

func (a *artifacts) s() *Store { return (*Store)(a) }

// AppendArtifact implements store.Artifacts.
func (a *artifacts) AppendArtifact(ctx context.Context, art store.Artifact) error {
	if art.NegotiationID == "" {
		return errors.New("postgres: append artifact: negotiation_id is required")
	}
	// The row commits in a group with other writers' (group.go): a negotiation's artifacts
	// and the events fanned out beside them share one commit.
	var tag pgconn.CommandTag
	err := a.s().groups.do(ctx, &groupMember{
		queue: func(b *pgx.Batch) {
			b.Queue(`
		INSERT INTO artifacts (negotiation_id, kind, version, content_type, content)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT ON CONSTRAINT artifacts_negotiation_kind_version_key DO NOTHING`,
				art.NegotiationID, art.Kind, art.Version, art.ContentType, nullBytes(art.Content))
		},
		read: func(br pgx.BatchResults) (err error) {
			tag, err = br.Exec()
			return err
		},
	})
	if err != nil {
		return fmt.Errorf("postgres: append artifact %s/%s/%s: %w", art.NegotiationID, art.Kind, art.Version, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: artifact %s/%s/%s: %w", art.NegotiationID, art.Kind, art.Version, store.ErrDuplicateArtifact)
	}
	return nil
}

// ListArtifacts implements store.Artifacts.
func (a *artifacts) ListArtifacts(ctx context.Context, negotiationID, kind string) ([]store.Artifact, error) {
	rows, err := a.s().pool.Query(ctx, `
		SELECT negotiation_id, kind, version, content_type, content, created_at
		FROM artifacts
		WHERE negotiation_id = $1 AND ($2 = '' OR kind = $2)
		ORDER BY id`, negotiationID, kind)
	if err != nil {
		return nil, fmt.Errorf("postgres: list artifacts of %q: %w", negotiationID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Artifact, error) {
		var x store.Artifact
		if err := row.Scan(&x.NegotiationID, &x.Kind, &x.Version, &x.ContentType, &x.Content, &x.CreatedAt); err != nil {
			return store.Artifact{}, err
		}
		x.Content = cloneBytes(x.Content)
		x.CreatedAt = x.CreatedAt.UTC()
		return x, nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list artifacts of %q: %w", negotiationID, err)
	}
	return out, nil
}
