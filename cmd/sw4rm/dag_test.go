package main

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/workflowdefpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
)

// fakeDefinitions answers GetDefinition from one definition, and records the versions asked.
type fakeDefinitions struct {
	workflowdefpb.UnimplementedDefinitionServiceServer
	def   *workflowpb.WorkflowDefinition
	asked []int32
}

func (f *fakeDefinitions) GetDefinition(_ context.Context, req *workflowdefpb.GetDefinitionRequest) (*workflowdefpb.GetDefinitionResponse, error) {
	f.asked = append(f.asked, req.GetVersion())
	if req.GetWorkflowId() != f.def.GetWorkflowId() {
		return nil, status.Error(codes.NotFound, "no_route: workflow has no definition")
	}
	return &workflowdefpb.GetDefinitionResponse{Definition: f.def, Version: 2, LatestVersion: 2}, nil
}

func TestDAGShow(t *testing.T) {
	f := &fakeDefinitions{def: &workflowpb.WorkflowDefinition{WorkflowId: "pipe", Nodes: map[string]*workflowpb.WorkflowNode{
		"build":   {NodeId: "build", AgentId: "builder"},
		"test":    {NodeId: "test", AgentId: "tester", Dependencies: []string{"build"}},
		"package": {NodeId: "package", AgentId: "packer", Dependencies: []string{"test"}},
	}}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := grpc.NewServer()
	workflowdefpb.RegisterDefinitionServiceServer(g, f)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	addr := lis.Addr().String()

	out, _, err := runOut(t, "dag", "show", "pipe", "--server", addr)
	require.NoError(t, err)
	assert.Contains(t, out, "flowchart")
	for _, n := range []string{"build", "test", "package", "builder"} {
		assert.Contains(t, out, n)
	}

	out, _, err = runOut(t, "dag", "show", "pipe", "--version", "1", "--format", "dot", "--server", addr)
	require.NoError(t, err)
	assert.Contains(t, out, "digraph")
	assert.Contains(t, out, "->")
	assert.Contains(t, out, "package")
	assert.Equal(t, []int32{0, 1}, f.asked, "latest by default, then the version asked")

	// The Temporal UI's id of the run, dag/<workflow_id>, names the same workflow.
	out, _, err = runOut(t, "dag", "show", "dag/pipe", "--server", addr)
	require.NoError(t, err)
	assert.Contains(t, out, "flowchart")
	assert.Contains(t, out, "builder")

	_, _, err = runOut(t, "dag", "show", "nothing", "--server", addr)
	assert.Equal(t, codes.NotFound, status.Code(err))
	_, _, err = runOut(t, "dag", "show", "pipe", "--format", "png", "--server", addr)
	require.ErrorContains(t, err, "want mermaid or dot")
	_, _, err = runOut(t, "dag", "show", "pipe", "--version", "-1", "--server", addr)
	require.ErrorContains(t, err, "--version")
	assert.Len(t, f.asked, 4, "bad flags send nothing")
}
