package test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/frontend"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/proto/worktreepb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk/dag"
)

// aclScopesFile grants the scopes of worktrees, negotiations and DAG runs (docs/acl.md):
// coders bind the feature worktrees of "app", an auditor reads every negotiation and DAG,
// owners create the DAG workflows named own-*.
const aclScopesFile = `{
  "version": 1,
  "default": "deny",
  "rules": [
    {"name": "coders bind feature worktrees of app", "effect": "allow", "agents": ["TestACLScopes*coder*"],
     "scopes": ["repo:app", "repo:app/worktree:feature-*"]},
    {"name": "auditors read all work", "effect": "allow", "agents": ["TestACLScopes*auditor*"],
     "scopes": ["negotiation:*", "dag:*"]},
    {"name": "owners create their DAGs", "effect": "allow", "agents": ["TestACLScopes*owner*"], "scopes": ["dag:own-*"]}
  ]
}`

// TestACLScopes: with an ACL file in required mode, on both stores (§6.3, §6.5,
// docs/acl.md): binding a worktree needs the grant of the repository and of the worktree;
// deciding or reading another principal's negotiation needs the grant of its scope (its
// opener and participants need none); ListDAGRuns lists the runs of workflows the ACL grants
// the caller; each decision is an access.* audit row naming the rule.
func TestACLScopes(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := authConfig(t, kind, auth.Required)
			cfg.AuditAccess = frontend.AuditAll
			cfg.Repos = "app=" + gitRepo(t)
			cfg.ACLFile = filepath.Join(t.TempDir(), "acl.json")
			require.NoError(t, os.WriteFile(cfg.ACLFile, []byte(aclScopesFile), 0o600))
			sys := start(t, cfg)
			ctx := context.Background()
			coder, auditor, owner, other := dialSigned(t, sys, "coder"), dialSigned(t, sys, "auditor"), dialSigned(t, sys, "owner"), dialSigned(t, sys, "other")

			// Worktrees: the coder binds a feature worktree, not another; an agent without a
			// grant of the repository binds none. A refusal starts no binding.
			cw := worktreepb.NewWorktreeServiceClient(coder.Conn())
			var header metadata.MD
			_, err := cw.Bind(ctx, &worktreepb.BindRequest{AgentId: coder.ID(), RepoId: "app", WorktreeId: "release"}, grpc.Header(&header))
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), "permission_denied")
			assert.Equal(t, []string{"permission_denied"}, header.Get(wire.WorktreeReasonHeader))
			st, err := cw.Status(ctx, &worktreepb.StatusRequest{AgentId: coder.ID()})
			require.NoError(t, err)
			assert.Equal(t, "UNBOUND", st.GetState(), "a refused bind starts nothing")
			ow := worktreepb.NewWorktreeServiceClient(other.Conn())
			_, err = ow.Bind(ctx, &worktreepb.BindRequest{AgentId: other.ID(), RepoId: "app", WorktreeId: "feature-2"})
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
			bound, err := cw.Bind(ctx, &worktreepb.BindRequest{AgentId: coder.ID(), RepoId: "app", WorktreeId: "feature-1"})
			require.NoError(t, err)
			require.True(t, bound.GetOk(), bound.GetReason())
			_, err = cw.RequestSwitch(ctx, &worktreepb.SwitchRequest{AgentId: coder.ID(), TargetWorktreeId: "release"})
			require.Equal(t, codes.PermissionDenied, status.Code(err), "no switch to a worktree the ACL does not grant: %v", err)
			_, err = cw.Unbind(ctx, &worktreepb.UnbindRequest{AgentId: coder.ID()})
			require.NoError(t, err)

			// Negotiations: the opener's and participants'; the auditor reads by grant, an
			// agent without one neither reads nor decides.
			nid := uniq(t, "deal")
			_, err = negotiationpb.NewNegotiationServiceClient(owner.Conn()).Open(ctx, &negotiationpb.NegotiationOpen{NegotiationId: nid, Topic: "price",
				Participants: []string{owner.ID(), coder.ID()}, Intensity: commonpb.DebateIntensity_MEDIUM})
			require.NoError(t, err)
			policyOf := func(a *signedAgent) error {
				_, err := schedulerpb.NewSchedulerPolicyServiceClient(a.Conn()).GetEffectivePolicy(ctx, &schedulerpb.GetEffectivePolicyRequest{NegotiationId: nid})
				return err
			}
			require.NoError(t, policyOf(coder), "a participant reads its negotiation")
			require.NoError(t, policyOf(auditor), "the auditor's grant")
			err = policyOf(other)
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
			_, err = negotiationpb.NewNegotiationServiceClient(other.Conn()).Decide(ctx, &negotiationpb.Decision{NegotiationId: nid})
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
			_, err = negotiationpb.NewNegotiationServiceClient(other.Conn()).Abort(ctx, &negotiationpb.AbortRequest{NegotiationId: nid})
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
			_, err = negotiationpb.NewNegotiationServiceClient(coder.Conn()).Abort(ctx, &negotiationpb.AbortRequest{NegotiationId: nid, Reason: "done"})
			require.NoError(t, err, "a participant aborts")

			// DAG runs: the owner's run is listed to the auditor by grant, not to the other.
			id := "own-" + uniq(t, "dag")
			def, err := dag.New(id).Node("compile", owner.ID()).Build()
			require.NoError(t, err)
			owf := workflowpb.NewWorkflowServiceClient(owner.Conn())
			_, err = owf.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: def})
			require.NoError(t, err)
			_, err = owf.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: id})
			require.NoError(t, err)
			list := func(a *signedAgent) []string {
				resp, err := directorypb.NewDirectoryServiceClient(a.Conn()).ListDAGRuns(ctx, &directorypb.ListDAGRunsRequest{WorkflowIdPrefix: id})
				require.NoError(t, err)
				var ids []string
				for _, r := range resp.GetRuns() {
					ids = append(ids, r.GetWorkflowId())
				}
				return ids
			}
			require.Eventually(t, func() bool { return len(list(owner)) == 1 }, 15*time.Second, 100*time.Millisecond, "visibility lists the run")
			assert.Equal(t, []string{id}, list(auditor), "the auditor's grant of dag:*")
			assert.Empty(t, list(other), "no grant, no run")

			require.Eventually(t, func() bool {
				return findRow(accessRows(t, sys), map[string]any{"type": frontend.AuditAccessAllowed, "verb": "list the runs of", "scope": "dag:" + id}) != nil
			}, 10*time.Second, 50*time.Millisecond)
			rows := accessRows(t, sys)
			for _, want := range []map[string]any{
				{"type": frontend.AuditAccessRefused, "scope": "repo:app/worktree:release", "actor": "agent:" + coder.ID(), "verb": "bind", "decided_by": "acl", "rule": float64(-1)},
				{"type": frontend.AuditAccessAllowed, "scope": "repo:app", "actor": "agent:" + coder.ID(), "verb": "bind", "rule_name": "coders bind feature worktrees of app"},
				{"type": frontend.AuditAccessAllowed, "scope": "repo:app/worktree:feature-1", "actor": "agent:" + coder.ID(), "rule_name": "coders bind feature worktrees of app"},
				{"type": frontend.AuditAccessRefused, "scope": "repo:app", "actor": "agent:" + other.ID(), "decided_by": "acl", "rule": float64(-1)},
				{"type": frontend.AuditAccessRefused, "scope": "repo:app/worktree:release", "actor": "agent:" + coder.ID(), "verb": "switch to"},
				{"type": frontend.AuditAccessAllowed, "scope": "negotiation:" + nid, "actor": "agent:" + coder.ID(), "verb": "read", "decided_by": "owner"},
				{"type": frontend.AuditAccessAllowed, "scope": "negotiation:" + nid, "actor": "agent:" + auditor.ID(), "verb": "read", "rule_name": "auditors read all work"},
				{"type": frontend.AuditAccessRefused, "scope": "negotiation:" + nid, "actor": "agent:" + other.ID(), "verb": "read", "rule": float64(-1)},
				{"type": frontend.AuditAccessRefused, "scope": "negotiation:" + nid, "actor": "agent:" + other.ID(), "verb": "decide"},
				{"type": frontend.AuditAccessAllowed, "scope": "negotiation:" + nid, "actor": "agent:" + coder.ID(), "verb": "abort", "decided_by": "owner"},
				{"type": frontend.AuditAccessAllowed, "scope": "dag:" + id, "actor": "agent:" + auditor.ID(), "verb": "list the runs of", "rule_name": "auditors read all work"},
			} {
				assert.NotNil(t, findRow(rows, want), "no audit row %v", want)
			}
			assert.Nil(t, findRow(rows, map[string]any{"scope": "dag:" + id, "actor": "agent:" + other.ID()}), "a run left out of a listing is no refusal")
		})
	}
}
