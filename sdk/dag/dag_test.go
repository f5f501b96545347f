package dag

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	pdag "github.com/sw4rm/sw4rm-temporal/protocol/dag"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

func TestBuilderProducesTheDefinition(t *testing.T) {
	def, err := New("release").Meta("owner", "ci").LateBinding().
		Node("build", "builder").Output("artifact", "/build/artifact").Meta("priority", "5").
		Node("test", "tester").After("build").Input("artifact", "/build/artifact").
		Node("deploy", "deployer").After("test").Trigger(workflowpb.TriggerType_MANUAL).SkipIf("/dry_run").
		Node("notify", "notifier").After("deploy").RunAfterSkipped().
		Build()
	require.NoError(t, err)
	want := &workflowpb.WorkflowDefinition{
		WorkflowId: "release",
		Metadata:   map[string]string{"owner": "ci", pdag.MetaLateBinding: "true"},
		Nodes: map[string]*workflowpb.WorkflowNode{
			"build": {NodeId: "build", AgentId: "builder", TriggerType: workflowpb.TriggerType_DEPENDENCY,
				OutputMapping: map[string]string{"artifact": "/build/artifact"}, Metadata: map[string]string{"priority": "5"}},
			"test": {NodeId: "test", AgentId: "tester", TriggerType: workflowpb.TriggerType_DEPENDENCY, Dependencies: []string{"build"},
				InputMapping: map[string]string{"artifact": "/build/artifact"}},
			"deploy": {NodeId: "deploy", AgentId: "deployer", TriggerType: workflowpb.TriggerType_MANUAL, Dependencies: []string{"test"},
				Metadata: map[string]string{pdag.MetaSkipIf: "/dry_run"}},
			"notify": {NodeId: "notify", AgentId: "notifier", TriggerType: workflowpb.TriggerType_DEPENDENCY, Dependencies: []string{"deploy"},
				Metadata: map[string]string{pdag.MetaAfterSkipped: pdag.AfterSkippedRun}},
		},
	}
	require.True(t, proto.Equal(want, def), "got %v", def)
}

func TestBuilderReportsMisuse(t *testing.T) {
	_, err := New("wf").Node("a", "x").Node("a", "y").Build()
	require.ErrorContains(t, err, `node "a" is defined twice`)
	_, err = New("wf").Node("", "x").Build()
	require.ErrorContains(t, err, "needs an id")
	// The first misuse is the one reported.
	_, err = New("wf").Node("", "x").Node("b", "y").Node("b", "y").Build()
	require.ErrorContains(t, err, "needs an id")
}

func TestBuildValidates(t *testing.T) {
	_, err := New("wf").Node("r", "x").Node("a", "x").After("r", "b").Node("b", "x").After("a").Build()
	var cyc *pdag.CycleError
	require.True(t, errors.As(err, &cyc), "%v", err)
	assert.Contains(t, err.Error(), "workflow_cycle_detected")
	_, err = New("wf").Node("a", "x").After("ghost").Build()
	require.Error(t, err)
}

// fakeWorkflows answers CreateWorkflow with headers, as the server does.
type fakeWorkflows struct {
	workflowpb.UnimplementedWorkflowServiceServer
	got *workflowpb.CreateWorkflowRequest
}

func (f *fakeWorkflows) CreateWorkflow(ctx context.Context, req *workflowpb.CreateWorkflowRequest) (*workflowpb.CreateWorkflowResponse, error) {
	f.got = req
	if req.GetDefinition().GetWorkflowId() == "bad" {
		return nil, status.Error(codes.InvalidArgument, "validation_error: no")
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(wire.WorkflowVersionHeader, "3", wire.WorkflowWarningsHeader, "w1", wire.WorkflowWarningsHeader, "w2"))
	return &workflowpb.CreateWorkflowResponse{WorkflowId: req.GetDefinition().GetWorkflowId(), Success: true}, nil
}

func TestCreate(t *testing.T) {
	f := &fakeWorkflows{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := grpc.NewServer()
	workflowpb.RegisterWorkflowServiceServer(g, f)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })

	def, err := New("wf").Node("a", "x").Build()
	require.NoError(t, err)
	c, err := Create(t.Context(), conn, def)
	require.NoError(t, err)
	assert.Equal(t, Created{WorkflowID: "wf", Version: 3, Warnings: []string{"w1", "w2"}}, c)
	assert.True(t, proto.Equal(def, f.got.GetDefinition()))

	_, err = Create(t.Context(), conn, &workflowpb.WorkflowDefinition{WorkflowId: "bad"})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
}

// The run statuses the SDK names are the ones the run reports.
func TestRunStatusNamesTheServersStatuses(t *testing.T) {
	assert.Equal(t, workflows.DAGRunning, RunRunning)
	assert.Equal(t, workflows.DAGWaiting, RunWaiting)
	assert.Equal(t, workflows.DAGCompleted, RunCompleted)
	assert.Equal(t, RunWaiting, RunStatus(&workflowpb.WorkflowState{Metadata: map[string]string{wire.RunStatusKey: RunWaiting}}))
	assert.Empty(t, RunStatus(nil))
}
