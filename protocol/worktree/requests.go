package worktree

import (
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/worktreepb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// The checks of WorktreeService requests that need nothing but the request (§16): the
// frontend runs them before it reads the registry or reaches a binding.

// MaxSwitchReason bounds RejectSwitch's reason, in bytes.
const MaxSwitchReason = 1024

// ValidateBind checks a BindRequest: agent_id, repo_id and worktree_id.
func ValidateBind(req *worktreepb.BindRequest) *protocol.Error {
	if perr := protocol.ValidateAgentID(req.GetAgentId()); perr != nil {
		return perr
	}
	if perr := ValidateRepoID(req.GetRepoId()); perr != nil {
		return perr
	}
	return ValidateWorktreeID(req.GetWorktreeId())
}

// ValidateSwitchRequest checks a SwitchRequest: agent_id and target_worktree_id.
func ValidateSwitchRequest(req *worktreepb.SwitchRequest) *protocol.Error {
	if perr := protocol.ValidateAgentID(req.GetAgentId()); perr != nil {
		return perr
	}
	if perr := ValidateWorktreeID(req.GetTargetWorktreeId()); perr != nil {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "target_worktree_id: %s", perr.Msg)
	}
	return nil
}

// ValidateSwitchApproval checks a SwitchApprove: agent_id, target_worktree_id when given,
// and ttl_ms at most maxTTL (a switch is time-limited, §16.2).
func ValidateSwitchApproval(req *worktreepb.SwitchApprove, maxTTL time.Duration) *protocol.Error {
	if perr := protocol.ValidateAgentID(req.GetAgentId()); perr != nil {
		return perr
	}
	if t := req.GetTargetWorktreeId(); t != "" {
		if perr := ValidateWorktreeID(t); perr != nil {
			return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "target_worktree_id: %s", perr.Msg)
		}
	}
	if ms := req.GetTtlMs(); ms > uint64(maxTTL.Milliseconds()) {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "ttl_ms %d is more than %d (%s); a switch is time-limited (§16.2)",
			ms, maxTTL.Milliseconds(), maxTTL)
	}
	return nil
}

// ValidateSwitchRejection checks a SwitchReject: agent_id and a reason of at most
// MaxSwitchReason bytes.
func ValidateSwitchRejection(req *worktreepb.SwitchReject) *protocol.Error {
	if perr := protocol.ValidateAgentID(req.GetAgentId()); perr != nil {
		return perr
	}
	if len(req.GetReason()) > MaxSwitchReason {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "reason is longer than %d bytes", MaxSwitchReason)
	}
	return nil
}
