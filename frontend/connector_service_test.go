package frontend

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

var _ connectorpb.ConnectorServiceServer = (*connectorService)(nil)

func newConnectorService(t *testing.T) (*connectorService, store.Store) {
	t.Helper()
	st := memory.New()
	t.Cleanup(st.Close)
	log := slog.New(slog.DiscardHandler)
	return &connectorService{s: &Server{store: st, sink: audit.New(log, st.Audit()), log: log}}, st
}

func agentContext(t *testing.T, id string) context.Context {
	return auth.WithPrincipal(t.Context(), auth.Principal{Agent: id})
}

func toolDesc(name string) *connectorpb.ToolDescriptor {
	return &connectorpb.ToolDescriptor{
		ToolName:    name,
		InputSchema: `{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`,
		Idempotent:  true, SideEffects: "read", DefaultTimeoutS: 10,
	}
}

// statusOf is the gRPC status the frontend's error table gives a handler's error.
func statusOf(t *testing.T, err error) (codes.Code, string) {
	t.Helper()
	require.Error(t, err)
	st := toStatus(t.Context(), err)
	return st.Code(), st.Message()
}

func TestRegisterProviderAndDescribeTools(t *testing.T) {
	cs, st := newConnectorService(t)
	ctx := agentContext(t, "searcher")
	resp, err := cs.RegisterProvider(ctx, &connectorpb.ProviderRegisterRequest{
		ProviderId: "searcher", Tools: []*connectorpb.ToolDescriptor{toolDesc("web_search"), toolDesc("fetch")}})
	require.NoError(t, err)
	require.True(t, resp.GetOk(), resp.GetReason())

	got, err := cs.DescribeTools(ctx, &connectorpb.DescribeToolsRequest{ProviderId: "searcher"})
	require.NoError(t, err)
	require.Len(t, got.GetTools(), 2)
	assert.True(t, proto.Equal(toolDesc("fetch"), got.GetTools()[0]), "sorted by tool_name: %v", got.GetTools()[0])
	assert.True(t, proto.Equal(toolDesc("web_search"), got.GetTools()[1]), "%v", got.GetTools()[1])

	rec, err := st.ToolProviders().GetTool(t.Context(), "searcher", "fetch")
	require.NoError(t, err)
	assert.Equal(t, tool.ProviderKindConnector, rec.Kind)
	assert.Equal(t, "agent:searcher", rec.RegisteredBy)

	audits := auditOf(t, st, AuditToolProviderRegistered)
	require.Len(t, audits, 1)
	assert.Equal(t, "searcher", audits[0]["provider_id"])
	assert.Equal(t, []any{"web_search", "fetch"}, audits[0]["tools"])
	assert.Equal(t, "agent:searcher", audits[0]["actor"])

	// Registering again replaces the set.
	resp, err = cs.RegisterProvider(ctx, &connectorpb.ProviderRegisterRequest{
		ProviderId: "searcher", Tools: []*connectorpb.ToolDescriptor{toolDesc("lookup")}})
	require.NoError(t, err)
	require.True(t, resp.GetOk(), resp.GetReason())
	got, err = cs.DescribeTools(ctx, &connectorpb.DescribeToolsRequest{ProviderId: "searcher"})
	require.NoError(t, err)
	require.Len(t, got.GetTools(), 1)
	assert.Equal(t, "lookup", got.GetTools()[0].GetToolName())
}

func TestRegisterProviderRefusesBadDescriptorsWithEveryReason(t *testing.T) {
	cs, st := newConnectorService(t)
	ctx := opsContext(t)
	badSchema := toolDesc("broken")
	badSchema.InputSchema = `{"type": 12}`
	badSide := toolDesc("odd")
	badSide.SideEffects = "sometimes"
	resp, err := cs.RegisterProvider(ctx, &connectorpb.ProviderRegisterRequest{ProviderId: "svc", Tools: []*connectorpb.ToolDescriptor{
		toolDesc("good"), badSchema, {ToolName: "a/b", InputSchema: `{}`}, badSide, toolDesc("good"), nil,
	}})
	require.NoError(t, err, "a refusal by the rules is an answer, not an error")
	assert.False(t, resp.GetOk())
	r := resp.GetReason()
	assert.Regexp(t, `^validation_error: `, r)
	assert.Contains(t, r, `tools[1]: tool "broken": input_schema is not a usable JSON Schema`)
	assert.Contains(t, r, `tools[2]: tool_name "a/b" contains '/'`)
	assert.Contains(t, r, `tools[3]: tool "odd": side_effects "sometimes" is not one of`)
	assert.Contains(t, r, `tools[4]: tool_name "good" is given twice`)
	assert.Contains(t, r, `tools[5]: the tool descriptor is missing`)
	assert.NotContains(t, r, "tools[0]")
	assert.NotContains(t, r, "VALIDATION_ERROR: ", "the code is said once")

	recs, err := st.ToolProviders().ListTools(t.Context(), "")
	require.NoError(t, err)
	assert.Empty(t, recs, "nothing is stored")
	audits := auditOf(t, st, AuditToolProviderRefused)
	require.Len(t, audits, 1)
	assert.Equal(t, r, audits[0]["reason"])
	assert.Equal(t, "operator:ops", audits[0]["actor"])
	assert.Empty(t, auditOf(t, st, AuditToolProviderRegistered))
}

