package frontend

import (
	"context"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/protocol/acl"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// The resource scopes of worktrees and negotiations (§6.3), decided like the DAG and tool
// call scopes of access.go and logged through the same access log.

// decideWorktree decides whether the caller may verb ("bind", "switch to") the worktree
// worktreeID of repository repoID for agent: with an ACL file, an agent needs the ACL to
// allow both the repository's scope, repo:<repo_id>, and the worktree's,
// repo:<repo_id>/worktree:<worktree_id> (a rule may grant both with "repo:core" and
// "repo:core/worktree:*"); an operator is not subject to the ACL. Without an ACL file
// nothing is decided here: authz.go's rule (the agent itself or an operator) is the whole
// check, as before. A refusal is PERMISSION_DENIED with the §16.3 reason permission_denied
// in the sw4rm-worktree-reason header; the binding is not started, so it never enters
// BIND_FAILED for a bind it was never allowed to make.
func (s *Server) decideWorktree(ctx context.Context, agent, repoID, worktreeID, verb string) error {
	if s.cfg.ACL == nil {
		return nil
	}
	p := auth.FromContext(ctx)
	for _, r := range []resource{
		{kind: "repository", id: repoID, scope: acl.Scope(repoID, "")},
		{kind: "worktree", id: repoID + "/" + worktreeID, scope: acl.Scope(repoID, worktreeID)},
	} {
		if err := s.decideResource(ctx, p, p.String(), agent, verb, r); err != nil {
			_ = grpc.SetHeader(ctx, metadata.Pairs(wire.WorktreeReasonHeader, string(worktree.ReasonPermissionDenied)))
			return err
		}
	}
	return nil
}

// decideNegotiation decides whether the caller may verb negotiation id, whose state is st
// (§17): its opener may do anything the handler allows; its participants may when
// participants is true (abort, read); an operator may; anyone else needs an ACL grant of
// negotiation:<id> — without an ACL file nobody else may. An anonymous caller keeps what it
// had (authentication off or optional: the workflow still checks what it records).
func (s *Server) decideNegotiation(ctx context.Context, id, verb string, st workflows.NegotiationState, participants bool) error {
	owners := []string{st.Opener}
	if participants {
		for _, a := range st.Participants {
			if o := (auth.Principal{Agent: a}).String(); !slices.Contains(owners, o) {
				owners = append(owners, o)
			}
		}
	}
	p := auth.FromContext(ctx)
	return s.decideResource(ctx, p, p.String(), p.Agent, verb,
		resource{kind: "negotiation", id: id, scope: acl.NegotiationScope(id), owners: owners, anonymousOpen: true})
}
