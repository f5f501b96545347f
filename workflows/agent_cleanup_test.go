package workflows_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/tools"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// wtRelease is the outcome of one WorktreeReleaseUpdate.
type wtRelease struct {
	updateOutcome
	out activities.ReleaseOutcome
}

// release sends WorktreeReleaseUpdate for agent "coder" at a moment of workflow time.
func (h *worktreeHarness) release(after time.Duration, why string) *wtRelease {
	res := &wtRelease{}
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(workflows.WorktreeReleaseUpdate, "", res.callback(func(v any) {
			if o, ok := v.(activities.ReleaseOutcome); ok {
				res.out = o
			}
		}), activities.AgentRelease{AgentID: "coder", Why: why})
	}, after)
	return res
}

// TestWorktreeReleasedWhenTheAgentStops (§8.4, §16.2): the release an agent's end sends
// unbinds the binding from whatever state it is in, along §16.2's edges only, by the
// scheduler and with why, releasing the home worktree's lock; the run ends as after an
// unbind. An unbound agent releases nothing.
func TestWorktreeReleasedWhenTheAgentStops(t *testing.T) {
	t.Run("bound home", func(t *testing.T) {
		h := newWorktreeHarness(t)
		h.bind(time.Second, "app", "w1")
		r := h.release(2*time.Second, "deregistered: bye")
		res := h.run()
		requireAccepted(t, r)
		assert.True(t, r.out.Released)
		assert.Equal(t, "UNBOUND", r.out.Outcome)
		assert.Contains(t, r.out.Note, "was BOUND_HOME; unbound from app/w1 (agent coder stopped: deregistered: bye)")
		assert.Equal(t, worktree.StateUnbound, res.State)
		assert.Equal(t, []activities.ReleaseWorktreeInput{{AgentID: "coder", RepoID: "app", WorktreeID: "w1"}}, h.releases, "the lock is released")
		assert.Equal(t, []string{"UNBOUND -bind_ok-> BOUND_HOME", "BOUND_HOME -unbind-> UNBOUND"}, h.transitions())
		last := h.records[len(h.records)-1]
		assert.Equal(t, "scheduler", last.Actor)
		assert.Equal(t, "agent coder stopped: deregistered: bye", last.Details["why"])
	})
	t.Run("switch pending on a HITL decision", func(t *testing.T) {
		h := newWorktreeHarness(t)
		h.hitl, h.hitlAfter = hitl.Outcome{Decision: hitl.Approve}, time.Hour
		h.bind(time.Second, "app", "w1")
		h.requestSwitch(2*time.Second, "hotfix", true)
		r := h.release(3*time.Second, "agent_unavailable")
		res := h.run()
		requireAccepted(t, r)
		assert.True(t, r.out.Released)
		assert.Contains(t, r.out.Note, "was SWITCH_PENDING (switch to hotfix)")
		assert.Equal(t, worktree.StateUnbound, res.State)
		assert.Equal(t, []string{"UNBOUND -bind_ok-> BOUND_HOME", "BOUND_HOME -switch_request-> SWITCH_PENDING",
			"SWITCH_PENDING -switch_reject-> BOUND_HOME", "BOUND_HOME -unbind-> UNBOUND"}, h.transitions(), "§16.2 has no unbind from SWITCH_PENDING")
		assert.Len(t, h.releases, 1)
		assert.Less(t, h.env.Now().Sub(h.t0), time.Hour, "the run does not wait for the switch's HITL decision")
	})
	t.Run("away on a switch", func(t *testing.T) {
		h := newWorktreeHarness(t)
		h.bind(time.Second, "app", "w1")
		h.requestSwitch(2*time.Second, "hotfix", false)
		h.approve(3*time.Second, "hotfix", time.Hour)
		r := h.release(4*time.Second, "agent_shutdown_timeout")
		h.run()
		requireAccepted(t, r)
		assert.True(t, r.out.Released)
		assert.Equal(t, "BOUND_NON_HOME -unbind-> UNBOUND", h.transitions()[len(h.transitions())-1])
		assert.Equal(t, []activities.ReleaseWorktreeInput{{AgentID: "coder", RepoID: "app", WorktreeID: "w1"}}, h.releases,
			"the home lock is the agent's; the target was never locked")
	})
	t.Run("bind failed", func(t *testing.T) {
		h := newWorktreeHarness(t)
		h.fail = func(activities.EnsureWorktreeInput, int) worktree.Reason { return worktree.ReasonWorktreeLocked }
		h.bind(time.Second, "app", "w1")
		r := h.release(10*time.Second, "deregistered")
		h.run()
		requireAccepted(t, r)
		assert.True(t, r.out.Released)
		assert.Equal(t, []string{"UNBOUND -bind_failed-> BIND_FAILED", "BIND_FAILED -unbind-> UNBOUND"}, h.transitions())
		assert.Empty(t, h.releases, "nothing was locked")
	})
	t.Run("unbound", func(t *testing.T) {
		h := newWorktreeHarness(t)
		r := h.release(time.Second, "deregistered")
		h.run()
		requireAccepted(t, r)
		assert.False(t, r.out.Released)
		assert.Empty(t, h.transitions())
	})
}

