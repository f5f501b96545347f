package frontend

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestDirectoryListTasks: the activity buffer lists active entries first, then ended ones;
// the filters narrow it; an operator sees every agent's, an agent its own (an empty filter
// meaning it) and is refused another's; a bad filter is validation_error.
func TestDirectoryListTasks(t *testing.T) {
	d, st := newDirectory(t)
	ab := st.ActivityBuffer()
	ctx := t.Context()
	for _, e := range []store.ActivityEntry{
		{AgentID: "alice", TaskID: "t1", RepoID: "r", Branch: "main", Description: "build it"},
		{AgentID: "alice", TaskID: "t2"},
		{AgentID: "bob", TaskID: "t3"},
	} {
		_, err := ab.Put(ctx, e, store.ActivityLimits{})
		require.NoError(t, err)
		time.Sleep(2 * time.Millisecond) // created_at orders them
	}
	_, err := ab.Complete(ctx, "alice", "t2", store.ActivityFailed)
	require.NoError(t, err)

	list := func(p auth.Principal, req *directorypb.ListTasksRequest) ([]string, error) {
		t.Helper()
		resp, err := d.ListTasks(readAs(t, p), req)
		var out []string
		for _, e := range resp.GetTasks() {
			out = append(out, e.GetAgentId()+"/"+e.GetTaskId()+"="+e.GetState())
		}
		return out, err
	}
	ops := auth.Principal{Operator: "ops"}
	got, err := list(ops, &directorypb.ListTasksRequest{})
	require.NoError(t, err)
	assert.Equal(t, []string{"alice/t1=active", "bob/t3=active", "alice/t2=failed"}, got, "active first, then ended")
	got, err = list(ops, &directorypb.ListTasksRequest{AgentId: "alice", State: "active"})
	require.NoError(t, err)
	assert.Equal(t, []string{"alice/t1=active"}, got)
	got, err = list(ops, &directorypb.ListTasksRequest{State: "failed"})
	require.NoError(t, err)
	assert.Equal(t, []string{"alice/t2=failed"}, got)
	got, err = list(ops, &directorypb.ListTasksRequest{State: "completed"})
	require.NoError(t, err)
	assert.Empty(t, got)
	got, err = list(ops, &directorypb.ListTasksRequest{TaskId: "t3"})
	require.NoError(t, err)
	assert.Equal(t, []string{"bob/t3=active"}, got)
	got, err = list(ops, &directorypb.ListTasksRequest{Limit: 1})
	require.NoError(t, err)
	assert.Equal(t, []string{"alice/t1=active"}, got)

	resp, err := d.ListTasks(readAs(t, ops), &directorypb.ListTasksRequest{TaskId: "t1"})
	require.NoError(t, err)
	e := resp.GetTasks()[0]
	assert.Equal(t, "r", e.GetRepoId())
	assert.Equal(t, "main", e.GetBranch())
	assert.Equal(t, "build it", e.GetDescription())
	assert.NotNil(t, e.GetCreatedAt())
	assert.Nil(t, e.GetCompletedAt(), "active: not ended")

	got, err = list(auth.Principal{Agent: "alice", KeyID: "k"}, &directorypb.ListTasksRequest{})
	require.NoError(t, err)
	assert.Equal(t, []string{"alice/t1=active", "alice/t2=failed"}, got, "an agent's own, with no filter")
	_, err = list(auth.Principal{Agent: "alice", KeyID: "k"}, &directorypb.ListTasksRequest{AgentId: "bob"})
	requireRefusal(t, err, codes.PermissionDenied, "permission_denied")
	got, err = list(auth.Principal{}, &directorypb.ListTasksRequest{})
	require.NoError(t, err)
	assert.Len(t, got, 3, "anonymous (authentication off): everything")

	for _, bad := range []*directorypb.ListTasksRequest{{State: "ACTIVE"}, {AgentId: "a b"}, {Limit: protocol.MaxListLimit + 1}, {TaskId: "t\x00"}} {
		_, err = list(ops, bad)
		requireRefusal(t, err, codes.InvalidArgument, "validation_error")
	}
}

