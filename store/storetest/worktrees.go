package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// This file tests Worktrees: one binding per agent, replaced by later writes and never by
// older ones, absent bindings, times at the store's precision, and filtered, sorted lists
// (§16).

func runWorktrees(t *testing.T, newStore func(t *testing.T) store.Store) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	bound := store.WorktreeBinding{AgentID: "coder", State: "BOUND_HOME", RepoID: "app", HomeWorktreeID: "w1", WorktreeID: "w1",
		Branch: "sw4rm/w1", Path: "/srv/app/.sw4rm-worktrees/w1", Note: "bound", UpdatedAt: at}

	t.Run("PutGet", func(t *testing.T) {
		w := newStore(t).Worktrees()
		ctx := t.Context()
		_, err := w.GetBinding(ctx, "coder")
		require.True(t, errors.Is(err, store.ErrNotFound), "%v", err)

		require.NoError(t, w.PutBinding(ctx, bound))
		got, err := w.GetBinding(ctx, "coder")
		require.NoError(t, err)
		require.Equal(t, bound, got)

		// A later write replaces it, zero and set times included.
		away := bound
		away.State, away.WorktreeID, away.Branch, away.TargetWorktreeID = "BOUND_NON_HOME", "w2", "sw4rm/w2", "w2"
		away.ExpiresAt, away.UpdatedAt = at.Add(time.Hour), at.Add(time.Second)
		require.NoError(t, w.PutBinding(ctx, away))
		got, err = w.GetBinding(ctx, "coder")
		require.NoError(t, err)
		require.Equal(t, away, got)

		// An older write changes nothing; an equal one (a retry) is applied.
		require.NoError(t, w.PutBinding(ctx, bound))
		got, err = w.GetBinding(ctx, "coder")
		require.NoError(t, err)
		require.Equal(t, away, got, "an older write is ignored")
		retry := away
		retry.Note = "retried"
		require.NoError(t, w.PutBinding(ctx, retry))
		got, err = w.GetBinding(ctx, "coder")
		require.NoError(t, err)
		require.Equal(t, retry, got)

		failed := store.WorktreeBinding{AgentID: "coder", State: "BIND_FAILED", RepoID: "app", HomeWorktreeID: "w1",
			Reason: "worktree_not_found", Note: "repository app is not configured", UpdatedAt: at.Add(time.Minute)}
		require.NoError(t, w.PutBinding(ctx, failed))
		got, err = w.GetBinding(ctx, "coder")
		require.NoError(t, err)
		require.Equal(t, failed, got, "fields not set are cleared")
		require.True(t, got.ExpiresAt.IsZero())

		require.Error(t, w.PutBinding(ctx, store.WorktreeBinding{State: "UNBOUND", UpdatedAt: at}), "agent_id is required")
		require.Error(t, w.PutBinding(ctx, store.WorktreeBinding{AgentID: "x", UpdatedAt: at}), "state is required")
	})

	t.Run("List", func(t *testing.T) {
		w := newStore(t).Worktrees()
		ctx := t.Context()
		all, err := w.ListBindings(ctx, store.WorktreeFilter{})
		require.NoError(t, err)
		require.NotNil(t, all, "none is an empty slice")
		require.Empty(t, all)

		for _, b := range []store.WorktreeBinding{
			{AgentID: "b", State: "BOUND_HOME", RepoID: "app", HomeWorktreeID: "wb", WorktreeID: "wb", UpdatedAt: at},
			{AgentID: "a", State: "BOUND_NON_HOME", RepoID: "app", HomeWorktreeID: "wa", WorktreeID: "wb", UpdatedAt: at},
			{AgentID: "C", State: "BIND_FAILED", RepoID: "docs", HomeWorktreeID: "wc", Reason: "worktree_locked", UpdatedAt: at},
		} {
			require.NoError(t, w.PutBinding(ctx, b))
		}
		agents := func(f store.WorktreeFilter) []string {
			bs, err := w.ListBindings(ctx, f)
			require.NoError(t, err)
			out := []string{}
			for _, b := range bs {
				out = append(out, b.AgentID)
			}
			return out
		}
		require.Equal(t, []string{"C", "a", "b"}, agents(store.WorktreeFilter{}), "byte order")
		require.Equal(t, []string{"a", "b"}, agents(store.WorktreeFilter{RepoID: "app"}))
		require.Equal(t, []string{"a", "b"}, agents(store.WorktreeFilter{WorktreeID: "wb"}), "who works in wb now")
		require.Equal(t, []string{"C"}, agents(store.WorktreeFilter{State: "BIND_FAILED"}))
		require.Equal(t, []string{"b"}, agents(store.WorktreeFilter{RepoID: "app", State: "BOUND_HOME"}))
		require.Empty(t, agents(store.WorktreeFilter{RepoID: "none"}))
	})
}
