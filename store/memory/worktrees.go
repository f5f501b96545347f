package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// worktreesStore implements store.Worktrees over s.worktrees, under s.mu.
type worktreesStore Store

func (w *worktreesStore) s() *Store { return (*Store)(w) }

// Worktrees implements store.Store.
func (s *Store) Worktrees() store.Worktrees { return (*worktreesStore)(s) }

// PutBinding implements store.Worktrees.
func (w *worktreesStore) PutBinding(ctx context.Context, b store.WorktreeBinding) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.AgentID == "" || b.State == "" {
		return errors.New("memory: put worktree binding: agent_id and state are required")
	}
	b.ExpiresAt, b.UpdatedAt = normTime(b.ExpiresAt), normTime(b.UpdatedAt)
	s := w.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.worktrees == nil {
		s.worktrees = make(map[string]store.WorktreeBinding)
	}
	if old, ok := s.worktrees[b.AgentID]; ok && old.UpdatedAt.After(b.UpdatedAt) {
		return nil // a later transition is stored already
	}
	s.worktrees[b.AgentID] = b
	return nil
}

// GetBinding implements store.Worktrees.
func (w *worktreesStore) GetBinding(ctx context.Context, agentID string) (store.WorktreeBinding, error) {
	if err := ctx.Err(); err != nil {
		return store.WorktreeBinding{}, err
	}
	s := w.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.worktrees[agentID]
	if !ok {
		return store.WorktreeBinding{}, fmt.Errorf("memory: worktree binding of %q: %w", agentID, store.ErrNotFound)
	}
	return b, nil
}

// ListBindings implements store.Worktrees.
func (w *worktreesStore) ListBindings(ctx context.Context, f store.WorktreeFilter) ([]store.WorktreeBinding, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := w.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []store.WorktreeBinding{}
	for _, b := range s.worktrees {
		if (f.RepoID == "" || b.RepoID == f.RepoID) && (f.WorktreeID == "" || b.WorktreeID == f.WorktreeID) && (f.State == "" || b.State == f.State) {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b store.WorktreeBinding) int { return strings.Compare(a.AgentID, b.AgentID) })
	return out, nil
}