// TestDirectoryListToolCalls: tool calls list newest first with how each ended, read from
// the final frame's summary; the filters narrow it; an agent sees only its own calls.
func TestDirectoryListToolCalls(t *testing.T) {
	d, st := newDirectory(t)
	tc := st.ToolCalls()
	ctx := t.Context()
	for _, r := range []store.ToolCallRecord{
		{CallID: "c1", Caller: "agent:alice", ProviderID: "builtin", ToolName: "echo"},
		{CallID: "c2", Caller: "agent:alice", ProviderID: "builtin", ToolName: "process.run"},
		{CallID: "c3", Caller: "agent:bob", ProviderID: "builtin", ToolName: "echo"},
		{CallID: "c4", Caller: "operator:ops", ProviderID: "builtin", ToolName: "echo"},
	} {
		_, _, err := tc.CreateCall(ctx, r)
		require.NoError(t, err)
		time.Sleep(2 * time.Millisecond)
	}
	finish := func(id string, s tool.Summary) {
		_, _, err := tc.Finish(ctx, id, "application/json", nil, func(uint64, uint64) []byte { return s.JSON() })
		require.NoError(t, err)
	}
	finish("c1", tool.Summary{Status: "ok"})
	finish("c2", tool.Summary{Status: "error", ErrorCode: string(tool.CodePermissionDenied), Message: "needs approval"})
	finish("c3", tool.Summary{Status: "cancelled", ErrorCode: string(tool.CodeCancelled)})

	list := func(p auth.Principal, req *directorypb.ListToolCallsRequest) ([]string, error) {
		t.Helper()
		resp, err := d.ListToolCalls(readAs(t, p), req)
		var out []string
		for _, c := range resp.GetCalls() {
			out = append(out, c.GetCallId()+"="+c.GetState())
		}
		return out, err
	}
	ops := auth.Principal{Operator: "ops"}
	got, err := list(ops, &directorypb.ListToolCallsRequest{})
	require.NoError(t, err)
	assert.Equal(t, []string{"c4=running", "c3=cancelled", "c2=error", "c1=ok"}, got)
	got, err = list(ops, &directorypb.ListToolCallsRequest{State: "error"})
	require.NoError(t, err)
	assert.Equal(t, []string{"c2=error"}, got)
	got, err = list(ops, &directorypb.ListToolCallsRequest{State: "running"})
	require.NoError(t, err)
	assert.Equal(t, []string{"c4=running"}, got)
	got, err = list(ops, &directorypb.ListToolCallsRequest{Caller: "agent:alice", ToolName: "echo"})
	require.NoError(t, err)
	assert.Equal(t, []string{"c1=ok"}, got)
	got, err = list(ops, &directorypb.ListToolCallsRequest{ProviderId: "builtin", Limit: 2})
	require.NoError(t, err)
	assert.Equal(t, []string{"c4=running", "c3=cancelled"}, got)

	resp, err := d.ListToolCalls(readAs(t, ops), &directorypb.ListToolCallsRequest{State: "error"})
	require.NoError(t, err)
	c := resp.GetCalls()[0]
	assert.Equal(t, string(tool.CodePermissionDenied), c.GetErrorCode())
	assert.Equal(t, "needs approval", c.GetMessage())
	assert.Equal(t, "agent:alice", c.GetCaller())
	assert.Equal(t, uint64(1), c.GetFrames(), "the final frame counts")

	alice := auth.Principal{Agent: "alice", KeyID: "k"}
	got, err = list(alice, &directorypb.ListToolCallsRequest{})
	require.NoError(t, err)
	assert.Equal(t, []string{"c2=error", "c1=ok"}, got, "an agent's own calls")
	got, err = list(alice, &directorypb.ListToolCallsRequest{Caller: "agent:alice"})
	require.NoError(t, err)
	assert.Len(t, got, 2)
	_, err = list(alice, &directorypb.ListToolCallsRequest{Caller: "operator:ops"})
	requireRefusal(t, err, codes.PermissionDenied, "permission_denied")

	for _, bad := range []*directorypb.ListToolCallsRequest{{Caller: "alice"}, {Caller: "agent:"}, {State: "failed"}, {ProviderId: "a/b"}, {Limit: 5000}} {
		_, err = list(ops, bad)
		requireRefusal(t, err, codes.InvalidArgument, "validation_error")
	}
}

// TestToolCallEnd: a final frame's summary says how the call ended; one that does not is an
// error, never a guessed ok.
func TestToolCallEnd(t *testing.T) {
	state, code, msg := toolCallEnd(tool.Summary{Status: "error", ErrorCode: "TIMEOUT", Message: "slow"}.JSON())
	assert.Equal(t, []string{"error", "TIMEOUT", "slow"}, []string{state, code, msg})
	state, _, _ = toolCallEnd(tool.Summary{Status: "ok"}.JSON())
	assert.Equal(t, "ok", state)
	for _, s := range [][]byte{nil, []byte("{"), []byte(`{"status":"done"}`)} {
		state, code, _ = toolCallEnd(s)
		assert.Equal(t, "error", state, "%s", s)
		assert.Equal(t, string(tool.CodeInternal), code)
	}
}

// TestDAGRunStatesAreTheWorkflowsStates: the states ListDAGRuns accepts as a filter are the
// ones the DAG workflow records.
func TestDAGRunStatesAreTheWorkflowsStates(t *testing.T) {
	assert.ElementsMatch(t, []string{workflows.DAGRunning, workflows.DAGWaiting, workflows.DAGCompleted, workflows.DAGFailed}, protocol.DAGRunStates)
}
