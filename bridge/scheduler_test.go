package bridge

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/dag"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestEntryCarriesEachNoticeToItsWorkflow: each of the router's notices becomes the outbox
// entry of its kind, addressed to the workflow it concerns, with a payload that decodes into
// the kind's payload type (the relay's handlers decode exactly that).
func TestEntryCarriesEachNoticeToItsWorkflow(t *testing.T) {
	s := NewScheduler(nil, nil, nil, nil)
	ack := router.ControlAck{
		Message: store.MessageRecord{MessageID: "m1", RecipientID: "a1"},
		Ack:     protocol.AckPayload{AckForMessageID: "m1", Stage: commonpb.AckStage_FAILED, ErrorCode: commonpb.ErrorCode_ACK_TIMEOUT, Note: "late"},
	}
	e, err := s.Entry(ack)
	require.NoError(t, err)
	assert.Equal(t, workflows.OutboxAgentControlAck, e.Kind)
	assert.Equal(t, workflows.AgentWorkflowID("a1"), e.WorkflowID)
	var ap workflows.AgentControlAckPayload
	require.NoError(t, json.Unmarshal(e.Payload, &ap))
	assert.Equal(t, workflows.AgentControlAckPayload{AgentID: "a1", Ack: workflows.ControlAck{MessageID: "m1",
		Stage: commonpb.AckStage_FAILED, ErrorCode: commonpb.ErrorCode_ACK_TIMEOUT, Note: "late"}}, ap)

	e, err = s.Entry(router.ResponseWait{ProducerID: "p", Key: "k", RequestID: "r1", Waiting: true, Bound: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, workflows.OutboxAgentResponseWait, e.Kind)
	assert.Equal(t, workflows.AgentWorkflowID("p"), e.WorkflowID)
	var wp workflows.AgentResponseWaitPayload
	require.NoError(t, json.Unmarshal(e.Payload, &wp))
	assert.Equal(t, workflows.ResponseWait{Key: "k", RequestID: "r1", Waiting: true, Bound: time.Minute}, wp.Wait)

	e, err = s.Entry(router.ResponseWait{ProducerID: "p", Key: "k", Answered: true, Reason: "response r2"})
	require.NoError(t, err)
	wp = workflows.AgentResponseWaitPayload{}
	require.NoError(t, json.Unmarshal(e.Payload, &wp))
	assert.Equal(t, workflows.ResponseWait{Key: "k", Outcome: workflows.ResponseAnswered, Reason: "response r2"}, wp.Wait)

	env := &commonpb.Envelope{MessageId: "m3", ProducerId: "ops"}
	e, err = s.Entry(router.RunEvent{Envelope: env, Event: dag.MessageEvent{WorkflowID: "release", Name: "approved"}})
	require.NoError(t, err)
	assert.Equal(t, workflows.OutboxDAGEvent, e.Kind)
	assert.Equal(t, workflows.DAGWorkflowID("release"), e.WorkflowID)
	var ep workflows.DAGEventPayload
	require.NoError(t, json.Unmarshal(e.Payload, &ep))
	assert.Equal(t, workflows.DAGEventPayload{WorkflowID: "release", Event: workflows.DAGEvent{Name: "approved", MessageID: "m3", By: "ops"}}, ep)
}

// TestHandlersTakeControlAndToolReplies: the dispatch table the router gets covers the
// messages agents may address to the scheduler; a tool reply without a store is refused
// with no_route, and a CONTROL other than a non-preemptible section with validation_error,
// before Temporal is asked.
func TestHandlersTakeControlAndToolReplies(t *testing.T) {
	hs := NewScheduler(nil, nil, nil, nil).Handlers()
	assert.Len(t, hs, 4)
	for _, mt := range []commonpb.MessageType{commonpb.MessageType_TOOL_RESULT, commonpb.MessageType_TOOL_ERROR} {
		perr, err := hs[mt](t.Context(), &commonpb.Envelope{MessageType: mt})
		require.NoError(t, err)
		require.NotNil(t, perr, mt)
		assert.Equal(t, commonpb.ErrorCode_NO_ROUTE, perr.Code)
	}
	env, err := protocol.NewControlEnvelope("m", "a", protocol.Control{Type: protocol.ControlPreemptRequest, TaskID: "t"})
	require.NoError(t, err)
	perr, err := hs[commonpb.MessageType_CONTROL](t.Context(), env)
	require.NoError(t, err)
	require.NotNil(t, perr)
	assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, perr.Code)
	assert.Contains(t, perr.Msg, "agents may send the scheduler only")
}
