package test

import (
	"context"
	"encoding/json"
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
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowdefpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk/dag"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// aclPolicyFile is the ACL of the policy tests: docs/acl.md's read-only reviewer and builder,
// with agent ids the tests make unique by prefix.
const aclPolicyFile = `{
  "version": 1,
  "default": "deny",
  "rules": [
    {"name": "reviewers read files", "effect": "allow", "agents": ["TestACL*reviewer*"],
     "tools": ["fs.read", "fs.list", "echo"], "providers": ["builtin"]},
    {"name": "reviewers read every DAG", "effect": "allow", "agents": ["TestACL*reviewer*"], "scopes": ["dag:*"]},
    {"name": "builders run tests, offline", "effect": "allow", "agents": ["TestACL*builder*"],
     "tools": ["process.run", "echo"], "providers": ["builtin"],
     "max_execution_policy": {"network_policy": "DENY_ALL", "privilege_level": "DEFAULT"}},
    {"name": "builders own their DAGs", "effect": "allow", "agents": ["TestACL*builder*"], "scopes": ["dag:build-*"]}
  ]
}`

// accessRows returns the access.* audit rows (access.allowed and access.refused), details
// decoded, with their type and actor.
func accessRows(t *testing.T, sys *system) []map[string]any {
	t.Helper()
	evs, err := sys.app.Store().Audit().List(context.Background(), store.AuditFilter{TypePrefix: "access.", Limit: 1000})
	require.NoError(t, err)
	rows := make([]map[string]any, 0, len(evs))
	for _, e := range evs {
		var d map[string]any
		require.NoError(t, json.Unmarshal(e.Details, &d))
		d["type"], d["actor"] = e.Type, e.Actor
		rows = append(rows, d)
	}
	return rows
}

// findRow returns the first row whose fields include every field of want.
func findRow(rows []map[string]any, want map[string]any) map[string]any {
	for _, r := range rows {
		match := true
		for k, v := range want {
			if r[k] != v {
				match = false
				break
			}
		}
		if match {
			return r
		}
	}
	return nil
}

// TestACLOnToolsAndWork: with an ACL file in required mode, on both stores (§6.3, §6.5,
// docs/acl.md): a read-only reviewer cannot call process.run (PERMISSION_DENIED, the §18.3
// code, in the status and trailer) and can call its read tools; a builder may run
// process.run at DENY_ALL but not with a wider network policy (max_execution_policy); an
// agent can neither read nor start another's DAG nor read another's tool call frames, while
// the owner, an operator and an agent with an ACL grant can; and every decision, allowed or
// refused, is an access.* audit row naming the rule that decided.
func TestACLOnToolsAndWork(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := authConfig(t, kind, auth.Required)
			cfg.AuditAccess = frontend.AuditAll
			cfg.ACLFile = filepath.Join(t.TempDir(), "acl.json")
			require.NoError(t, os.WriteFile(cfg.ACLFile, []byte(aclPolicyFile), 0o600))
			sys := start(t, cfg)
			ctx := context.Background()
			reviewer, builder, other := dialSigned(t, sys, "reviewer"), dialSigned(t, sys, "builder"), dialSigned(t, sys, "other")
			b := tools.BuiltinProviderID

			// Tools: the reviewer reads, never runs a process.
			rt := toolpb.NewToolServiceClient(reviewer.Conn())
			var trailer metadata.MD
			_, err := rt.Call(ctx, &toolpb.ToolCall{ProviderId: b, ToolName: "process.run", Args: []byte(`{"argv":["go","test","./..."]}`)}, grpc.Trailer(&trailer))
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
			assert.Equal(t, []string{"PERMISSION_DENIED"}, trailer.Get(wire.ToolErrorCodeTrailer))
			assert.Contains(t, status.Convert(err).Message(), "no rule covers")
			echo, err := rt.Call(ctx, &toolpb.ToolCall{ProviderId: b, ToolName: "echo", Args: []byte(`{"n":1}`)})
			require.NoError(t, err, "a read tool the rule allows runs")
			// fs.read passes the ACL and stops at the worktree it needs (§16), not at the ACL.
			_, err = rt.Call(ctx, &toolpb.ToolCall{ProviderId: b, ToolName: "fs.read", Args: []byte(`{"path":"a.txt"}`)}, grpc.Trailer(&trailer))
			require.Error(t, err)
			assert.Equal(t, []string{"WORKTREE_NOT_BOUND"}, trailer.Get(wire.ToolErrorCodeTrailer), "%v", err)

			// The builder runs process.run at DENY_ALL (then needs its worktree), not wider.
			bt := toolpb.NewToolServiceClient(builder.Conn())
			_, err = bt.Call(ctx, &toolpb.ToolCall{ProviderId: b, ToolName: "process.run", Args: []byte(`{"argv":["go","test","./..."]}`),
				Policy: &toolpb.ExecutionPolicy{PrivilegeLevel: "DEFAULT"}}, grpc.Trailer(&trailer))
			require.Error(t, err)
			assert.Equal(t, []string{"WORKTREE_NOT_BOUND"}, trailer.Get(wire.ToolErrorCodeTrailer), "the ACL allowed it: %v", err)
			_, err = bt.Call(ctx, &toolpb.ToolCall{ProviderId: b, ToolName: "process.run", Args: []byte(`{"argv":["go","test","./..."]}`),
				Policy: &toolpb.ExecutionPolicy{PrivilegeLevel: "DEFAULT", NetworkPolicy: "EGRESS_UNRESTRICTED"}}, grpc.Trailer(&trailer))
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
			assert.Equal(t, []string{"PERMISSION_DENIED"}, trailer.Get(wire.ToolErrorCodeTrailer))
			assert.Contains(t, status.Convert(err).Message(), "network_policy EGRESS_UNRESTRICTED (at most DENY_ALL)")

			// Tool call frames are their caller's: another agent may not resume the stream.
			ot := toolpb.NewToolServiceClient(other.Conn())
			resume := metadata.AppendToOutgoingContext(ctx, wire.ResumeAfterKey, "0")
			st, err := ot.CallStream(resume, &toolpb.ToolCall{CallId: echo.GetCallId()})
			if err == nil {
				_, err = st.Recv()
			}
			require.Equal(t, codes.PermissionDenied, status.Code(err), "another agent reads no frames of the reviewer's call: %v", err)
			st, err = rt.CallStream(resume, &toolpb.ToolCall{CallId: echo.GetCallId()})
			require.NoError(t, err)
			assert.NotEmpty(t, drain(t, st), "the caller reads its own frames")

			// DAGs: the builder creates and starts its own; the other agent may not touch it;
			// the reviewer reads it by grant, an operator as an operator.
			id := "build-" + uniq(t, "dag")
			def, err := dag.New(id).Node("compile", builder.ID()).Build()
			require.NoError(t, err)
			bw := workflowpb.NewWorkflowServiceClient(builder.Conn())
			_, err = bw.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: def})
			require.NoError(t, err)
			_, err = bw.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: id})
			require.NoError(t, err)
			_, err = bw.GetWorkflowState(ctx, &workflowpb.GetWorkflowStateRequest{WorkflowId: id})
			require.NoError(t, err, "the owner reads its run")

			ow := workflowpb.NewWorkflowServiceClient(other.Conn())
			_, err = ow.GetWorkflowState(ctx, &workflowpb.GetWorkflowStateRequest{WorkflowId: id})
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), "permission_denied")
			_, err = ow.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: id})
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
			_, err = ow.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: def})
			require.Equal(t, codes.PermissionDenied, status.Code(err), "no new version of another's workflow: %v", err)
			_, err = workflowdefpb.NewDefinitionServiceClient(other.Conn()).GetDefinition(ctx, &workflowdefpb.GetDefinitionRequest{WorkflowId: id})
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)

			_, err = workflowpb.NewWorkflowServiceClient(reviewer.Conn()).GetWorkflowState(ctx, &workflowpb.GetWorkflowStateRequest{WorkflowId: id})
			require.NoError(t, err, "the reviewer's ACL grant dag:*")
			_, err = workflowpb.NewWorkflowServiceClient(dialRaw(t, sys)).GetWorkflowState(operatorContext(), &workflowpb.GetWorkflowStateRequest{WorkflowId: id})
			require.NoError(t, err, "an operator reads any run")

			// A new workflow outside the builder's scopes is the ACL's default: deny.
			otherDef, err := dag.New(uniq(t, "elsewhere")).Node("compile", builder.ID()).Build()
			require.NoError(t, err)
			_, err = bw.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: otherDef})
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)

			// Every decision is in the audit log, the allowed ones too, with the rule.
			require.Eventually(t, func() bool {
				rows := accessRows(t, sys)
				return findRow(rows, map[string]any{"type": frontend.AuditAccessRefused, "tool_name": "process.run", "actor": "agent:" + reviewer.ID()}) != nil &&
					findRow(rows, map[string]any{"type": frontend.AuditAccessAllowed, "scope": "dag:" + id, "decided_by": "operator"}) != nil
			}, 10*time.Second, 50*time.Millisecond)
			rows := accessRows(t, sys)
			for _, want := range []map[string]any{
				{"type": frontend.AuditAccessRefused, "tool_name": "process.run", "actor": "agent:" + reviewer.ID(), "decided_by": "acl", "rule": float64(-1)},
				{"type": frontend.AuditAccessAllowed, "tool_name": "echo", "actor": "agent:" + reviewer.ID(), "decided_by": "acl", "rule_name": "reviewers read files"},
				{"type": frontend.AuditAccessRefused, "tool_name": "process.run", "actor": "agent:" + builder.ID(), "rule_name": "builders run tests, offline",
					"network_policy": "EGRESS_UNRESTRICTED", "exceeds_max_execution_policy": true},
				{"type": frontend.AuditAccessAllowed, "tool_name": "process.run", "actor": "agent:" + builder.ID(), "rule_name": "builders run tests, offline",
					"network_policy": "DENY_ALL"},
				{"type": frontend.AuditAccessRefused, "scope": "tool_call:" + echo.GetCallId(), "actor": "agent:" + other.ID(), "decided_by": "acl"},
				{"type": frontend.AuditAccessAllowed, "scope": "tool_call:" + echo.GetCallId(), "actor": "agent:" + reviewer.ID(), "decided_by": "owner"},
				{"type": frontend.AuditAccessAllowed, "scope": "dag:" + id, "actor": "agent:" + builder.ID(), "verb": "create a version of", "rule_name": "builders own their DAGs"},
				{"type": frontend.AuditAccessAllowed, "scope": "dag:" + id, "actor": "agent:" + builder.ID(), "verb": "read", "decided_by": "owner"},
				{"type": frontend.AuditAccessRefused, "scope": "dag:" + id, "actor": "agent:" + other.ID(), "verb": "read",
					"method": workflowpb.WorkflowService_GetWorkflowState_FullMethodName},
				{"type": frontend.AuditAccessAllowed, "scope": "dag:" + id, "actor": "agent:" + reviewer.ID(), "rule_name": "reviewers read every DAG"},
			} {
				assert.NotNil(t, findRow(rows, want), "no audit row %v", want)
			}
		})
	}
}