// TestHeartbeatLossReleasesTheAgent (§8.4, §14): an agent that stops heartbeating fails with
// agent_unavailable after the debounce; its running and queued tasks fail and its
// resources are released once — FindAgentHoldings, then ReleaseAgent with the worktree's
// release, the open calls' and the failed tasks, why being the failure's reason — and again
// when it finally deregisters, with why "deregistered: …".
func TestHeartbeatLossReleasesTheAgent(t *testing.T) {
	h := newSchedulerHarness(t)
	env := h.env
	var acts *activities.Activities
	var releases []activities.ReleaseAgentInput
	env.OnActivity(acts.FindAgentHoldings, mock.Anything, "subject").Return(activities.AgentHoldings{
		ToolCalls: []activities.HeldToolCall{{CallID: "c1", As: activities.AsCaller}, {CallID: "c2", As: activities.AsProvider}}}, nil)
	env.OnActivity(acts.ReleaseAgent, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.ReleaseAgentInput) error {
		releases = append(releases, in)
		return nil
	})
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.AgentReadySignal, workflows.AgentReady{Via: "stream"})
	}, time.Second)
	env.RegisterDelayedCallback(func() { h.enqueue("t1", 5, 2*time.Second) }, 2*time.Second)
	env.RegisterDelayedCallback(func() { h.enqueue("t2", 5, 3*time.Second) }, 3*time.Second)
	env.RegisterDelayedCallback(func() {
		require.Equal(t, "SCHEDULED", status(t, env).State, "t1's RUN is sent, never acknowledged")
		require.Empty(t, releases)
	}, 25*time.Second)
	env.RegisterDelayedCallback(func() {
		s := status(t, env)
		require.Equal(t, "FAILED_STATE", s.State)
		require.Len(t, releases, 1, "released once, when it failed")
		env.SignalWorkflow(workflows.AgentDeregisterSignal, workflows.AgentDeregistration{Reason: "gone for good"})
	}, 60*time.Second)
	env.ExecuteWorkflow(workflows.AgentLifecycle, workflows.AgentLifecycleInput{AgentID: "subject", Name: "subject", HeartbeatInterval: 10 * time.Second})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	h.requireCode("t1", commonpb.ErrorCode_AGENT_UNAVAILABLE)
	h.requireCode("t2", commonpb.ErrorCode_AGENT_UNAVAILABLE, "the queued task fails too: a lost agent may never come back")

	require.Len(t, releases, 2)
	failed := releases[0]
	assert.Equal(t, "subject", failed.AgentID)
	assert.Equal(t, "agent_unavailable: no heartbeat in 3 consecutive intervals of 10s (§14)", failed.Why)
	assert.Equal(t, []activities.Release{
		{Kind: activities.CleanupWorktree, WorkflowID: "worktree/subject", Update: workflows.WorktreeReleaseUpdate},
		{Kind: activities.CleanupToolCall, ID: "c1", WorkflowID: "tool/c1", Update: workflows.ToolReleaseUpdate, As: activities.AsCaller},
		{Kind: activities.CleanupToolCall, ID: "c2", WorkflowID: "tool/c2", Update: workflows.ToolReleaseUpdate, As: activities.AsProvider},
	}, failed.Releases)
	assert.Equal(t, []string{"t1", "t2"}, failed.Tasks, "the dispatched task and the queued one")
	assert.Equal(t, "agent_unavailable", failed.TaskCode)
	ended := releases[1]
	assert.Equal(t, "deregistered: gone for good", ended.Why)
	assert.Empty(t, ended.Tasks, "nothing left to fail")
	assert.NotEqual(t, failed.CleanupID, ended.CleanupID)

	evs, err := h.st.Audit().List(context.Background(), store.AuditFilter{AgentID: "subject", TypePrefix: "agent.state"})
	require.NoError(t, err)
	var toFailed int
	for _, e := range evs {
		if e.Type == "agent.state" && strings.Contains(string(e.Details), `"to":"`+commonpb.AgentState_FAILED_STATE.String()+`"`) {
			toFailed++
		}
	}
	assert.Equal(t, 1, toFailed, "one FAILED transition, audited")
}

