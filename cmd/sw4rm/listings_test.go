package main

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
)

// fakeDirectory answers the listings with fixed rows, recording each request and the
// authorization it came with.
type fakeDirectory struct {
	directorypb.UnimplementedDirectoryServiceServer
	reqs   []proto.Message
	tokens []string
}

func (f *fakeDirectory) note(ctx context.Context, req proto.Message) {
	f.reqs = append(f.reqs, req)
	md, _ := metadata.FromIncomingContext(ctx)
	f.tokens = append(f.tokens, append(md.Get("authorization"), "")[0])
}

var at = timestamppb.New(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))

func (f *fakeDirectory) ListAgents(ctx context.Context, req *directorypb.ListAgentsRequest) (*directorypb.ListAgentsResponse, error) {
	f.note(ctx, req)
	return &directorypb.ListAgentsResponse{Agents: []*directorypb.AgentEntry{
		{Agent: &registrypb.AgentDescriptor{AgentId: "coder-1", Name: "Coder", Capabilities: []string{"go", "review"}}, State: "RUNNABLE", RegisteredAt: at},
	}}, nil
}

func (f *fakeDirectory) ListTasks(ctx context.Context, req *directorypb.ListTasksRequest) (*directorypb.ListTasksResponse, error) {
	f.note(ctx, req)
	if req.GetState() == "bogus" {
		return nil, status.Error(codes.InvalidArgument, "validation_error: state")
	}
	return &directorypb.ListTasksResponse{Tasks: []*directorypb.TaskEntry{
		{AgentId: "coder-1", TaskId: "t-1", State: "active", RepoId: "greet", Branch: "main", Description: "fix  the\ngreeting", CreatedAt: at},
		{AgentId: "coder-1", TaskId: "t-0", State: "failed", CreatedAt: at, CompletedAt: at},
	}}, nil
}

func (f *fakeDirectory) ListDAGRuns(ctx context.Context, req *directorypb.ListDAGRunsRequest) (*directorypb.ListDAGRunsResponse, error) {
	f.note(ctx, req)
	return &directorypb.ListDAGRunsResponse{Runs: []*directorypb.DAGRun{
		{WorkflowId: "release", RunId: "run-1", State: "WAITING", ExecutionStatus: "Running", StartedAt: at},
	}}, nil
}

func (f *fakeDirectory) ListToolCalls(ctx context.Context, req *directorypb.ListToolCallsRequest) (*directorypb.ListToolCallsResponse, error) {
	f.note(ctx, req)
	return &directorypb.ListToolCallsResponse{Calls: []*directorypb.ToolCallEntry{
		{CallId: "tool-9f5c", Caller: "agent:coder-1", ProviderId: "builtin", ToolName: "process.run", State: "error",
			ErrorCode: "PERMISSION_DENIED", Message: "needs approval", Frames: 1, Bytes: 0, CreatedAt: at},
	}}, nil
}

// serveDirectory runs a fakeDirectory on loopback and returns it with its address.
func serveDirectory(t *testing.T) (*fakeDirectory, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := grpc.NewServer()
	f := &fakeDirectory{}
	directorypb.RegisterDirectoryServiceServer(g, f)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return f, lis.Addr().String()
}

