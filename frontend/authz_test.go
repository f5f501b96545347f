package frontend

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowdefpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/proto/worktreepb"
)

// TestEveryServedMethodHasARule: required mode denies a method without a rule, so every
// method the frontend serves must have one — a new service that forgets its rules fails here
// rather than being closed (or open) by accident.
func TestEveryServedMethodHasARule(t *testing.T) {
	g := grpc.NewServer()
	(&Server{}).Register(g)
	n := 0
	for name, info := range g.GetServiceInfo() {
		for _, m := range info.Methods {
			method := "/" + name + "/" + m.Name
			_, ok := ruleOf(method)
			assert.True(t, ok, "%s has no authorization rule (frontend/authz.go)", method)
			n++
		}
	}
	require.Greater(t, n, 50)
}

func TestAuthorizeRules(t *testing.T) {
	a := NewAuthenticator(AuthConfig{Mode: auth.Required})
	defer a.Close()
	alice := auth.Principal{Agent: "alice", KeyID: "ed25519:00"}
	ops := auth.Principal{Operator: "ops"}
	for name, tc := range map[string]struct {
		method string
		req    any
		p      auth.Principal
		ok     bool
	}{
		"agent streams its inbox":              {routerpb.RouterService_StreamIncoming_FullMethodName, &routerpb.StreamRequest{AgentId: "alice"}, alice, true},
		"agent streams another's inbox":        {routerpb.RouterService_StreamIncoming_FullMethodName, &routerpb.StreamRequest{AgentId: "bob"}, alice, false},
		"operator cannot stream an inbox":      {routerpb.RouterService_StreamIncoming_FullMethodName, &routerpb.StreamRequest{AgentId: "bob"}, ops, false},
		"operator deregisters an agent":        {registrypb.RegistryService_DeregisterAgent_FullMethodName, &registrypb.DeregisterAgentRequest{AgentId: "bob"}, ops, true},
		"agent deregisters itself":             {registrypb.RegistryService_DeregisterAgent_FullMethodName, &registrypb.DeregisterAgentRequest{AgentId: "alice"}, alice, true},
		"agent deregisters another":            {registrypb.RegistryService_DeregisterAgent_FullMethodName, &registrypb.DeregisterAgentRequest{AgentId: "bob"}, alice, false},
		"anonymous heartbeat":                  {registrypb.RegistryService_Heartbeat_FullMethodName, &registrypb.HeartbeatRequest{AgentId: "alice"}, auth.Principal{}, false},
		"agent calls an operator service":      {"/sw4rmext.dlq.v1.DlqAdminService/Requeue", nil, alice, false},
		"operator calls an operator service":   {"/sw4rmext.dlq.v1.DlqAdminService/Requeue", nil, ops, true},
		"anonymous health check":               {"/grpc.health.v1.Health/Check", nil, auth.Principal{}, true},
		"unknown method":                       {"/sw4rm.secret.Service/Do", nil, ops, false},
		"agent creates a workflow":             {workflowpb.WorkflowService_CreateWorkflow_FullMethodName, &workflowpb.CreateWorkflowRequest{}, alice, true},
		"anonymous creates a workflow":         {workflowpb.WorkflowService_CreateWorkflow_FullMethodName, &workflowpb.CreateWorkflowRequest{}, auth.Principal{}, false},
		"operator reads a definition":          {workflowdefpb.DefinitionService_GetDefinition_FullMethodName, &workflowdefpb.GetDefinitionRequest{}, ops, true},
		"anonymous reads a definition":         {workflowdefpb.DefinitionService_GetDefinition_FullMethodName, &workflowdefpb.GetDefinitionRequest{}, auth.Principal{}, false},
		"agent sets the negotiation policy":    {schedulerpb.SchedulerPolicyService_SetNegotiationPolicy_FullMethodName, &schedulerpb.SetNegotiationPolicyRequest{}, alice, false},
		"operator sets the negotiation policy": {schedulerpb.SchedulerPolicyService_SetNegotiationPolicy_FullMethodName, &schedulerpb.SetNegotiationPolicyRequest{}, ops, true},
		"agent sets policy profiles":           {schedulerpb.SchedulerPolicyService_SetPolicyProfiles_FullMethodName, &schedulerpb.SetPolicyProfilesRequest{}, alice, false},
		"operator sets policy profiles":        {schedulerpb.SchedulerPolicyService_SetPolicyProfiles_FullMethodName, &schedulerpb.SetPolicyProfilesRequest{}, ops, true},
		"agent reads the negotiation policy":   {schedulerpb.SchedulerPolicyService_GetNegotiationPolicy_FullMethodName, &schedulerpb.GetNegotiationPolicyRequest{}, alice, true},
		"agent lists policy profiles":          {schedulerpb.SchedulerPolicyService_ListPolicyProfiles_FullMethodName, &schedulerpb.ListPolicyProfilesRequest{}, alice, true},
		"agent binds itself":                   {worktreepb.WorktreeService_Bind_FullMethodName, &worktreepb.BindRequest{AgentId: "alice"}, alice, true},
		"agent binds another":                  {worktreepb.WorktreeService_Bind_FullMethodName, &worktreepb.BindRequest{AgentId: "bob"}, alice, false},
		"operator binds an agent":              {worktreepb.WorktreeService_Bind_FullMethodName, &worktreepb.BindRequest{AgentId: "bob"}, ops, true},
		"agent reads its binding":              {worktreepb.WorktreeService_Status_FullMethodName, &worktreepb.StatusRequest{AgentId: "alice"}, alice, true},
		"agent reads another's binding":        {worktreepb.WorktreeService_Status_FullMethodName, &worktreepb.StatusRequest{AgentId: "bob"}, alice, false},
		"agent asks to switch itself":          {worktreepb.WorktreeService_RequestSwitch_FullMethodName, &worktreepb.SwitchRequest{AgentId: "alice"}, alice, true},
		"agent approves its own switch":        {worktreepb.WorktreeService_ApproveSwitch_FullMethodName, &worktreepb.SwitchApprove{AgentId: "alice"}, alice, false},
		"operator approves a switch":           {worktreepb.WorktreeService_ApproveSwitch_FullMethodName, &worktreepb.SwitchApprove{AgentId: "alice"}, ops, true},
		"agent rejects a switch":               {worktreepb.WorktreeService_RejectSwitch_FullMethodName, &worktreepb.SwitchReject{AgentId: "alice"}, alice, false},
		"operator unbinds an agent":            {worktreepb.WorktreeService_Unbind_FullMethodName, &worktreepb.UnbindRequest{AgentId: "alice"}, ops, true},
		"anonymous lists policy profiles":      {schedulerpb.SchedulerPolicyService_ListPolicyProfiles_FullMethodName, &schedulerpb.ListPolicyProfilesRequest{}, auth.Principal{}, false},
	} {
		t.Run(name, func(t *testing.T) {
			err := a.authorize(tc.method, tc.req, tc.p)
			if tc.ok {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
		})
	}
}
