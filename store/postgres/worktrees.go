package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// worktreesStore implements store.Worktrees on worktree_bindings (migration 00014).
type worktreesStore Store

func (w *worktreesStore) s() *Store { return (*Store)(w) }

// Worktrees implements store.Store.
func (s *Store) Worktrees() store.Worktrees { return (*worktreesStore)(s) }

const worktreeColumns = `agent_id, state, repo_id, home_worktree_id, worktree_id, branch, path, target_worktree_id,
	reason, note, expires_at, updated_at`

// PutBinding implements store.Worktrees: one upsert whose update applies only when the
// stored row is not later than the new one.
func (w *worktreesStore) PutBinding(ctx context.Context, b store.WorktreeBinding) error {
	if b.AgentID == "" || b.State == "" {
		return errors.New("postgres: put worktree binding: agent_id and state are required")
	}
	var expires *time.Time
	if !b.ExpiresAt.IsZero() {
		expires = &b.ExpiresAt
	}
	_, err := w.s().pool.Exec(ctx, `INSERT INTO worktree_bindings (`+worktreeColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT (agent_id) DO UPDATE SET state = EXCLUDED.state, repo_id = EXCLUDED.repo_id,
			home_worktree_id = EXCLUDED.home_worktree_id, worktree_id = EXCLUDED.worktree_id, branch = EXCLUDED.branch,
			path = EXCLUDED.path, target_worktree_id = EXCLUDED.target_worktree_id, reason = EXCLUDED.reason,
			note = EXCLUDED.note, expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at
		WHERE worktree_bindings.updated_at <= EXCLUDED.updated_at`,
		b.AgentID, b.State, b.RepoID, b.HomeWorktreeID, b.WorktreeID, b.Branch, b.Path, b.TargetWorktreeID,
		b.Reason, b.Note, expires, b.UpdatedAt)
	if err != nil {
		return fmt.Errorf("postgres: put worktree binding of %q: %w", b.AgentID, unavailable(err))
	}
	return nil
}

func scanWorktreeBinding(row pgx.CollectableRow) (store.WorktreeBinding, error) {
	var (
		b       store.WorktreeBinding
		expires *time.Time
	)
	err := row.Scan(&b.AgentID, &b.State, &b.RepoID, &b.HomeWorktreeID, &b.WorktreeID, &b.Branch, &b.Path, &b.TargetWorktreeID,
		&b.Reason, &b.Note, &expires, &b.UpdatedAt)
	if expires != nil {
		b.ExpiresAt = utc(*expires)
	}
	b.UpdatedAt = utc(b.UpdatedAt)
	return b, err
}

// GetBinding implements store.Worktrees.
func (w *worktreesStore) GetBinding(ctx context.Context, agentID string) (store.WorktreeBinding, error) {
	rows, err := w.s().pool.Query(ctx, `SELECT `+worktreeColumns+` FROM worktree_bindings WHERE agent_id = $1`, agentID)
	if err != nil {
		return store.WorktreeBinding{}, fmt.Errorf("postgres: worktree binding of %q: %w", agentID, unavailable(err))
	}
	b, err := pgx.CollectExactlyOneRow(rows, scanWorktreeBinding)
	if err != nil {
		return store.WorktreeBinding{}, fmt.Errorf("postgres: worktree binding of %q: %w", agentID, unavailable(notFound(err)))
	}
	return b, nil
}

// ListBindings implements store.Worktrees. COLLATE "C" sorts by bytes, as the memory store
// does.
func (w *worktreesStore) ListBindings(ctx context.Context, f store.WorktreeFilter) ([]store.WorktreeBinding, error) {
	rows, err := w.s().pool.Query(ctx, `SELECT `+worktreeColumns+` FROM worktree_bindings
		WHERE ($1 = '' OR repo_id = $1) AND ($2 = '' OR worktree_id = $2) AND ($3 = '' OR state = $3)
		ORDER BY agent_id COLLATE "C"`, f.RepoID, f.WorktreeID, f.State)
	if err != nil {
		return nil, fmt.Errorf("postgres: list worktree bindings: %w", unavailable(err))
	}
	out, err := pgx.CollectRows(rows, scanWorktreeBinding)
	if err != nil {
		return nil, fmt.Errorf("postgres: list worktree bindings: %w", unavailable(err))
	}
	if out == nil {
		out = []store.WorktreeBinding{}
	}
	return out, nil
}
