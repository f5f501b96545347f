package frontend

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// newDirectory is a DirectoryService over a fresh memory store.
func newDirectory(t *testing.T) (*directoryService, store.Store) {
	t.Helper()
	st := memory.New()
	t.Cleanup(st.Close)
	return &directoryService{s: &Server{store: st}}, st
}

// readAs is a handler's context for principal p with incoming metadata md (key, value, ...).
func readAs(t *testing.T, p auth.Principal, md ...string) context.Context {
	return auth.WithPrincipal(metadata.NewIncomingContext(t.Context(), metadata.Pairs(md...)), p)
}

// requireRefusal asserts that err travels as code with the error_code prefix.
func requireRefusal(t *testing.T, err error, code codes.Code, prefix string) {
	t.Helper()
	require.Error(t, err)
	st := toStatus(t.Context(), err)
	require.Equal(t, code, st.Code(), "%v", err)
	assert.Regexp(t, "^"+prefix+": ", st.Message())
}

// putAgent registers an agent in the store with a state, health map and heartbeat.
func putAgent(t *testing.T, st store.Store, id string, state commonpb.AgentState, caps ...string) {
	t.Helper()
	ctx := t.Context()
	require.NoError(t, st.Registry().PutAgent(ctx, store.AgentRecord{Descriptor: &registrypb.AgentDescriptor{AgentId: id, Name: id, Capabilities: caps},
		State: commonpb.AgentState_INITIALIZING, RegisteredAt: time.Now().UTC()}))
	require.NoError(t, st.Registry().SetAgentState(ctx, id, state))
}

// TestDirectoryGetAgent: an agent's record answers with its lifecycle state by enum name,
// its health map and heartbeat; an unknown agent is no_route, a malformed id validation_error.
func TestDirectoryGetAgent(t *testing.T) {
	d, st := newDirectory(t)
	ctx := readAs(t, auth.Principal{Agent: "reader"})
	putAgent(t, st, "billing", commonpb.AgentState_RUNNING, "invoices")
	beat := time.Now().UTC().Truncate(time.Millisecond)
	require.NoError(t, st.Registry().RecordHeartbeat(ctx, "billing", map[string]string{"load": "0.5"}, beat))

	got, err := d.GetAgent(ctx, &directorypb.GetAgentRequest{AgentId: "billing"})
	require.NoError(t, err)
	assert.Equal(t, "RUNNING", got.GetState())
	assert.Equal(t, "billing", got.GetAgent().GetAgentId())
	assert.Equal(t, map[string]string{"load": "0.5"}, got.GetHealth())
	assert.True(t, got.GetLastHeartbeat().AsTime().Equal(beat), "%v", got.GetLastHeartbeat().AsTime())
	assert.NotNil(t, got.GetRegisteredAt())

	putAgent(t, st, "quiet", commonpb.AgentState_INITIALIZING)
	got, err = d.GetAgent(ctx, &directorypb.GetAgentRequest{AgentId: "quiet"})
	require.NoError(t, err)
	assert.Nil(t, got.GetLastHeartbeat(), "no heartbeat yet: unset, not the epoch")

	_, err = d.GetAgent(ctx, &directorypb.GetAgentRequest{AgentId: "nobody"})
	requireRefusal(t, err, codes.NotFound, "no_route")
	_, err = d.GetAgent(ctx, &directorypb.GetAgentRequest{})
	requireRefusal(t, err, codes.InvalidArgument, "validation_error")
}

// TestDirectoryListAgents: the listing is ordered by agent_id and filtered by capability and
// state; an unknown state name is validation_error.
func TestDirectoryListAgents(t *testing.T) {
	d, st := newDirectory(t)
	ctx := readAs(t, auth.Principal{Agent: "reader"})
	putAgent(t, st, "c", commonpb.AgentState_RUNNABLE, "x")
	putAgent(t, st, "a", commonpb.AgentState_RUNNABLE, "x", "y")
	putAgent(t, st, "b", commonpb.AgentState_SUSPENDED, "y")

	ids := func(req *directorypb.ListAgentsRequest) []string {
		t.Helper()
		resp, err := d.ListAgents(ctx, req)
		require.NoError(t, err)
		var out []string
		for _, a := range resp.GetAgents() {
			out = append(out, a.GetAgent().GetAgentId()+"="+a.GetState())
		}
		return out
	}
	assert.Equal(t, []string{"a=RUNNABLE", "b=SUSPENDED", "c=RUNNABLE"}, ids(&directorypb.ListAgentsRequest{}))
	assert.Equal(t, []string{"a=RUNNABLE", "b=SUSPENDED"}, ids(&directorypb.ListAgentsRequest{Capability: "y"}))
	assert.Equal(t, []string{"a=RUNNABLE", "c=RUNNABLE"}, ids(&directorypb.ListAgentsRequest{State: "RUNNABLE"}))
	assert.Equal(t, []string{"a=RUNNABLE"}, ids(&directorypb.ListAgentsRequest{State: "RUNNABLE", Capability: "y"}))
	_, err := d.ListAgents(ctx, &directorypb.ListAgentsRequest{State: "BUSY"})
	requireRefusal(t, err, codes.InvalidArgument, "validation_error")
}

