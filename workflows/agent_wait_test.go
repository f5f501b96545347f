package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// 004 §2, §6: a running task's request moves the agent RUNNING → WAITING and records
// waiting_on in the task's activity entry; the answer moves it back; a wait whose end never
// comes ends at its bound; an end that overtakes its beginning leaves the agent RUNNING; an
// idle agent's request changes nothing; a task that yields while waiting is SUSPENDED
// (through RUNNING, the only §8 way) and stops waiting.
func TestDispatchResponseWait(t *testing.T) {
	h := newSchedulerHarness(t)
	ab := h.st.ActivityBuffer()
	_, err := ab.Put(context.Background(), store.ActivityEntry{AgentID: "subject", TaskID: "t1"}, store.ActivityLimits{})
	require.NoError(t, err)
	entry := func() store.ActivityEntry {
		t.Helper()
		es, err := ab.List(context.Background(), store.ActivityFilter{AgentID: "subject", TaskID: "t1"})
		require.NoError(t, err)
		require.Len(t, es, 1)
		return es[0]
	}
	begin := func(key string, bound time.Duration) {
		h.env.SignalWorkflow(workflows.AgentResponseWaitSignal, workflows.ResponseWait{Key: key, RequestID: "req-" + key, Waiting: true, Bound: bound})
	}
	end := func(key, outcome string) {
		h.env.SignalWorkflow(workflows.AgentResponseWaitSignal, workflows.ResponseWait{Key: key, Outcome: outcome, Reason: "test"})
	}
	state := func() string { return status(t, h.env).State }
	step := func(at time.Duration, f func()) { h.env.RegisterDelayedCallback(f, at) }
	step(time.Second, func() { h.env.SignalWorkflow(workflows.AgentReadySignal, workflows.AgentReady{Via: "stream"}) })
	step(1500*time.Millisecond, func() {
		require.Equal(t, "RUNNABLE", state())
		begin("idle", time.Minute)
	})
	step(2*time.Second, func() {
		require.Equal(t, "RUNNABLE", state(), "an agent without a task has no execution to suspend")
		h.enqueue("t1", 5, 1)
	})
	step(3*time.Second, func() {
		run := onlyControl(t, h.controls(), protocol.ControlRun, "t1")
		h.ack(run.id, commonpb.AckStage_RECEIVED, 0, "")
	})
	step(4*time.Second, func() {
		require.Equal(t, "RUNNING", state())
		begin("a", 20*time.Second)
		begin("a", 20*time.Second) // the outbox delivers at least once
	})
	step(5*time.Second, func() {
		require.Equal(t, "WAITING", state())
		require.Equal(t, []string{"req-a"}, h.tasks().WaitingOn)
		e := entry()
		require.Equal(t, "req-a", e.WaitingOn, "004 §6: the entry records what the task waits on")
		require.False(t, e.WaitingSince.IsZero())
		end("a", workflows.ResponseAnswered)
	})
	step(6*time.Second, func() {
		require.Equal(t, "RUNNING", state(), "the answer ends WAITING")
		require.Empty(t, entry().WaitingOn)
		require.Empty(t, h.tasks().WaitingOn)
		begin("lost", 10*time.Second) // its end is never told
	})
	step(7*time.Second, func() { require.Equal(t, "WAITING", state()) })
	step(15*time.Second, func() { require.Equal(t, "WAITING", state(), "still within the bound (16 s)") })
	step(17*time.Second, func() {
		require.Equal(t, "RUNNING", state(), "WAITING is bounded (004 §2)")
		require.Empty(t, entry().WaitingOn)
		end("early", workflows.ResponseFailed)
		begin("early", time.Minute)
	})
	step(18*time.Second, func() {
		require.Equal(t, "RUNNING", state(), "an end that overtook its beginning")
		begin("b", time.Minute)
	})
	step(19*time.Second, func() {
		require.Equal(t, "WAITING", state())
		h.enqueue("urgent", -5, 2)
	})
	step(20*time.Second, func() {
		pre := onlyControl(t, h.controls(), protocol.ControlPreemptRequest, "t1")
		h.ack(pre.id, commonpb.AckStage_FULFILLED, 0, "yielded")
	})
	step(21*time.Second, func() {
		onlyControl(t, h.controls(), protocol.ControlRun, "urgent")
		require.Equal(t, "RESUMED", state(), "WAITING → RUNNING → SUSPENDED → RESUMED")
		require.Empty(t, entry().WaitingOn, "a task that yielded waits no more")
		h.env.SignalWorkflow(workflows.AgentDeregisterSignal, workflows.AgentDeregistration{Reason: "done"})
	})
	h.env.ExecuteWorkflow(workflows.AgentLifecycle, workflows.AgentLifecycleInput{AgentID: "subject", Name: "subject", HeartbeatInterval: time.Hour})
	require.NoError(t, h.env.GetWorkflowError())
	h.requireStates("t1", "SCHEDULED", "RUNNING", "SUSPENDED", "FAILED")
}