// TestListings: each listing sends its filters — ids as the Temporal UI shows them made
// bare, states in the case the server names them — and prints an aligned table, or JSON.
func TestListings(t *testing.T) {
	t.Setenv("SW4RM_OPERATOR_TOKEN", "ops-token")
	f, addr := serveDirectory(t)

	out, _, err := runOut(t, "agents", "--state", "runnable", "--capability", "go", "--server", addr)
	require.NoError(t, err)
	assert.True(t, proto.Equal(&directorypb.ListAgentsRequest{State: "RUNNABLE", Capability: "go"}, f.reqs[0]), "%v", f.reqs[0])
	assert.Regexp(t, `(?m)^AGENT\s+NAME\s+STATE\s+CAPABILITIES\s+REGISTERED\s+LAST HEARTBEAT$`, out)
	assert.Regexp(t, `(?m)^coder-1\s+Coder\s+RUNNABLE\s+go,review\s+2026-03-01T09:00:00Z\s+-$`, out)

	out, _, err = runOut(t, "tasks", "--agent", "agent/coder-1", "--task", "task/t-1", "--state", "Active", "--limit", "5", "--server", addr)
	require.NoError(t, err)
	assert.True(t, proto.Equal(&directorypb.ListTasksRequest{AgentId: "coder-1", TaskId: "t-1", State: "active", Limit: 5}, f.reqs[1]), "%v", f.reqs[1])
	assert.Regexp(t, `(?m)^coder-1\s+t-1\s+active\s+2026-03-01T09:00:00Z\s+-\s+-\s+greet/main\s+fix the greeting$`, out, "one line per task")
	assert.Regexp(t, `(?m)^coder-1\s+t-0\s+failed\s+2026-03-01T09:00:00Z\s+2026-03-01T09:00:00Z\s+`, out)

	out, _, err = runOut(t, "dag", "runs", "--prefix", "dag/rel", "--state", "waiting", "--server", addr)
	require.NoError(t, err)
	assert.True(t, proto.Equal(&directorypb.ListDAGRunsRequest{WorkflowIdPrefix: "rel", State: "WAITING"}, f.reqs[2]), "%v", f.reqs[2])
	assert.Regexp(t, `(?m)^release\s+WAITING\s+Running\s+2026-03-01T09:00:00Z\s+-\s+run-1$`, out)

	out, _, err = runOut(t, "tools", "calls", "--agent", "worktree/coder-1", "--provider", "builtin", "--tool", "process.run", "--state", "ERROR", "--server", addr)
	require.NoError(t, err)
	assert.True(t, proto.Equal(&directorypb.ListToolCallsRequest{Caller: "agent:coder-1", ProviderId: "builtin", ToolName: "process.run", State: "error"}, f.reqs[3]), "%v", f.reqs[3])
	assert.Regexp(t, `(?m)^tool-9f5c\s+agent:coder-1\s+builtin/process.run\s+error\s+PERMISSION_DENIED\s+1\s+0\s+2026-03-01T09:00:00Z\s+needs approval$`, out)

	out, _, err = runOut(t, "tools", "calls", "--caller", "operator:ops", "--json", "--server", addr)
	require.NoError(t, err)
	assert.Equal(t, "operator:ops", f.reqs[4].(*directorypb.ListToolCallsRequest).GetCaller())
	var parsed struct {
		Calls []struct {
			CallID    string `json:"callId"`
			ErrorCode string `json:"errorCode"`
		} `json:"calls"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &parsed), out)
	require.Len(t, parsed.Calls, 1)
	assert.Equal(t, "tool-9f5c", parsed.Calls[0].CallID)
	assert.Equal(t, "PERMISSION_DENIED", parsed.Calls[0].ErrorCode)

	for _, tok := range f.tokens {
		assert.Equal(t, "Bearer ops-token", tok)
	}

	n := len(f.reqs)
	_, _, err = runOut(t, "tools", "calls", "--agent", "a", "--caller", "agent:b", "--server", addr)
	require.ErrorContains(t, err, "give one")
	assert.Len(t, f.reqs, n, "refused before it sends")
	_, _, err = runOut(t, "tasks", "--state", "bogus", "--server", addr)
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "the server's refusal is the command's error")
}

// TestOperatorFindsTheDevToken: with no --token and no SW4RM_OPERATOR_TOKEN, a command
// talking to a server on loopback sends the token `sw4rm dev` left; either of those wins
// over it.
func TestOperatorFindsTheDevToken(t *testing.T) {
	path := withCacheDir(t)
	require.NoError(t, writePrivate(path, []byte("sw4rm-dev-token\n")))
	f, addr := serveDirectory(t)

	unsetenv(t, "SW4RM_OPERATOR_TOKEN")
	_, _, err := runOut(t, "agents", "--server", addr)
	require.NoError(t, err)
	_, _, err = runOut(t, "agents", "--server", addr, "--token", "mine")
	require.NoError(t, err)
	t.Setenv("SW4RM_OPERATOR_TOKEN", "from-env")
	_, _, err = runOut(t, "agents", "--server", addr)
	require.NoError(t, err)
	assert.Equal(t, []string{"Bearer sw4rm-dev-token", "Bearer mine", "Bearer from-env"}, f.tokens)
}