func TestConnectorMalformedRequests(t *testing.T) {
	cs, _ := newConnectorService(t)
	ctx := opsContext(t)
	for name, req := range map[string]*connectorpb.ProviderRegisterRequest{
		"no provider_id":  {Tools: []*connectorpb.ToolDescriptor{toolDesc("x")}},
		"bad provider_id": {ProviderId: "a b", Tools: []*connectorpb.ToolDescriptor{toolDesc("x")}},
		"no tools":        {ProviderId: "svc"},
		"too many tools":  {ProviderId: "svc", Tools: make([]*connectorpb.ToolDescriptor, tool.MaxToolsPerProvider+1)},
	} {
		_, err := cs.RegisterProvider(ctx, req)
		code, msg := statusOf(t, err)
		assert.Equal(t, codes.InvalidArgument, code, name)
		assert.Regexp(t, `^validation_error: `, msg, name)
	}

	_, err := cs.DescribeTools(ctx, &connectorpb.DescribeToolsRequest{})
	code, msg := statusOf(t, err)
	assert.Equal(t, codes.InvalidArgument, code)
	assert.Contains(t, msg, "validation_error: provider_id is required")

	_, err = cs.DescribeTools(ctx, &connectorpb.DescribeToolsRequest{ProviderId: "nobody"})
	code, msg = statusOf(t, err)
	assert.Equal(t, codes.NotFound, code)
	assert.Contains(t, msg, `no_route: no tool provider "nobody"`)
}

func TestRegisterProviderRefusesAConfiguredMCPProvider(t *testing.T) {
	cs, st := newConnectorService(t)
	require.NoError(t, st.ToolProviders().RegisterProvider(t.Context(), "fs", tool.ProviderKindMCP,
		[]*connectorpb.ToolDescriptor{toolDesc("read_file")}, "scheduler"))
	_, err := cs.RegisterProvider(opsContext(t), &connectorpb.ProviderRegisterRequest{
		ProviderId: "fs", Tools: []*connectorpb.ToolDescriptor{toolDesc("evil")}})
	code, msg := statusOf(t, err)
	assert.Equal(t, codes.PermissionDenied, code)
	assert.Contains(t, msg, "configured MCP server")
	got, err := cs.DescribeTools(opsContext(t), &connectorpb.DescribeToolsRequest{ProviderId: "fs"})
	require.NoError(t, err)
	require.Len(t, got.GetTools(), 1)
	assert.Equal(t, "read_file", got.GetTools()[0].GetToolName(), "the configured tools stand")
}

func TestConnectorAuthorization(t *testing.T) {
	a := &Authenticator{cfg: AuthConfig{Mode: auth.Required}}
	reg := connectorpb.ConnectorService_RegisterProvider_FullMethodName
	req := &connectorpb.ProviderRegisterRequest{ProviderId: "alice"}
	assert.NoError(t, a.authorize(reg, req, auth.Principal{Agent: "alice"}), "an agent registers its own tools")
	assert.NoError(t, a.authorize(reg, req, auth.Principal{Operator: "ops"}), "an operator registers any provider")
	err := a.authorize(reg, req, auth.Principal{Agent: "mallory"})
	require.Error(t, err, "an agent never registers another's tools")
	assert.Contains(t, err.Error(), `provider_id "alice" is not the caller "mallory"`)
	assert.Error(t, a.authorize(reg, req, auth.Principal{}), "anonymous callers are refused in required mode")

	desc := connectorpb.ConnectorService_DescribeTools_FullMethodName
	assert.NoError(t, a.authorize(desc, &connectorpb.DescribeToolsRequest{ProviderId: "alice"}, auth.Principal{Agent: "bob"}))
	assert.Error(t, a.authorize(desc, &connectorpb.DescribeToolsRequest{ProviderId: "alice"}, auth.Principal{}))
}
