package test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/frontend"
	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// TestConnectorService covers ConnectorService (§18.1) over gRPC on both stores, in required
// authentication mode: an agent registers itself as a provider with two descriptors, which
// another agent lists with DescribeTools and which are stored and audited; a bad descriptor
// is refused with ok=false and its reasons, storing nothing; a request without tools is
// InvalidArgument; an agent registering a provider for another id is refused with
// PermissionDenied, while an operator may register any provider.
func TestConnectorService(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, authConfig(t, kind, auth.Required))
			ctx := context.Background()
			provider := dialSigned(t, sys, "provider")
			reader := dialSigned(t, sys, "reader")
			pc := connectorpb.NewConnectorServiceClient(provider.Conn())
			rc := connectorpb.NewConnectorServiceClient(reader.Conn())
			st := sys.app.Store().ToolProviders()

			search := &connectorpb.ToolDescriptor{ToolName: "search",
				InputSchema:  `{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`,
				OutputSchema: `{"type":"object","properties":{"hits":{"type":"array"}}}`,
				Idempotent:   true, SideEffects: "read", DefaultTimeoutS: 20, MaxConcurrency: 8}
			write := &connectorpb.ToolDescriptor{ToolName: "write_note",
				InputSchema:   `{"type":"object","properties":{"text":{"type":"string"}}}`,
				NeedsWorktree: true, SideEffects: "write"}
			resp, err := pc.RegisterProvider(ctx, &connectorpb.ProviderRegisterRequest{
				ProviderId: provider.ID(), Tools: []*connectorpb.ToolDescriptor{write, search}})
			require.NoError(t, err)
			require.True(t, resp.GetOk(), resp.GetReason())

			got, err := rc.DescribeTools(ctx, &connectorpb.DescribeToolsRequest{ProviderId: provider.ID()})
			require.NoError(t, err)
			require.Len(t, got.GetTools(), 2)
			assert.True(t, proto.Equal(search, got.GetTools()[0]), "sorted by name: %v", got.GetTools()[0])
			assert.True(t, proto.Equal(write, got.GetTools()[1]), "%v", got.GetTools()[1])
			rec, err := st.GetTool(ctx, provider.ID(), "search")
			require.NoError(t, err)
			assert.Equal(t, "agent:"+provider.ID(), rec.RegisteredBy)

			// A bad descriptor: ok=false with the reasons, nothing changes.
			bad := &connectorpb.ToolDescriptor{ToolName: "bad/name", InputSchema: `{"type":"object"}`}
			noSchema := &connectorpb.ToolDescriptor{ToolName: "no_schema"}
			resp, err = pc.RegisterProvider(ctx, &connectorpb.ProviderRegisterRequest{
				ProviderId: provider.ID(), Tools: []*connectorpb.ToolDescriptor{search, bad, noSchema}})
			require.NoError(t, err)
			assert.False(t, resp.GetOk())
			assert.True(t, strings.HasPrefix(resp.GetReason(), "validation_error: "), resp.GetReason())
			assert.Contains(t, resp.GetReason(), `tools[1]: tool_name "bad/name"`)
			assert.Contains(t, resp.GetReason(), `tools[2]: tool "no_schema": input_schema is required`)
			recs, err := st.ListTools(ctx, provider.ID())
			require.NoError(t, err)
			assert.Len(t, recs, 2, "a refused registration changes nothing")

			// No tools is malformed.
			var trailer metadata.MD
			_, err = pc.RegisterProvider(ctx, &connectorpb.ProviderRegisterRequest{ProviderId: provider.ID()}, grpc.Trailer(&trailer))
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), "validation_error: tools is empty")
			assert.Equal(t, []string{"VALIDATION_ERROR"}, trailer.Get(wire.ErrorCodeTrailer))

			// An agent never registers a provider under another id.
			t.Run("agent refused for another id", func(t *testing.T) {
				var tr metadata.MD
				_, err := rc.RegisterProvider(ctx, &connectorpb.ProviderRegisterRequest{
					ProviderId: provider.ID(), Tools: []*connectorpb.ToolDescriptor{search}}, grpc.Trailer(&tr))
				refused(t, sys, err, tr, codes.PermissionDenied, connectorpb.ConnectorService_RegisterProvider_FullMethodName)
				recs, err := st.ListTools(ctx, provider.ID())
				require.NoError(t, err)
				require.Len(t, recs, 2)
				assert.Equal(t, "agent:"+provider.ID(), recs[0].RegisteredBy, "nothing changed")
				// Anonymous callers cannot even read in required mode.
				_, err = connectorpb.NewConnectorServiceClient(dialRaw(t, sys)).DescribeTools(ctx, &connectorpb.DescribeToolsRequest{ProviderId: provider.ID()})
				assert.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
			})

			// An operator registers a provider that is no agent.
			resp, err = connectorpb.NewConnectorServiceClient(dialRaw(t, sys)).RegisterProvider(operatorContext(), &connectorpb.ProviderRegisterRequest{
				ProviderId: "shared-search", Tools: []*connectorpb.ToolDescriptor{search}})
			require.NoError(t, err)
			require.True(t, resp.GetOk(), resp.GetReason())
			got, err = rc.DescribeTools(ctx, &connectorpb.DescribeToolsRequest{ProviderId: "shared-search"})
			require.NoError(t, err)
			require.Len(t, got.GetTools(), 1)

			// Unknown providers are no_route.
			_, err = rc.DescribeTools(ctx, &connectorpb.DescribeToolsRequest{ProviderId: uniq(t, "nobody")})
			assert.Equal(t, codes.NotFound, status.Code(err), "%v", err)

			// Both registrations and the refusal are audited.
			require.Eventually(t, func() bool { // audit rows are written asynchronously
				evs, err := sys.app.Store().Audit().List(ctx, store.AuditFilter{TypePrefix: "tool.provider_"})
				if err != nil {
					return false
				}
				n := map[string]int{}
				for _, e := range evs {
					n[e.Type+" "+e.Actor]++
				}
				return n[frontend.AuditToolProviderRegistered+" agent:"+provider.ID()] == 1 &&
					n[frontend.AuditToolProviderRegistered+" operator:"+authOperator] == 1 &&
					n[frontend.AuditToolProviderRefused+" agent:"+provider.ID()] == 1
			}, 10*time.Second, 50*time.Millisecond)
		})
	}
}
