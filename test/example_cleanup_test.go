package test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// assertExampleCleanedUp checks what an example leaves on the server once it has returned:
// it deregistered every agent it registered (registered is not empty, deregistered equals
// it), each is gone from the registry (store.ErrNotFound) with its lifecycle workflow ended,
// and none is still bound to a worktree. It returns the dead letters its agents produced or
// were sent, requeued or not, oldest first, for the caller to compare with the example's real
// dead letters (usually none).
func assertExampleCleanedUp(ctx context.Context, t *testing.T, sys *system, registered, deregistered []string) []store.DLQEntry {
	t.Helper()
	require.NotEmpty(t, registered, "the example reports the agents it registered")
	assert.Equal(t, registered, deregistered, "every agent the example registered, it deregistered")
	seen := map[int64]store.DLQEntry{}
	for _, id := range registered {
		_, err := sys.app.Store().Registry().GetAgent(ctx, id)
		assert.True(t, errors.Is(err, store.ErrNotFound), "%s is deregistered: %v", id, err)
		assert.NoError(t, sys.app.Temporal().GetWorkflow(ctx, workflows.AgentWorkflowID(id), "").Get(ctx, nil), "%s's lifecycle ended", id)
		b, err := sys.app.Store().Worktrees().GetBinding(ctx, id)
		if !errors.Is(err, store.ErrNotFound) {
			require.NoError(t, err)
			assert.Equal(t, "UNBOUND", b.State, "%s's worktree binding ended", id)
		}
		for _, f := range []store.DLQFilter{{ProducerID: id, IncludeRequeued: true}, {RecipientID: id, IncludeRequeued: true}} {
			es, err := sys.app.Store().DLQ().ListDeadLetters(ctx, f)
			require.NoError(t, err)
			for _, e := range es {
				seen[e.ID] = e
			}
		}
	}
	dead := make([]store.DLQEntry, 0, len(seen))
	for _, e := range seen {
		dead = append(dead, e)
	}
	slices.SortFunc(dead, func(a, b store.DLQEntry) int { return cmp.Compare(a.ID, b.ID) })
	return dead
}

// assertNoDeadLetters fails the test with each of dead: an example whose messages all
// settled leaves none.
func assertNoDeadLetters(t *testing.T, dead []store.DLQEntry) {
	t.Helper()
	for _, e := range dead {
		t.Errorf("dead letter %d: %s → %s, %s %s: %s", e.ID, e.ProducerID, e.RecipientID, e.Class, e.ErrorCode, e.Reason)
	}
}
