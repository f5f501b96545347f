package test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/activitypb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitlpb"
	"github.com/sw4rm/sw4rm-temporal/proto/loggingpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

func dialRaw(t *testing.T, sys *system) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(sys.app.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestServiceSurface checks the one-port surface a third-party SDK meets: reflection lists
// all 15 services, health answers,
// and the small services that are built behave.
func TestServiceSurface(t *testing.T) {
	sys := start(t, newConfig(t, "memory"))
	conn := dialRaw(t, sys)
	ctx := context.Background()

	rc, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	require.NoError(t, err)
	require.NoError(t, rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}))
	resp, err := rc.Recv()
	require.NoError(t, err)
	var sw4rm []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		if len(s.GetName()) > 6 && s.GetName()[:6] == "sw4rm." {
			sw4rm = append(sw4rm, s.GetName())
		}
	}
	assert.Len(t, sw4rm, 15, "%v", sw4rm)
	// the HITL operators' extension is served beside them, in its own package (§5.1)

	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, h.GetStatus())

	// The activity buffer (§10) is served.
	ab := sys.app.Store().ActivityBuffer()
	worker := uniq(t, "worker")
	_, err = ab.Put(ctx, store.ActivityEntry{AgentID: worker, TaskID: "t1", RepoID: "r1", WorktreeID: "wt1", Branch: "main", Description: "fix header"}, store.ActivityLimits{})
	require.NoError(t, err)
	sc := schedulerpb.NewSchedulerServiceClient(conn)
	poll, err := sc.PollActivityBuffer(ctx, &schedulerpb.PollActivityBufferRequest{AgentId: worker})
	require.NoError(t, err)
	require.Len(t, poll.GetEntries(), 1)
	assert.Equal(t, "t1", poll.GetEntries()[0].GetTaskId())
	assert.Equal(t, "wt1", poll.GetEntries()[0].GetWorktreeId())
	purged, err := sc.PurgeActivity(ctx, &schedulerpb.PurgeActivityRequest{AgentId: worker, TaskIds: []string{"t1", "unknown"}})
	require.NoError(t, err)
	assert.Equal(t, uint32(1), purged.GetPurged())
	_, err = schedulerpb.NewSchedulerServiceClient(conn).SubmitTask(ctx, &schedulerpb.SubmitTaskRequest{AgentId: worker, TaskId: "t2"})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "task scheduling is built: a task without scope is bad input")
	assert.Contains(t, status.Convert(err).Message(), "scope is required")
	_, err = hitlpb.NewHitlServiceClient(conn).Decide(ctx, &hitlpb.HitlInvocation{})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "HITL is built: a missing reason_type is bad input")
	assert.Contains(t, status.Convert(err).Message(), "reason_type")
	_, err = handoffpb.NewHandoffServiceClient(conn).RequestHandoff(ctx, &handoffpb.HandoffRequest{})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "handoff is built: a request without request_id is bad input")
	assert.Contains(t, status.Convert(err).Message(), "validation_error: request_id is required")
	_, err = negotiationpb.NewNegotiationServiceClient(conn).Open(ctx, &negotiationpb.NegotiationOpen{})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "negotiation is built: an Open without negotiation_id is bad input")
	assert.Contains(t, status.Convert(err).Message(), "validation_error: negotiation_id is required")
	cs, err := toolpb.NewToolServiceClient(conn).CallStream(ctx, &toolpb.ToolCall{})
	require.NoError(t, err)
	_, err = cs.Recv()
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "tool calls are built: a call without provider_id is bad input")
	assert.Contains(t, status.Convert(err).Message(), "VALIDATION_ERROR: provider_id is required")
	// WorkflowService is built: no definition is bad input, an unknown workflow no route.
	wf := workflowpb.NewWorkflowServiceClient(conn)
	_, err = wf.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "no definition is bad input")
	_, err = wf.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: "wf"})
	assert.Equal(t, codes.NotFound, status.Code(err), "no stored definition: %v", err)
	assert.Contains(t, status.Convert(err).Message(), "no_route: ")

	// Registry: a bad descriptor is refused with the reason, nothing is stored.
	reg := registrypb.NewRegistryServiceClient(conn)
	rr, err := reg.RegisterAgent(ctx, &registrypb.RegisterAgentRequest{Agent: &registrypb.AgentDescriptor{AgentId: "x y", Name: "n"}})
	require.NoError(t, err)
	assert.False(t, rr.GetAccepted())
	assert.Contains(t, rr.GetReason(), "validation_error: agent_id")
	rr, err = reg.RegisterAgent(ctx, &registrypb.RegisterAgentRequest{})
	require.NoError(t, err)
	assert.False(t, rr.GetAccepted())
	_, err = reg.Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: "nobody-" + uniq(t, "x")})
	assert.Equal(t, codes.NotFound, status.Code(err))
	_, err = reg.DeregisterAgent(ctx, &registrypb.DeregisterAgentRequest{AgentId: "nobody-" + uniq(t, "x")})
	assert.Equal(t, codes.NotFound, status.Code(err))

	// Router: a stream for an unregistered agent, and bad AckDelivery input.
	router := routerpb.NewRouterServiceClient(conn)
	st, err := router.StreamIncoming(ctx, &routerpb.StreamRequest{AgentId: "nobody-" + uniq(t, "x")})
	require.NoError(t, err)
	_, err = st.Recv()
	assert.Equal(t, codes.NotFound, status.Code(err))
	_, err = router.AckDelivery(ctx, &routerpb.DeliveryAckRequest{AgentId: "a", Seq: 0})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	ack, err := router.AckDelivery(ctx, &routerpb.DeliveryAckRequest{AgentId: "a", Seq: 999999})
	require.NoError(t, err)
	assert.False(t, ack.GetRecorded(), "unknown seq")

	// Logging: events join the audit log; malformed details are refused.
	lg := loggingpb.NewLoggingServiceClient(conn)
	corr := uniq(t, "corr")
	_, err = lg.Ingest(ctx, &loggingpb.LogEvent{CorrelationId: corr, AgentId: "coder", EventType: "tool_called", Level: "info", DetailsJson: `{"tool":"git"}`})
	require.NoError(t, err)
	var evs []store.Event
	require.Eventually(t, func() bool { // audit rows are written asynchronously
		evs, err = sys.app.Store().Audit().List(ctx, store.AuditFilter{CorrelationID: corr})
		return err == nil && len(evs) == 1
	}, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, "agent.tool_called", evs[0].Type)
	assert.JSONEq(t, `{"tool":"git","level":"info"}`, string(evs[0].Details))
	_, err = lg.Ingest(ctx, &loggingpb.LogEvent{EventType: "x", DetailsJson: `[1,2]`})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	_, err = lg.Ingest(ctx, &loggingpb.LogEvent{})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))

	// Artifacts: append, duplicate version, missing fields, list by kind.
	act := activitypb.NewActivityServiceClient(conn)
	art := &activitypb.Artifact{NegotiationId: corr, Kind: "proposal", Version: "1", ContentType: "text/plain", Content: []byte("v1")}
	ar, err := act.AppendArtifact(ctx, &activitypb.AppendArtifactRequest{Artifact: art})
	require.NoError(t, err)
	require.True(t, ar.GetOk(), ar.GetReason())
	ar, err = act.AppendArtifact(ctx, &activitypb.AppendArtifactRequest{Artifact: art})
	require.NoError(t, err)
	assert.False(t, ar.GetOk())
	assert.Contains(t, ar.GetReason(), "already exists")
	ar, err = act.AppendArtifact(ctx, &activitypb.AppendArtifactRequest{Artifact: &activitypb.Artifact{NegotiationId: corr, Kind: "proposal"}})
	require.NoError(t, err)
	assert.False(t, ar.GetOk())
	assert.Contains(t, ar.GetReason(), "version is required")
	_, err = act.AppendArtifact(ctx, &activitypb.AppendArtifactRequest{Artifact: &activitypb.Artifact{NegotiationId: corr, Kind: "decision", Version: "1"}})
	require.NoError(t, err)
	ls, err := act.ListArtifacts(ctx, &activitypb.ListArtifactsRequest{NegotiationId: corr, Kind: "proposal"})
	require.NoError(t, err)
	require.Len(t, ls.GetItems(), 1)
	assert.Equal(t, []byte("v1"), ls.GetItems()[0].GetContent())
	all, err := act.ListArtifacts(ctx, &activitypb.ListArtifactsRequest{NegotiationId: corr})
	require.NoError(t, err)
	assert.Len(t, all.GetItems(), 2)
	_, err = act.ListArtifacts(ctx, &activitypb.ListArtifactsRequest{})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
}
