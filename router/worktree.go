package router

import (
	"context"
	"errors"
	"fmt"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// Worktree confinement of messages (§6.4, §16): an envelope whose repo_id or worktree_id
// names a worktree its producer is not bound to is refused with permission_denied — recorded,
// NACKed, dead-lettered as a policy violation and audited like any refusal (§13: never a
// silent drop). The binding is the store's projection (store.Worktrees), which workflow
// worktree/<agent_id> writes on every transition; worktree.CheckEnvelope decides.
//
// The projection is read only for an envelope that names a repository or worktree, and then
// read afresh: most envelopes name none and cost nothing, and a binding that just changed (a
// switch's TTL returning the agent home, an unbind) is never judged from a stale copy. An
// envelope that names one costs one primary-key read.
//
// The scheduler's own envelopes (CONTROL, NACKs, notifications) go through Notify and
// SendControl, never through Send, and are not checked.

// checkWorktree refuses an envelope naming a worktree its producer is not bound to.
func (r *Router) checkWorktree(ctx context.Context, s *sending) (*protocol.Error, error) {
	env := s.env
	repoID, worktreeID := env.GetRepoId(), env.GetWorktreeId()
	if repoID == "" && worktreeID == "" {
		return nil, nil
	}
	b, err := r.Binding(ctx, env.GetProducerId())
	if err != nil {
		return nil, err
	}
	if err := worktree.CheckEnvelope(b, repoID, worktreeID); err != nil {
		return protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "%v", err), nil
	}
	return nil, nil
}

// Binding returns agentID's worktree binding as the router judges envelopes by it: the
// store's projection, UNBOUND when none is recorded.
func (r *Router) Binding(ctx context.Context, agentID string) (worktree.Binding, error) {
	if agentID == "" {
		return worktree.Binding{State: worktree.StateUnbound}, nil
	}
	rec, err := r.st.Worktrees().GetBinding(ctx, agentID)
	if errors.Is(err, store.ErrNotFound) {
		return worktree.Binding{State: worktree.StateUnbound}, nil
	}
	if err != nil {
		return worktree.Binding{}, fmt.Errorf("look up the worktree binding of %s: %w", agentID, err)
	}
	return worktree.Binding{State: worktree.State(rec.State), RepoID: rec.RepoID, WorktreeID: rec.WorktreeID}, nil
}
