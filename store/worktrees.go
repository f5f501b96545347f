package store

import (
	"context"
	"time"
)

// WorktreeBinding is the projection of an agent's worktree binding (§16): what workflow
// worktree/<agent_id> last recorded. It answers WorktreeService.Status once the workflow has
// ended (after an unbind), and lets readers outside Temporal (the router, operators) see who
// is bound where without querying workflows.
type WorktreeBinding struct {
	// AgentID is the bound agent; one binding per agent.
	AgentID string
	// State is the §16.1 state in the spec's spelling (worktree.State), e.g. "BOUND_HOME".
	State string
	// RepoID and HomeWorktreeID name the agent's home worktree.
	RepoID, HomeWorktreeID string
	// WorktreeID is the worktree the agent works in now: the home worktree, or the switch's
	// target while BOUND_NON_HOME; empty when not bound.
	WorktreeID string
	// Branch and Path are WorktreeID's branch and directory.
	Branch, Path string
	// TargetWorktreeID is the target of a pending or approved switch.
	TargetWorktreeID string
	// Reason is the §16.3 reason of the last bind failure (e.g. "worktree_not_found") while
	// BIND_FAILED, empty otherwise.
	Reason string
	// Note says, for a person, what the last transition was about.
	Note string
	// ExpiresAt is when a BOUND_NON_HOME binding returns home (its TTL); zero otherwise.
	ExpiresAt time.Time
	// UpdatedAt is when the workflow made the transition (workflow time). A write older than
	// the stored one is ignored, so a late retry cannot undo a later transition.
	UpdatedAt time.Time
}

// WorktreeFilter narrows ListBindings; empty fields match everything.
type WorktreeFilter struct {
	// RepoID keeps the bindings whose home is in this repository.
	RepoID string
	// WorktreeID keeps the bindings working in this worktree now (WorktreeID).
	WorktreeID string
	// State keeps the bindings in this state.
	State string
}

// Worktrees stores the worktree binding projection (§16), one row per agent, written by the
// binding workflow on every transition.
type Worktrees interface {
	// PutBinding inserts or replaces the agent's binding, unless the stored one has a later
	// UpdatedAt (then it changes nothing and returns nil). AgentID and State are required.
	PutBinding(ctx context.Context, b WorktreeBinding) error
	// GetBinding returns the agent's binding or ErrNotFound.
	GetBinding(ctx context.Context, agentID string) (WorktreeBinding, error)
	// ListBindings returns the bindings the filter keeps, sorted by agent_id (byte order).
	ListBindings(ctx context.Context, f WorktreeFilter) ([]WorktreeBinding, error)
}