// TestDirectoryGetHandoffParties: a handoff is read by its originator, the agent it is
// offered to and the one that accepted it, with the context snapshot; by an operator, and by
// an anonymous caller that names no agent, without it — also an operator naming a party in
// sw4rm-agent-id. Any other agent, proven or named, is permission_denied; an unknown
// request_id is no_route and a malformed one validation_error.
func TestDirectoryGetHandoffParties(t *testing.T) {
	d, st := newDirectory(t)
	ctx := t.Context()
	body, err := proto.Marshal(&handoffpb.HandoffRequest{RequestId: "h-1", FromAgent: "triage", Reason: "billing question",
		ContextSnapshot: []byte(`{"ticket":42}`), CapabilitiesRequired: []string{"invoices"}, Priority: 3})
	require.NoError(t, err)
	_, err = st.Handoffs().CreateHandoff(ctx, store.HandoffRecord{RequestID: "h-1", Correlation: "corr-1", From: "triage",
		Target: "billing", Request: body, ContextContentType: "application/json"})
	require.NoError(t, err)
	require.NoError(t, st.Handoffs().UpdateHandoff(ctx, "h-1", handoffpb.HandoffStatus_ACCEPTED, "billing", "billing", ""))

	get := func(ctx context.Context) (*directorypb.HandoffEntry, error) {
		return d.GetHandoff(ctx, &directorypb.GetHandoffRequest{RequestId: "h-1"})
	}
	for name, tc := range map[string]struct {
		ctx      context.Context
		snapshot bool
	}{
		"originator":                 {readAs(t, auth.Principal{Agent: "triage"}), true},
		"accepting agent":            {readAs(t, auth.Principal{Agent: "billing"}), true},
		"operator":                   {readAs(t, auth.Principal{Operator: "ops"}), false},
		"operator naming a party":    {readAs(t, auth.Principal{Operator: "ops"}, "sw4rm-agent-id", "billing"), false},
		"anonymous":                  {readAs(t, auth.Principal{}), false},
		"anonymous naming the party": {readAs(t, auth.Principal{}, "sw4rm-agent-id", "triage"), true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := get(tc.ctx)
			require.NoError(t, err)
			assert.Equal(t, "ACCEPTED", got.GetState())
			assert.Equal(t, "triage", got.GetFromAgent())
			assert.Empty(t, got.GetToAgent(), "the request named no target")
			assert.Equal(t, "billing", got.GetOfferedTo())
			assert.Equal(t, "billing", got.GetAcceptedBy())
			assert.Equal(t, []string{"invoices"}, got.GetCapabilitiesRequired())
			assert.Equal(t, "billing question", got.GetReason())
			assert.Equal(t, "corr-1", got.GetCorrelationId())
			assert.Equal(t, int32(3), got.GetPriority())
			assert.Equal(t, "application/json", got.GetContextContentType())
			assert.NotNil(t, got.GetCreatedAt())
			assert.NotNil(t, got.GetUpdatedAt())
			if tc.snapshot {
				assert.Equal(t, `{"ticket":42}`, string(got.GetContextSnapshot()))
			} else {
				assert.Empty(t, got.GetContextSnapshot(), "the snapshot is the parties' alone")
			}
		})
	}

	_, err = get(readAs(t, auth.Principal{Agent: "mallory"}))
	requireRefusal(t, err, codes.PermissionDenied, "permission_denied")
	_, err = get(readAs(t, auth.Principal{}, "sw4rm-agent-id", "mallory"))
	requireRefusal(t, err, codes.PermissionDenied, "permission_denied")
	_, err = d.GetHandoff(readAs(t, auth.Principal{Operator: "ops"}), &directorypb.GetHandoffRequest{RequestId: "h-2"})
	requireRefusal(t, err, codes.NotFound, "no_route")
	_, err = d.GetHandoff(readAs(t, auth.Principal{Operator: "ops"}), &directorypb.GetHandoffRequest{RequestId: "h 2"})
	requireRefusal(t, err, codes.InvalidArgument, "validation_error")
}

