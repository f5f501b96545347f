package frontend

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/mocks"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// dispatchAnswer is a query's answer that decodes as st.
func dispatchAnswer(st workflows.DispatchStatus) *mocks.Value {
	v := &mocks.Value{}
	v.On("Get", mock.Anything).Return(func(out any) error {
		*out.(*workflows.DispatchStatus) = st
		return nil
	})
	return v
}

// TestDirectoryAgentLoad: ListAgents and GetAgent give each agent the router's buffer
// capacity, the unconfirmed rows of its inbound buffer, and what its scheduler answers: the
// running task and its priority, a pending preemption, and the queue in dispatch order with
// each task's priority. An agent whose workflow is gone, or does not answer within the
// bound, is listed without its dispatch, and the listing does not wait much longer than
// the bound for it. An operator sees every agent's load; an agent only its own.
func TestDirectoryAgentLoad(t *testing.T) {
	d, st := newDirectory(t)
	d.s.router = router.New(st, router.Config{BufferCapacity: 7}, nil)
	tc := &mocks.Client{}
	d.s.temporal = tc
	for _, id := range []string{"busy", "gone", "hung"} {
		putAgent(t, st, id, commonpb.AgentState_RUNNING)
	}
	for i, to := range []string{"busy", "busy", "gone"} {
		_, err := st.Messages().Admit(t.Context(), store.AdmitRequest{RecipientID: to, Capacity: 7,
			Envelope: &commonpb.Envelope{MessageId: "m-" + string(rune('a'+i)), ProducerId: "sender", MessageType: commonpb.MessageType_DATA}})
		require.NoError(t, err)
	}
	tc.On("QueryWorkflow", mock.Anything, workflows.AgentWorkflowID("busy"), "", workflows.AgentTasksQuery).Return(dispatchAnswer(workflows.DispatchStatus{
		Running: "t-run", RunningPriority: 5, PreemptPending: true, Queue: []string{"t-urgent", "t-later"}, QueuePriorities: []int32{-3, 5}}), nil)
	tc.On("QueryWorkflow", mock.Anything, workflows.AgentWorkflowID("gone"), "", workflows.AgentTasksQuery).Return(nil, serviceerror.NewNotFound("no workflow"))
	tc.On("QueryWorkflow", mock.Anything, workflows.AgentWorkflowID("hung"), "", workflows.AgentTasksQuery).Return(
		func(ctx context.Context, _, _, _ string, _ ...any) (converter.EncodedValue, error) {
			<-ctx.Done() // no worker answers
			return nil, ctx.Err()
		})

	start := time.Now()
	resp, err := d.ListAgents(readAs(t, auth.Principal{Operator: "ops"}), &directorypb.ListAgentsRequest{})
	require.NoError(t, err)
	assert.Less(t, time.Since(start), agentDispatchTimeout+time.Second, "an agent that does not answer holds the listing up for the bound only")
	got := map[string]*directorypb.AgentEntry{}
	for _, e := range resp.GetAgents() {
		got[e.GetAgent().GetAgentId()] = e
		assert.Equal(t, int64(7), e.GetBufferCapacity(), e.GetAgent().GetAgentId())
	}
	require.Len(t, got, 3)
	assert.Equal(t, int64(2), got["busy"].GetInboundDepth())
	assert.Equal(t, int64(1), got["gone"].GetInboundDepth())
	assert.Equal(t, int64(0), got["hung"].GetInboundDepth())
	busy := got["busy"].GetDispatch()
	require.NotNil(t, busy)
	assert.Equal(t, "t-run", busy.GetRunningTask())
	assert.Equal(t, int32(5), busy.GetRunningPriority())
	assert.True(t, busy.GetPreemptPending())
	assert.False(t, busy.GetNonPreemptible())
	require.Len(t, busy.GetQueued(), 2)
	assert.Equal(t, "t-urgent", busy.GetQueued()[0].GetTaskId())
	assert.Equal(t, int32(-3), busy.GetQueued()[0].GetPriority())
	assert.Equal(t, "t-later", busy.GetQueued()[1].GetTaskId())
	assert.Equal(t, int32(5), busy.GetQueued()[1].GetPriority())
	assert.Nil(t, got["gone"].GetDispatch(), "a workflow that is not running: no dispatch")
	assert.Nil(t, got["hung"].GetDispatch(), "a workflow that does not answer: no dispatch")

	// GetAgent answers the same for one agent.
	one, err := d.GetAgent(readAs(t, auth.Principal{Operator: "ops"}), &directorypb.GetAgentRequest{AgentId: "busy"})
	require.NoError(t, err)
	assert.Equal(t, int64(2), one.GetInboundDepth())
	assert.Equal(t, int64(7), one.GetBufferCapacity())
	assert.Equal(t, "t-run", one.GetDispatch().GetRunningTask())

	// An agent reads its own load, not another's: the registry record is discovery data,
	// what an agent holds is its own work (as ListTasks has it).
	asGone := readAs(t, auth.Principal{Agent: "gone"})
	resp, err = d.ListAgents(asGone, &directorypb.ListAgentsRequest{})
	require.NoError(t, err)
	for _, e := range resp.GetAgents() {
		assert.Equal(t, int64(7), e.GetBufferCapacity(), "the capacity is the deployment's, for anyone")
		if e.GetAgent().GetAgentId() == "gone" {
			assert.Equal(t, int64(1), e.GetInboundDepth())
			continue
		}
		assert.Zero(t, e.GetInboundDepth(), e.GetAgent().GetAgentId())
		assert.Nil(t, e.GetDispatch(), e.GetAgent().GetAgentId())
	}
	other, err := d.GetAgent(asGone, &directorypb.GetAgentRequest{AgentId: "busy"})
	require.NoError(t, err)
	assert.Zero(t, other.GetInboundDepth())
	assert.Nil(t, other.GetDispatch())
}