// TestIsolationWithoutACL: with no ACL file in required mode, an agent still cannot read
// another agent's DAG run or tool call frames (ownership isolation, §6.5), while the owner
// and an operator can — on both stores.
func TestIsolationWithoutACL(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, authConfig(t, kind, auth.Required))
			ctx := context.Background()
			owner, other := dialSigned(t, sys, "owner"), dialSigned(t, sys, "other")

			echo, err := toolpb.NewToolServiceClient(owner.Conn()).Call(ctx, &toolpb.ToolCall{ProviderId: tools.BuiltinProviderID, ToolName: "echo", Args: []byte(`{}`)})
			require.NoError(t, err, "no ACL: any proven agent calls any tool, as before")
			resume := metadata.AppendToOutgoingContext(ctx, wire.ResumeAfterKey, "0")
			st, err := toolpb.NewToolServiceClient(other.Conn()).CallStream(resume, &toolpb.ToolCall{CallId: echo.GetCallId()})
			if err == nil {
				_, err = st.Recv()
			}
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)

			id := uniq(t, "dag")
			def, err := dag.New(id).Node("compile", owner.ID()).Build()
			require.NoError(t, err)
			ow := workflowpb.NewWorkflowServiceClient(owner.Conn())
			_, err = ow.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: def})
			require.NoError(t, err)
			_, err = ow.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: id})
			require.NoError(t, err)
			_, err = workflowpb.NewWorkflowServiceClient(other.Conn()).GetWorkflowState(ctx, &workflowpb.GetWorkflowStateRequest{WorkflowId: id})
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), "without an ACL grant of scope \"dag:"+id+"\"")
			_, err = ow.GetWorkflowState(ctx, &workflowpb.GetWorkflowStateRequest{WorkflowId: id})
			require.NoError(t, err)
			_, err = workflowpb.NewWorkflowServiceClient(dialRaw(t, sys)).GetWorkflowState(operatorContext(), &workflowpb.GetWorkflowStateRequest{WorkflowId: id})
			require.NoError(t, err)

			// The refusals are audited by default (SW4RM_AUDIT_ACCESS=refused), naming no rule.
			require.Eventually(t, func() bool {
				return findRow(accessRows(t, sys), map[string]any{"type": frontend.AuditAccessRefused, "scope": "dag:" + id, "decided_by": "no_acl"}) != nil
			}, 10*time.Second, 50*time.Millisecond)
			assert.Nil(t, findRow(accessRows(t, sys), map[string]any{"type": frontend.AuditAccessAllowed}), "allowed decisions are only counted by default")
		})
	}
}