// TestDirectoryListToolProviders: providers come grouped with their tools sorted by name,
// ordered by provider_id and filtered by kind; an unknown kind is validation_error.
func TestDirectoryListToolProviders(t *testing.T) {
	d, st := newDirectory(t)
	ctx := readAs(t, auth.Principal{Agent: "reader"})
	tp := st.ToolProviders()
	desc := func(name string) *connectorpb.ToolDescriptor {
		return &connectorpb.ToolDescriptor{ToolName: name, InputSchema: `{"type":"object"}`}
	}
	require.NoError(t, tp.RegisterProvider(ctx, "zeta", "connector", []*connectorpb.ToolDescriptor{desc("b"), desc("a")}, "agent:zeta"))
	require.NoError(t, tp.RegisterProvider(ctx, "alpha", "mcp", []*connectorpb.ToolDescriptor{desc("fetch")}, "operator:ops"))
	require.NoError(t, tp.RegisterProvider(ctx, "empty", "connector", nil, "agent:empty"))

	resp, err := d.ListToolProviders(ctx, &directorypb.ListToolProvidersRequest{})
	require.NoError(t, err)
	require.Len(t, resp.GetProviders(), 2, "a provider without tools offers nothing: %v", resp.GetProviders())
	alpha, zeta := resp.GetProviders()[0], resp.GetProviders()[1]
	assert.Equal(t, "alpha", alpha.GetProviderId())
	assert.Equal(t, "mcp", alpha.GetKind())
	assert.NotNil(t, alpha.GetRegisteredAt())
	require.Len(t, zeta.GetTools(), 2)
	assert.Equal(t, []string{"a", "b"}, []string{zeta.GetTools()[0].GetToolName(), zeta.GetTools()[1].GetToolName()})

	resp, err = d.ListToolProviders(ctx, &directorypb.ListToolProvidersRequest{Kind: "connector"})
	require.NoError(t, err)
	require.Len(t, resp.GetProviders(), 1)
	assert.Equal(t, "zeta", resp.GetProviders()[0].GetProviderId())

	_, err = d.ListToolProviders(ctx, &directorypb.ListToolProvidersRequest{Kind: "agents"})
	requireRefusal(t, err, codes.InvalidArgument, "validation_error")
}

// TestDirectoryAuthorization: in required mode every directory read needs a proven caller,
// agent or operator; which handoff an agent may read is the handler's check.
func TestDirectoryAuthorization(t *testing.T) {
	a := NewAuthenticator(AuthConfig{Mode: auth.Required})
	defer a.Close()
	for _, m := range []struct {
		method string
		req    any
	}{
		{directorypb.DirectoryService_GetAgent_FullMethodName, &directorypb.GetAgentRequest{AgentId: "bob"}},
		{directorypb.DirectoryService_ListAgents_FullMethodName, &directorypb.ListAgentsRequest{}},
		{directorypb.DirectoryService_GetHandoff_FullMethodName, &directorypb.GetHandoffRequest{RequestId: "h-1"}},
		{directorypb.DirectoryService_ListToolProviders_FullMethodName, &directorypb.ListToolProvidersRequest{}},
		{directorypb.DirectoryService_ListTasks_FullMethodName, &directorypb.ListTasksRequest{}},
		{directorypb.DirectoryService_ListDAGRuns_FullMethodName, &directorypb.ListDAGRunsRequest{}},
		{directorypb.DirectoryService_ListToolCalls_FullMethodName, &directorypb.ListToolCallsRequest{}},
	} {
		assert.NoError(t, a.authorize(m.method, m.req, auth.Principal{Agent: "alice", KeyID: "ed25519:00"}), "agent: %s", m.method)
		assert.NoError(t, a.authorize(m.method, m.req, auth.Principal{Operator: "ops"}), "operator: %s", m.method)
		assert.Error(t, a.authorize(m.method, m.req, auth.Principal{}), "anonymous: %s", m.method)
	}
}
