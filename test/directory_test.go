package test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// refusedWith asserts that err is code with the error_code as its message's prefix and in
// the sw4rm-error-code trailer.
func refusedWith(t *testing.T, err error, tr metadata.MD, code codes.Code, errorCode commonpb.ErrorCode) {
	t.Helper()
	require.Equal(t, code, status.Code(err), "%v", err)
	assert.Regexp(t, "^"+protocol.CodeName(errorCode)+": ", status.Convert(err).Message())
	assert.Equal(t, []string{errorCode.String()}, tr.Get(wire.ErrorCodeTrailer))
}

// TestDirectoryService covers the extension sw4rmext.directory.v1.DirectoryService over gRPC
// on both stores, in required authentication mode: an agent's lifecycle state, health map
// and heartbeat after it registers and heartbeats, read by another agent; a handoff read by
// its originator and target (with the context snapshot) and by an operator (without it),
// refused to an outsider with permission_denied; the providers listed after RegisterProvider;
// unknown ids answered NOT_FOUND with no_route, and anonymous callers refused.
func TestDirectoryService(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, authConfig(t, kind, auth.Required))
			ctx := context.Background()
			a, b, mallory := dialSigned(t, sys, "a"), dialSigned(t, sys, "b"), dialSigned(t, sys, "mallory")
			da, db, dm := directorypb.NewDirectoryServiceClient(a.Conn()), directorypb.NewDirectoryServiceClient(b.Conn()), directorypb.NewDirectoryServiceClient(mallory.Conn())
			ops := directorypb.NewDirectoryServiceClient(dialRaw(t, sys))

			t.Run("agent state", func(t *testing.T) {
				before := time.Now()
				require.NoError(t, a.Heartbeat(ctx, commonpb.AgentState_AGENT_STATE_UNSPECIFIED, map[string]string{"queue": "3"}))
				var got *directorypb.AgentEntry
				require.Eventually(t, func() bool { // the lifecycle workflow records RUNNABLE
					var err error
					got, err = db.GetAgent(ctx, &directorypb.GetAgentRequest{AgentId: a.ID()})
					return err == nil && got.GetState() == commonpb.AgentState_RUNNABLE.String()
				}, 15*time.Second, 50*time.Millisecond, "agent %s never read RUNNABLE: %v", a.ID(), got)
				assert.Equal(t, a.ID(), got.GetAgent().GetAgentId())
				assert.Equal(t, []string{"test"}, got.GetAgent().GetCapabilities())
				assert.Equal(t, map[string]string{"queue": "3"}, got.GetHealth())
				assert.False(t, got.GetLastHeartbeat().AsTime().Before(before.Add(-time.Second)), "%v", got.GetLastHeartbeat().AsTime())
				assert.NotNil(t, got.GetRegisteredAt())

				list, err := ops.ListAgents(operatorContext(), &directorypb.ListAgentsRequest{State: "RUNNABLE"})
				require.NoError(t, err)
				var ids []string
				for _, e := range list.GetAgents() {
					ids = append(ids, e.GetAgent().GetAgentId())
				}
				assert.Contains(t, ids, a.ID())

				var tr metadata.MD
				_, err = db.GetAgent(ctx, &directorypb.GetAgentRequest{AgentId: uniq(t, "nobody")}, grpc.Trailer(&tr))
				refusedWith(t, err, tr, codes.NotFound, commonpb.ErrorCode_NO_ROUTE)
				_, err = db.GetAgent(ctx, &directorypb.GetAgentRequest{AgentId: "not an id"}, grpc.Trailer(&tr))
				refusedWith(t, err, tr, codes.InvalidArgument, commonpb.ErrorCode_VALIDATION_ERROR)
				_, err = directorypb.NewDirectoryServiceClient(dialRaw(t, sys)).GetAgent(ctx, &directorypb.GetAgentRequest{AgentId: a.ID()})
				assert.Equal(t, codes.Unauthenticated, status.Code(err), "anonymous in required mode: %v", err)
			})

			t.Run("handoff", func(t *testing.T) {
				req := handoffReq(t, a.ID(), b.ID())
				_, err := handoffpb.NewHandoffServiceClient(a.Conn()).RequestHandoff(ctx, req)
				require.NoError(t, err)
				waitOffered(t, sys, req.GetRequestId())
				read := func(c directorypb.DirectoryServiceClient, ctx context.Context) *directorypb.HandoffEntry {
					t.Helper()
					got, err := c.GetHandoff(ctx, &directorypb.GetHandoffRequest{RequestId: req.GetRequestId()})
					require.NoError(t, err)
					return got
				}
				got := read(da, ctx)
				assert.Equal(t, "PENDING", got.GetState())
				assert.Equal(t, a.ID(), got.GetFromAgent())
				assert.Equal(t, b.ID(), got.GetToAgent())
				assert.Equal(t, b.ID(), got.GetOfferedTo())
				assert.Equal(t, req.GetReason(), got.GetReason())
				assert.Equal(t, req.GetContextSnapshot(), got.GetContextSnapshot(), "the originator reads the snapshot")

				_, err = handoffpb.NewHandoffServiceClient(b.Conn()).AcceptHandoff(ctx, &handoffpb.HandoffResponse{RequestId: req.GetRequestId(), Accepted: true, AcceptingAgent: b.ID()})
				require.NoError(t, err)
				require.Eventually(t, func() bool { // the workflow writes the projection
					got = read(db, ctx)
					return got.GetState() == "ACCEPTED"
				}, 15*time.Second, 50*time.Millisecond)
				assert.Equal(t, b.ID(), got.GetAcceptedBy())
				assert.Equal(t, req.GetContextSnapshot(), got.GetContextSnapshot(), "the accepting agent reads the snapshot")

				got = read(ops, operatorContext())
				assert.Equal(t, "ACCEPTED", got.GetState())
				assert.Empty(t, got.GetContextSnapshot(), "an operator reads the handoff, not its context")

				var tr metadata.MD
				_, err = dm.GetHandoff(ctx, &directorypb.GetHandoffRequest{RequestId: req.GetRequestId()}, grpc.Trailer(&tr))
				refusedWith(t, err, tr, codes.PermissionDenied, commonpb.ErrorCode_PERMISSION_DENIED)
				_, err = dm.GetHandoff(ctx, &directorypb.GetHandoffRequest{RequestId: uniq(t, "h")}, grpc.Trailer(&tr))
				refusedWith(t, err, tr, codes.NotFound, commonpb.ErrorCode_NO_ROUTE)
			})

			t.Run("tool providers", func(t *testing.T) {
				search := &connectorpb.ToolDescriptor{ToolName: "search", InputSchema: `{"type":"object"}`, SideEffects: "read"}
				resp, err := connectorpb.NewConnectorServiceClient(a.Conn()).RegisterProvider(ctx, &connectorpb.ProviderRegisterRequest{
					ProviderId: a.ID(), Tools: []*connectorpb.ToolDescriptor{search}})
				require.NoError(t, err)
				require.True(t, resp.GetOk(), resp.GetReason())

				list, err := dm.ListToolProviders(ctx, &directorypb.ListToolProvidersRequest{Kind: "connector"})
				require.NoError(t, err)
				require.Len(t, list.GetProviders(), 1, "%v", list.GetProviders())
				p := list.GetProviders()[0]
				assert.Equal(t, a.ID(), p.GetProviderId())
				assert.Equal(t, "connector", p.GetKind())
				require.Len(t, p.GetTools(), 1)
				assert.Equal(t, "search", p.GetTools()[0].GetToolName())

				all, err := dm.ListToolProviders(ctx, &directorypb.ListToolProvidersRequest{})
				require.NoError(t, err)
				kinds := map[string]string{}
				for _, p := range all.GetProviders() {
					kinds[p.GetProviderId()] = p.GetKind()
				}
				assert.Equal(t, "connector", kinds[a.ID()])
				assert.Contains(t, kinds, "builtin", "the built-in provider registers at start: %v", kinds)

				var tr metadata.MD
				_, err = dm.ListToolProviders(ctx, &directorypb.ListToolProvidersRequest{Kind: "agent"}, grpc.Trailer(&tr))
				refusedWith(t, err, tr, codes.InvalidArgument, commonpb.ErrorCode_VALIDATION_ERROR)
			})
		})
	}
}

