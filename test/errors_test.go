package test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// TestRefusalsCarryTheErrorCode: every refused call, whatever service and whatever refused
// it, answers a gRPC status whose message starts with the spec's error_code and whose
// sw4rm-error-code trailer carries the code's name — what a client written from the
// canonical .proto files alone branches on (frontend/errors.go).
func TestRefusalsCarryTheErrorCode(t *testing.T) {
	sys := start(t, newConfig(t, "memory"))
	conn, err := grpc.NewClient(sys.app.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ctx := context.Background()
	reg := registrypb.NewRegistryServiceClient(conn)
	for name, tc := range map[string]struct {
		call    func(opts ...grpc.CallOption) error
		code    codes.Code
		trailer string
		prefix  string
	}{
		"bad agent_id": {func(o ...grpc.CallOption) error {
			_, err := reg.Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: " bad id"}, o...)
			return err
		}, codes.InvalidArgument, "VALIDATION_ERROR", "validation_error: "},
		"unknown agent": {func(o ...grpc.CallOption) error {
			_, err := reg.Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: uniq(t, "nobody")}, o...)
			return err
		}, codes.NotFound, "NO_ROUTE", ""},
		"bad seq": {func(o ...grpc.CallOption) error {
			_, err := routerpb.NewRouterServiceClient(conn).AckDelivery(ctx, &routerpb.DeliveryAckRequest{AgentId: "a", Seq: -1}, o...)
			return err
		}, codes.InvalidArgument, "VALIDATION_ERROR", "validation_error: seq"},
		"tool call without provider": {func(o ...grpc.CallOption) error {
			_, err := toolpb.NewToolServiceClient(conn).Call(ctx, &toolpb.ToolCall{}, o...)
			return err
		}, codes.InvalidArgument, "VALIDATION_ERROR", "VALIDATION_ERROR: provider_id is required"},
		"unknown workflow": {func(o ...grpc.CallOption) error {
			_, err := workflowpb.NewWorkflowServiceClient(conn).StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: "no-such-workflow"}, o...)
			return err
		}, codes.NotFound, "NO_ROUTE", "no_route: "},
		"workflow cycle": {func(o ...grpc.CallOption) error {
			def := &workflowpb.WorkflowDefinition{WorkflowId: uniq(t, "wf"), Nodes: map[string]*workflowpb.WorkflowNode{
				"r": {NodeId: "r", AgentId: "a"}, "x": {NodeId: "x", AgentId: "a", Dependencies: []string{"r", "y"}},
				"y": {NodeId: "y", AgentId: "a", Dependencies: []string{"x"}}}}
			_, err := workflowpb.NewWorkflowServiceClient(conn).CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: def}, o...)
			return err
		}, codes.InvalidArgument, "VALIDATION_ERROR", "workflow_cycle_detected: "},
	} {
		t.Run(name, func(t *testing.T) {
			var trailer metadata.MD
			err := tc.call(grpc.Trailer(&trailer))
			require.Error(t, err)
			st := status.Convert(err)
			require.Equal(t, tc.code, st.Code(), "%v", err)
			require.Contains(t, st.Message(), tc.prefix)
			require.Equal(t, []string{tc.trailer}, trailer.Get(wire.ErrorCodeTrailer), "%v", err)
		})
	}
}
