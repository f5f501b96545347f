package worktree

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/proto/worktreepb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// TestFromHeaders: the response and its headers make one Status; escaped values are read
// back; a Bind's answer (no StatusResponse) is at home.
func TestFromHeaders(t *testing.T) {
	hdr := metadata.Pairs(wire.WorktreeStateHeader, "BOUND_NON_HOME", wire.WorktreeBranchHeader, "sw4rm/hotfix", wire.WorktreePathHeader, `/srv/d\u00e9p\u00f4t/hotfix`,
		wire.WorktreeHomeHeader, "w1", wire.WorktreeTargetHeader, "hotfix", wire.WorktreeTTLRemainingHeader, "1500", wire.WorktreeExpiresHeader, "2030-01-01T12:00:00Z", wire.WorktreeNoteHeader, "switched")
	st := fromHeaders(&worktreepb.StatusResponse{RepoId: "app", WorktreeId: "hotfix", State: "BOUND_NON_HOME"}, hdr)
	assert.Equal(t, Status{State: StateBoundNonHome, RepoID: "app", WorktreeID: "hotfix", Branch: "sw4rm/hotfix", Path: "/srv/dépôt/hotfix",
		Home: "w1", Target: "hotfix", TTLRemaining: 1500 * time.Millisecond, ExpiresAt: time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC), Note: "switched"}, st)
	assert.True(t, st.Bound())

	failed := fromHeaders(nil, metadata.Pairs(wire.WorktreeStateHeader, "BIND_FAILED", wire.WorktreeHomeHeader, "w1", wire.WorktreeReasonHeader, "worktree_locked", wire.WorktreeAttemptsHeader, "2", wire.WorktreeRetriesHeader, "1"))
	assert.False(t, failed.Bound())
	assert.Equal(t, "worktree_locked", failed.Reason)
	assert.Equal(t, 2, failed.Attempts)
	assert.Equal(t, 1, failed.Retries)
	assert.Empty(t, failed.WorktreeID)

	bound := fromHeaders(nil, metadata.Pairs(wire.WorktreeStateHeader, "BOUND_HOME", wire.WorktreeHomeHeader, "w1", wire.WorktreePathHeader, "/p"))
	assert.Equal(t, "w1", bound.WorktreeID, "a Bind's answer is at home")
}