// TestDirectoryListings covers the listings of DirectoryService over gRPC on both stores,
// in required authentication mode: tasks (the activity buffer) and tool calls as the store
// holds them, DAG runs as Temporal's visibility lists them. An operator lists everyone's
// work; an agent only its own — an empty filter means its own, naming another agent's is
// permission_denied — and of DAG runs those of the workflows it defined. A bad filter is
// validation_error, with the error_code in the trailer.
func TestDirectoryListings(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, authConfig(t, kind, auth.Required))
			ctx := context.Background()
			a, b := dialSigned(t, sys, "a"), dialSigned(t, sys, "b")
			da := directorypb.NewDirectoryServiceClient(a.Conn())
			ops := directorypb.NewDirectoryServiceClient(dialRaw(t, sys))
			st := sys.app.Store()

			t.Run("tasks", func(t *testing.T) {
				// The scheduler writes these entries as tasks run; seeding them keeps the
				// test on what the listing reads and who may read it.
				for _, e := range []store.ActivityEntry{{AgentID: a.ID(), TaskID: uniq(t, "ta")}, {AgentID: b.ID(), TaskID: uniq(t, "tb")}} {
					_, err := st.ActivityBuffer().Put(ctx, e, store.ActivityLimits{})
					require.NoError(t, err)
				}
				agentsOf := func(resp *directorypb.ListTasksResponse) map[string]int {
					out := map[string]int{}
					for _, e := range resp.GetTasks() {
						out[e.GetAgentId()]++
					}
					return out
				}
				all, err := ops.ListTasks(operatorContext(), &directorypb.ListTasksRequest{State: "active"})
				require.NoError(t, err)
				assert.Equal(t, map[string]int{a.ID(): 1, b.ID(): 1}, agentsOf(all), "an operator sees every agent's")
				own, err := da.ListTasks(ctx, &directorypb.ListTasksRequest{})
				require.NoError(t, err)
				assert.Equal(t, map[string]int{a.ID(): 1}, agentsOf(own), "an agent its own")

				var tr metadata.MD
				_, err = da.ListTasks(ctx, &directorypb.ListTasksRequest{AgentId: b.ID()}, grpc.Trailer(&tr))
				refusedWith(t, err, tr, codes.PermissionDenied, commonpb.ErrorCode_PERMISSION_DENIED)
				_, err = ops.ListTasks(operatorContext(), &directorypb.ListTasksRequest{State: "done"}, grpc.Trailer(&tr))
				refusedWith(t, err, tr, codes.InvalidArgument, commonpb.ErrorCode_VALIDATION_ERROR)
			})

			t.Run("tool calls", func(t *testing.T) {
				for _, r := range []store.ToolCallRecord{
					{CallID: uniq(t, "ca"), Caller: "agent:" + a.ID(), ProviderID: "builtin", ToolName: "echo"},
					{CallID: uniq(t, "cb"), Caller: "agent:" + b.ID(), ProviderID: "builtin", ToolName: "echo"},
				} {
					_, _, err := st.ToolCalls().CreateCall(ctx, r)
					require.NoError(t, err)
				}
				callers := func(resp *directorypb.ListToolCallsResponse) []string {
					var out []string
					for _, c := range resp.GetCalls() {
						out = append(out, c.GetCaller()+"="+c.GetState())
					}
					return out
				}
				all, err := ops.ListToolCalls(operatorContext(), &directorypb.ListToolCallsRequest{ToolName: "echo"})
				require.NoError(t, err)
				assert.ElementsMatch(t, []string{"agent:" + a.ID() + "=running", "agent:" + b.ID() + "=running"}, callers(all))
				own, err := da.ListToolCalls(ctx, &directorypb.ListToolCallsRequest{})
				require.NoError(t, err)
				assert.Equal(t, []string{"agent:" + a.ID() + "=running"}, callers(own))

				var tr metadata.MD
				_, err = da.ListToolCalls(ctx, &directorypb.ListToolCallsRequest{Caller: "agent:" + b.ID()}, grpc.Trailer(&tr))
				refusedWith(t, err, tr, codes.PermissionDenied, commonpb.ErrorCode_PERMISSION_DENIED)
				_, err = ops.ListToolCalls(operatorContext(), &directorypb.ListToolCallsRequest{Caller: b.ID()}, grpc.Trailer(&tr))
				refusedWith(t, err, tr, codes.InvalidArgument, commonpb.ErrorCode_VALIDATION_ERROR)
			})

			t.Run("dag runs", func(t *testing.T) {
				prefix := uniq(t, "run")
				// One run defined by a, one by b: each waits on its MANUAL node, so both stay
				// RUNNING until the test terminates them.
				runOf := func(c *signedAgent, id string) {
					t.Helper()
					wc := workflowpb.NewWorkflowServiceClient(c.Conn())
					_, err := wc.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: &workflowpb.WorkflowDefinition{WorkflowId: id,
						Nodes: map[string]*workflowpb.WorkflowNode{"gate": {NodeId: "gate", AgentId: c.ID(), TriggerType: workflowpb.TriggerType_MANUAL}}}})
					require.NoError(t, err)
					_, err = wc.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: id})
					require.NoError(t, err)
					t.Cleanup(func() {
						_ = sys.app.Temporal().TerminateWorkflow(context.Background(), workflows.DAGWorkflowID(id), "", "test over")
					})
				}
				idA, idB := prefix+"-a", prefix+"-b"
				runOf(a, idA)
				runOf(b, idB)
				ids := func(resp *directorypb.ListDAGRunsResponse) []string {
					var out []string
					for _, r := range resp.GetRuns() {
						out = append(out, r.GetWorkflowId())
					}
					return out
				}
				var all *directorypb.ListDAGRunsResponse
				require.Eventually(t, func() bool { // visibility lists a new run a moment late
					var err error
					all, err = ops.ListDAGRuns(operatorContext(), &directorypb.ListDAGRunsRequest{WorkflowIdPrefix: prefix, State: "RUNNING"})
					return err == nil && len(all.GetRuns()) == 2
				}, 15*time.Second, 100*time.Millisecond, "the operator never listed both runs: %v", all)
				assert.ElementsMatch(t, []string{idA, idB}, ids(all))
				for _, r := range all.GetRuns() {
					assert.Equal(t, "RUNNING", r.GetState())
					assert.Equal(t, "Running", r.GetExecutionStatus())
					assert.NotEmpty(t, r.GetRunId())
					assert.NotNil(t, r.GetStartedAt())
					assert.Nil(t, r.GetClosedAt())
				}
				own, err := da.ListDAGRuns(ctx, &directorypb.ListDAGRunsRequest{WorkflowIdPrefix: prefix})
				require.NoError(t, err)
				assert.Equal(t, []string{idA}, ids(own), "an agent lists the runs of the workflows it defined")
				one, err := ops.ListDAGRuns(operatorContext(), &directorypb.ListDAGRunsRequest{WorkflowIdPrefix: idB})
				require.NoError(t, err)
				assert.Equal(t, []string{idB}, ids(one))
				none, err := ops.ListDAGRuns(operatorContext(), &directorypb.ListDAGRunsRequest{WorkflowIdPrefix: prefix, State: "COMPLETED"})
				require.NoError(t, err)
				assert.Empty(t, none.GetRuns())

				var tr metadata.MD
				_, err = ops.ListDAGRuns(operatorContext(), &directorypb.ListDAGRunsRequest{WorkflowIdPrefix: "x' OR WorkflowId != '"}, grpc.Trailer(&tr))
				refusedWith(t, err, tr, codes.InvalidArgument, commonpb.ErrorCode_VALIDATION_ERROR)
				_, err = directorypb.NewDirectoryServiceClient(dialRaw(t, sys)).ListDAGRuns(ctx, &directorypb.ListDAGRunsRequest{})
				assert.Equal(t, codes.Unauthenticated, status.Code(err), "anonymous in required mode: %v", err)
			})
		})
	}
}
