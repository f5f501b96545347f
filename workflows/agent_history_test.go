package workflows_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestAgentContinuesAsNewPastHistoryLimit: an agent's lifecycle continues as new at the first
// step after its history passes HistoryLimit, without Temporal suggesting it, and carries
// its state into the next run: its RUNNING state and since, the running task and the queued
// ones in order, and the limit itself. Below the limit it goes on.
func TestAgentContinuesAsNewPastHistoryLimit(t *testing.T) {
	h := newSchedulerHarness(t)
	step := func(at time.Duration, f func()) { h.env.RegisterDelayedCallback(f, at) }
	step(time.Second, func() { h.env.SignalWorkflow(workflows.AgentReadySignal, workflows.AgentReady{Via: "stream"}) })
	step(2*time.Second, func() { h.enqueue("first", 5, 1) })
	step(3*time.Second, func() {
		run := onlyControl(t, h.controls(), protocol.ControlRun, "first")
		h.ack(run.id, commonpb.AckStage_RECEIVED, 0, "")
		h.env.SetCurrentHistoryLength(40) // at the limit: not past it
		h.enqueue("second", 5, 2)
	})
	step(4*time.Second, func() {
		h.env.SetCurrentHistoryLength(41)
		h.enqueue("third", 5, 3)
	})
	h.env.ExecuteWorkflow(workflows.AgentLifecycle, workflows.AgentLifecycleInput{AgentID: "subject", Name: "subject",
		HeartbeatInterval: time.Hour, HistoryLimit: 40})
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, h.env.GetWorkflowError(), &can)
	var next workflows.AgentLifecycleInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	require.Equal(t, commonpb.AgentState_RUNNING, next.State)
	require.False(t, next.Since.IsZero())
	require.Equal(t, 40, next.HistoryLimit, "the limit carries over")
	require.NotNil(t, next.Dispatch.Running)
	require.Equal(t, "first", next.Dispatch.Running.TaskID)
	var queued []string
	for _, q := range next.Dispatch.Queue {
		queued = append(queued, q.TaskID)
	}
	require.Equal(t, []string{"second", "third"}, queued, "the queue carries over, both tasks enqueued before the limit was passed")
}

// TestAgentHistoryLimitDefault: without HistoryLimit the run goes on past a history a test
// limit would end, below AgentHistoryLimit, until it deregisters.
func TestAgentHistoryLimitDefault(t *testing.T) {
	h := newSchedulerHarness(t)
	step := func(at time.Duration, f func()) { h.env.RegisterDelayedCallback(f, at) }
	step(time.Second, func() { h.env.SignalWorkflow(workflows.AgentReadySignal, workflows.AgentReady{Via: "stream"}) })
	step(2*time.Second, func() {
		h.env.SetCurrentHistoryLength(workflows.AgentHistoryLimit)
		h.enqueue("only", 5, 1)
	})
	step(3*time.Second, func() {
		h.env.SignalWorkflow(workflows.AgentDeregisterSignal, workflows.AgentDeregistration{Reason: "done"})
	})
	h.env.ExecuteWorkflow(workflows.AgentLifecycle, workflows.AgentLifecycleInput{AgentID: "subject", Name: "subject", HeartbeatInterval: time.Hour})
	require.NoError(t, h.env.GetWorkflowError())
}