// releaseTool sends ToolReleaseUpdate at a moment of workflow time and returns its answer.
func releaseTool(t *testing.T, h *toolHarness, at time.Duration, rel activities.AgentRelease) *activities.ReleaseOutcome {
	out := &activities.ReleaseOutcome{}
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(workflows.ToolReleaseUpdate, "", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { t.Errorf("release rejected: %v", err) },
			OnAccept: func() {},
			OnComplete: func(r any, err error) {
				require.NoError(t, err)
				*out = r.(activities.ReleaseOutcome)
			},
		}, rel)
	}, at)
	return out
}

// TestToolCallReleasedWhenTheAgentStops (§8.4, §18): a call whose calling agent stopped is
// cancelled by the scheduler, saying why; a call to a tool an agent provides ends
// INTERRUPTED when that agent stops, without telling it (it is gone); a release naming an
// agent with no part in the call releases nothing.
func TestToolCallReleasedWhenTheAgentStops(t *testing.T) {
	blocking := func(ctx context.Context, _ int64, _ tools.Emit) (tools.Result, error) {
		<-ctx.Done()
		return tools.Result{}, tool.Errorf(tool.CodeCancelled, "stopped")
	}
	t.Run("caller", func(t *testing.T) {
		h := newToolHarness(t, true, tool.Policy{}, blocking)
		out := releaseTool(t, h, 2*time.Second, activities.AgentRelease{AgentID: "a", Why: "deregistered: bye", As: activities.AsCaller})
		h.env.ExecuteWorkflow(workflows.ToolCall, h.in)
		assert.Equal(t, tool.CodeCancelled, h.result(t).Code)
		assert.Equal(t, activities.ReleaseOutcome{Released: true, Outcome: "CANCELLED", Note: "cancellation initiated; the final frame is stored"}, *out)
		fs := h.frames(t)
		s := summary(t, fs[len(fs)-1])
		assert.Equal(t, "cancelled", s.Status)
		assert.Equal(t, "scheduler", s.CancelledBy)
		assert.Equal(t, "cancelled by scheduler: agent a stopped: deregistered: bye", s.Message)
	})
	t.Run("provider agent", func(t *testing.T) {
		h := newToolHarness(t, true, tool.Policy{Timeout: time.Hour}, nil)
		h.in.ProviderAgent = "prov"
		var acts *activities.Activities
		var told atomic.Int64
		h.env.OnActivity(acts.OfferToolCall, mock.Anything, mock.Anything).Return(nil)
		h.env.OnActivity(acts.NotifyToolCancelled, mock.Anything, mock.Anything).Return(func(context.Context, activities.OfferToolCallInput) error {
			told.Add(1)
			return nil
		})
		other := releaseTool(t, h, time.Second, activities.AgentRelease{AgentID: "someone", Why: "deregistered", As: activities.AsProvider})
		out := releaseTool(t, h, 2*time.Second, activities.AgentRelease{AgentID: "prov", Why: "agent_unavailable: gone", As: activities.AsProvider})
		h.env.ExecuteWorkflow(workflows.ToolCall, h.in)
		res := h.result(t)
		assert.Equal(t, tool.CodeInterrupted, res.Code)
		assert.Equal(t, "provider agent prov stopped before answering (agent_unavailable: gone); whether it did the work is unknown", res.Message)
		assert.Equal(t, activities.ReleaseOutcome{Outcome: "not the agent's call"}, *other)
		assert.True(t, out.Released)
		assert.Equal(t, "INTERRUPTED", out.Outcome)
		assert.Zero(t, told.Load(), "a stopped agent is not told")
		fs := h.frames(t)
		assert.Equal(t, "INTERRUPTED", summary(t, fs[len(fs)-1]).ErrorCode)
	})
}

