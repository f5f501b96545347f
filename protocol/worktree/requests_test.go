package worktree

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sw4rm/sw4rm-temporal/proto/worktreepb"
)

func TestValidateWorktreeRequests(t *testing.T) {
	assert.Nil(t, ValidateBind(&worktreepb.BindRequest{AgentId: "a", RepoId: "app", WorktreeId: "main"}))
	assert.NotNil(t, ValidateBind(&worktreepb.BindRequest{AgentId: "a", WorktreeId: "main"}))
	assert.NotNil(t, ValidateBind(&worktreepb.BindRequest{RepoId: "app", WorktreeId: "main"}))

	assert.Nil(t, ValidateSwitchRequest(&worktreepb.SwitchRequest{AgentId: "a", TargetWorktreeId: "fix"}))
	assert.Contains(t, ValidateSwitchRequest(&worktreepb.SwitchRequest{AgentId: "a"}).Msg, "target_worktree_id")

	assert.Nil(t, ValidateSwitchApproval(&worktreepb.SwitchApprove{AgentId: "a"}, time.Hour))
	assert.Contains(t, ValidateSwitchApproval(&worktreepb.SwitchApprove{AgentId: "a", TtlMs: uint64(2 * time.Hour / time.Millisecond)}, time.Hour).Msg, "time-limited")
	assert.Contains(t, ValidateSwitchApproval(&worktreepb.SwitchApprove{AgentId: "a", TargetWorktreeId: "a b"}, time.Hour).Msg, "target_worktree_id")

	assert.Nil(t, ValidateSwitchRejection(&worktreepb.SwitchReject{AgentId: "a", Reason: "no"}))
	assert.Contains(t, ValidateSwitchRejection(&worktreepb.SwitchReject{AgentId: "a", Reason: strings.Repeat("x", MaxSwitchReason+1)}).Msg, "longer than")
}
