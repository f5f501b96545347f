package worktree

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/proto/worktreepb"
)

// TestFromHeaders: the response and its headers make one Status; escaped values are read
// back; a Bind's answer (no StatusResponse) is at home.
func TestFromHeaders(t *testing.T) {
	hdr := metadata.Pairs(headerState, "BOUND_NON_HOME", headerBranch, "sw4rm/hotfix", headerPath, `/srv/d\u00e9p\u00f4t/hotfix`,
		headerHome, "w1", headerTarget, "hotfix", headerTTL, "1500", headerExpires, "2030-01-01T12:00:00Z", headerNote, "switched")
	st := fromHeaders(&worktreepb.StatusResponse{RepoId: "app", WorktreeId: "hotfix", State: "BOUND_NON_HOME"}, hdr)
	assert.Equal(t, Status{State: StateBoundNonHome, RepoID: "app", WorktreeID: "hotfix", Branch: "sw4rm/hotfix", Path: "/srv/dépôt/hotfix",
		Home: "w1", Target: "hotfix", TTLRemaining: 1500 * time.Millisecond, ExpiresAt: time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC), Note: "switched"}, st)
	assert.True(t, st.Bound())

	failed := fromHeaders(nil, metadata.Pairs(headerState, "BIND_FAILED", headerHome, "w1", headerReason, "worktree_locked", headerAttempts, "2", headerRetries, "1"))
	assert.False(t, failed.Bound())
	assert.Equal(t, "worktree_locked", failed.Reason)
	assert.Equal(t, 2, failed.Attempts)
	assert.Equal(t, 1, failed.Retries)
	assert.Empty(t, failed.WorktreeID)

	bound := fromHeaders(nil, metadata.Pairs(headerState, "BOUND_HOME", headerHome, "w1", headerPath, "/p"))
	assert.Equal(t, "w1", bound.WorktreeID, "a Bind's answer is at home")
}
