package worktree

import "fmt"

// Binding is what the envelope check of §6.4 needs to know of an agent's binding: its state,
// the repository of its home worktree and the worktree it works in now (the home worktree,
// or an approved switch's target while BOUND_NON_HOME).
type Binding struct {
	// State is the §16.1 state; "" is taken as UNBOUND (no binding recorded).
	State State
	// RepoID is the home worktree's repository; a switch stays in it.
	RepoID string
	// WorktreeID is the worktree the agent works in now; empty when not bound.
	WorktreeID string
}

// CheckEnvelope decides whether an agent bound as b may send an envelope whose repo_id and
// worktree_id are repoID and worktreeID (§6.4: an agent's work stays within its designated
// worktree; §16: non-home operation is forbidden unless a switch was approved). An envelope
// naming neither is not about a worktree and always passes. Otherwise the agent must be bound
// (Bound: BOUND_HOME, SWITCH_PENDING or BOUND_NON_HOME), a repoID must be the binding's
// repository and a worktreeID the worktree the agent works in now — its home, or while
// BOUND_NON_HOME the approved target only: a switch moves the agent, it does not widen what
// it may touch. Either field may be given alone. The refusal says what was named and what the
// binding allows; the caller answers it with permission_denied.
func CheckEnvelope(b Binding, repoID, worktreeID string) error {
	if repoID == "" && worktreeID == "" {
		return nil
	}
	state := b.State
	if state == "" {
		state = StateUnbound
	}
	named := describe(repoID, worktreeID)
	if !Bound(state) {
		return fmt.Errorf("the envelope names %s, but its producer is not bound to a worktree (state %s; §6.4, §16)", named, state)
	}
	if (repoID != "" && repoID != b.RepoID) || (worktreeID != "" && worktreeID != b.WorktreeID) {
		return fmt.Errorf("the envelope names %s, but its producer is bound to repo_id %s worktree_id %s (state %s; §6.4, §16)",
			named, quote(b.RepoID), quote(b.WorktreeID), state)
	}
	return nil
}

// describe names the repo_id and worktree_id an envelope carries, whichever it carries.
func describe(repoID, worktreeID string) string {
	switch {
	case repoID == "":
		return "worktree_id " + quote(worktreeID)
	case worktreeID == "":
		return "repo_id " + quote(repoID)
	}
	return "repo_id " + quote(repoID) + " worktree_id " + quote(worktreeID)
}