// releaseHandoff sends HandoffReleaseUpdate at a moment of workflow time.
func (h *handoffHarness) release(after time.Duration, agent, why string) *wtRelease {
	res := &wtRelease{}
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(workflows.HandoffReleaseUpdate, "", res.callback(func(v any) {
			if o, ok := v.(activities.ReleaseOutcome); ok {
				res.out = o
			}
		}), activities.AgentRelease{AgentID: agent, Why: why})
	}, after)
	return res
}

// TestHandoffReleasedWhenTheAgentStops (§8.4, §17.6): a pending offer to an agent that
// stopped is withdrawn as its rejection (agent_unavailable) — a routed handoff goes to the
// next candidate, a named one without spillover ends REJECTED — and a handoff the agent
// accepted ends EXPIRED at once, as at its completion deadline: the context stays with the
// originator, who is told, and is not fenced. A release naming another agent holds nothing.
func TestHandoffReleasedWhenTheAgentStops(t *testing.T) {
	t.Run("routed offer goes to the next candidate", func(t *testing.T) {
		h := newHandoffHarness(t, "b", "c")
		other := h.release(time.Second, "c", "deregistered")
		r := h.release(2*time.Second, "b", "agent_unavailable: no heartbeat")
		h.accept(3*time.Second, "c")
		h.complete(4*time.Second, "c")
		in := handoffInput("")
		res := h.run(in)
		requireAccepted(t, r)
		assert.Equal(t, activities.ReleaseOutcome{Released: true, Outcome: "PENDING", Note: "the offer is withdrawn; the handoff goes to the next candidate"}, r.out)
		assert.False(t, other.out.Released, "c was not offered it yet")
		assert.Equal(t, []string{"b", "c"}, h.offered())
		assert.Equal(t, handoffpb.HandoffStatus_COMPLETED, res.Status)
		assert.Equal(t, []string{"b"}, res.Refused)
		assert.Contains(t, h.records[0].Note, "rejected by b: agent_unavailable: agent b stopped: agent_unavailable: no heartbeat; routing to the next candidate")
	})
	t.Run("named offer without spillover ends rejected", func(t *testing.T) {
		h := newHandoffHarness(t)
		r := h.release(time.Second, "b", "deregistered: bye")
		res := h.run(handoffInput("b"))
		requireAccepted(t, r)
		assert.True(t, r.out.Released)
		assert.Equal(t, "REJECTED", r.out.Outcome)
		assert.Equal(t, handoffpb.HandoffStatus_REJECTED, res.Status)
		assert.Equal(t, "rejected by b: agent_unavailable: agent b stopped: deregistered: bye", res.EndReason)
		assert.Equal(t, []string{"a:handoff_rejected"}, h.told())
	})
	t.Run("accepted handoff expires", func(t *testing.T) {
		h := newHandoffHarness(t)
		t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
		h.env.SetStartTime(t0)
		h.accept(time.Second, "b")
		r := h.release(time.Minute, "b", "agent_shutdown_timeout")
		res := h.run(handoffInput("b"))
		requireAccepted(t, r)
		assert.True(t, r.out.Released)
		assert.Equal(t, "EXPIRED", r.out.Outcome)
		assert.Equal(t, handoffpb.HandoffStatus_EXPIRED, res.Status)
		assert.Equal(t, "accepting agent stopped: b accepted it at 2030-01-01T12:00:01Z and stopped before completing (agent_shutdown_timeout); the context stays with a", res.EndReason)
		assert.Equal(t, res.EndReason, r.out.Note)
		assert.Equal(t, []string{"a:handoff_accepted", "b:handoff_expired", "a:handoff_expired"}, h.told())
		assert.Empty(t, h.fences, "only completion fences the originator")
		assert.Equal(t, []handoffpb.HandoffStatus{handoffpb.HandoffStatus_ACCEPTED, handoffpb.HandoffStatus_EXPIRED}, h.recorded())
		assert.Less(t, h.env.Now().Sub(t0), time.Hour, "not at the completion deadline")
	})
}
