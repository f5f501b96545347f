package test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	tsdk "github.com/sw4rm/sw4rm-temporal/sdk/tool"
	wtsdk "github.com/sw4rm/sw4rm-temporal/sdk/worktree"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// keepAlive heartbeats an agent every 200 ms until the returned stop is called (or the test
// ends), as a live agent's runtime answers the scheduler's HEARTBEAT requests (§14). The
// heartbeat reports no state, so it never moves the lifecycle past readiness.
func keepAlive(t *testing.T, a *sdk.Agent) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			_ = a.Heartbeat(ctx, commonpb.AgentState_AGENT_STATE_UNSPECIFIED, nil)
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// holdings is what an agent under test holds when it stops.
type holdings struct {
	worktreePath string
	// asCaller is a call the agent made (to a peer's tool nobody answers); asProvider a call
	// a peer made to the agent's own tool, which the agent never answers.
	asCaller, asProvider string
	// running is the task dispatched to the agent (its RUN never acknowledged), queued the
	// one queued behind it.
	running, queued string
	// offered is a handoff offered to the agent, accepted one it accepted.
	offered, accepted string
}

// hold makes subject hold a worktree binding and its git lock, a pending tool call as caller
// and one as provider, a dispatched task and a queued one, a handoff offered to it and one it
// accepted (both from peer), and checks that it holds them.
func hold(t *testing.T, sys *system, repo string, subject, peer *sdk.Agent) holdings {
	t.Helper()
	ctx := context.Background()
	var h holdings
	st, err := wtsdk.New(subject).Bind(ctx, "app", "home-"+subject.ID())
	require.NoError(t, err)
	require.Equal(t, wtsdk.StateBoundHome, st.State)
	h.worktreePath = st.Path
	_, locked := lockOfWorktree(t, repo, h.worktreePath)
	require.True(t, locked, "bound: the worktree is locked for the agent")

	reg, err := connectorpb.NewConnectorServiceClient(subject.Conn()).RegisterProvider(ctx, &connectorpb.ProviderRegisterRequest{
		ProviderId: subject.ID(), Tools: []*connectorpb.ToolDescriptor{{ToolName: "hold", InputSchema: `{"type":"object"}`, SideEffects: "none"}}})
	require.NoError(t, err)
	require.True(t, reg.GetOk(), reg.GetReason())
	reg, err = connectorpb.NewConnectorServiceClient(peer.Conn()).RegisterProvider(ctx, &connectorpb.ProviderRegisterRequest{
		ProviderId: peer.ID(), Tools: []*connectorpb.ToolDescriptor{{ToolName: "slow", InputSchema: `{"type":"object"}`, SideEffects: "none"}}})
	require.NoError(t, err)
	require.True(t, reg.GetOk(), reg.GetReason())
	long := &toolpb.ExecutionPolicy{Timeout: durationpb.New(10 * time.Minute)}
	h.asCaller, h.asProvider = uniq(t, "as-caller"), uniq(t, "as-provider")
	sctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	_, err = tsdk.New(subject).Stream(sctx, tsdk.Call{CallID: h.asCaller, ProviderID: peer.ID(), ToolName: "slow", Policy: long})
	require.NoError(t, err)
	_, err = tsdk.New(peer).Stream(sctx, tsdk.Call{CallID: h.asProvider, ProviderID: subject.ID(), ToolName: "hold", Policy: long})
	require.NoError(t, err)
	for _, id := range []string{h.asCaller, h.asProvider} {
		require.Eventually(t, func() bool {
			v, err := sys.app.Temporal().QueryWorkflow(ctx, workflows.ToolWorkflowID(id), "", workflows.ToolStatusQuery)
			var s workflows.ToolStatus
			return err == nil && v.Get(&s) == nil && s.State == "running"
		}, 20*time.Second, 20*time.Millisecond, "call %s runs", id)
	}

	sc := schedulerpb.NewSchedulerServiceClient(subject.Conn())
	h.running, h.queued = uniq(t, "running"), uniq(t, "queued")
	submit(t, sc, subject.ID(), h.running, 5, "repo:"+h.running+" path:a/**")
	// Its RUN is sent (the agent is SCHEDULED); the task's own SCHEDULED waits for the ACK.
	waitState(t, sys, subject.ID(), commonpb.AgentState_SCHEDULED)
	submit(t, sc, subject.ID(), h.queued, 5, "repo:"+h.queued+" path:a/**")
	waitTask(t, sys, h.queued, workflows.TaskQueued)

	hc := handoffpb.NewHandoffServiceClient(peer.Conn())
	for _, id := range []*string{&h.offered, &h.accepted} {
		*id = uniq(t, "handoff")
		_, err := hc.RequestHandoff(ctx, &handoffpb.HandoffRequest{RequestId: *id, FromAgent: peer.ID(), ToAgent: subject.ID(),
			Reason: "needs the subject", ContextSnapshot: []byte(`{"ticket":42}`), Timeout: durationpb.New(10 * time.Minute)})
		require.NoError(t, err)
	}
	_, err = handoffpb.NewHandoffServiceClient(subject.Conn()).AcceptHandoff(ctx, &handoffpb.HandoffResponse{RequestId: h.accepted, Accepted: true,
		AcceptingAgent: subject.ID()})
	require.NoError(t, err)
	for id, want := range map[string]handoffpb.HandoffStatus{h.offered: handoffpb.HandoffStatus_PENDING, h.accepted: handoffpb.HandoffStatus_ACCEPTED} {
		require.Eventually(t, func() bool {
			v, err := sys.app.Temporal().QueryWorkflow(ctx, workflows.HandoffWorkflowID(id), "", workflows.HandoffStateQuery)
			var st workflows.HandoffState
			return err == nil && v.Get(&st) == nil && st.Status == want && st.Target == subject.ID()
		}, 20*time.Second, 20*time.Millisecond, "handoff %s is %s at %s", id, want, subject.ID())
	}
	return h
}

// toolEnd waits for a tool call's workflow to end and returns how it ended, from the
// summary of its stored final frame (what CallStream's last frame tells the caller).
func toolEnd(t *testing.T, sys *system, callID string) tool.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var res workflows.ToolCallResult
	// A call that did not succeed fails its workflow, with its result as details.
	err := sys.app.Temporal().GetWorkflow(ctx, workflows.ToolWorkflowID(callID), "").Get(ctx, &res)
	res, ok := workflows.ToolOutcome(res, err)
	require.True(t, ok, "call %s ends: %v", callID, err)
	fs, err := sys.app.Store().ToolCalls().Frames(ctx, callID, res.FinalFrame-1, 1)
	require.NoError(t, err)
	require.Len(t, fs, 1)
	require.True(t, fs[0].Final)
	var sum tool.Summary
	require.NoError(t, json.Unmarshal(fs[0].Summary, &sum))
	return sum
}

// endLifecycle deregisters an agent, waits for its lifecycle to end and records its history
// under name (none when name is empty).
func endLifecycle(t *testing.T, sys *system, a *sdk.Agent, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := sys.app.Store().Registry().GetAgent(ctx, a.ID()); err == nil {
		require.NoError(t, a.Deregister(ctx, "test over"))
	}
	require.NoError(t, sys.app.Temporal().GetWorkflow(ctx, workflows.AgentWorkflowID(a.ID()), "").Get(ctx, nil))
	if name != "" {
		recordHistory(t, sys.app.Temporal(), workflows.AgentWorkflowID(a.ID()), name)
	}
}

// cleanupAudit returns the agent.cleanup.* audit events of an agent, by type.
func cleanupAudit(t *testing.T, sys *system, agentID string) map[string][]map[string]any {
	t.Helper()
	evs, err := sys.app.Store().Audit().List(context.Background(), store.AuditFilter{AgentID: agentID, TypePrefix: "agent.cleanup"})
	require.NoError(t, err)
	out := map[string][]map[string]any{}
	for _, e := range evs {
		var d map[string]any
		require.NoError(t, json.Unmarshal(e.Details, &d))
		out[e.Type] = append(out[e.Type], d)
	}
	return out
}

// assertReleased checks that everything h holds was released because the agent stopped for
// why: the worktree unbound and unlocked, the call it made CANCELLED, the call it provided
// INTERRUPTED, both tasks FAILED, the handoff offered to it REJECTED and the one it accepted
// EXPIRED, each release audited with why.
func assertReleased(t *testing.T, sys *system, repo, agentID string, h holdings, why string, taskCode commonpb.ErrorCode) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		b, err := sys.app.Store().Worktrees().GetBinding(ctx, agentID)
		return err == nil && b.State == "UNBOUND"
	}, 30*time.Second, 50*time.Millisecond, "the binding ends")
	_, locked := lockOfWorktree(t, repo, h.worktreePath)
	assert.False(t, locked, "the git lock is released")

	caller := toolEnd(t, sys, h.asCaller)
	assert.Equal(t, "cancelled", caller.Status, "the call the agent made: %+v", caller)
	assert.Equal(t, string(tool.CodeCancelled), caller.ErrorCode)
	assert.Contains(t, caller.Message, why)
	provider := toolEnd(t, sys, h.asProvider)
	assert.Equal(t, string(tool.CodeInterrupted), provider.ErrorCode, "the call the agent provided: %+v", provider)
	assert.Contains(t, provider.Message, why)

	for _, id := range []string{h.running, h.queued} {
		st := waitTask(t, sys, id, workflows.TaskFailed)
		assert.Equal(t, taskCode, st.ErrorCode, "task %s: %+v", id, st)
	}

	// The offer named the agent, without spillover: it ends REJECTED; the accepted handoff
	// goes back to its originator, EXPIRED. Both are told to the originator (peer).
	for id, want := range map[string]handoffpb.HandoffStatus{h.offered: handoffpb.HandoffStatus_REJECTED, h.accepted: handoffpb.HandoffStatus_EXPIRED} {
		var rec store.HandoffRecord
		require.Eventually(t, func() bool {
			r, err := sys.app.Store().Handoffs().GetHandoff(ctx, id)
			rec = r
			return err == nil && r.Status == want
		}, 30*time.Second, 50*time.Millisecond, "handoff %s ends %s (last %+v)", id, want, rec.Status)
		assert.Contains(t, rec.EndReason, why)
	}

	var audit map[string][]map[string]any
	require.Eventually(t, func() bool {
		audit = cleanupAudit(t, sys, agentID)
		return len(audit["agent.cleanup.worktree"]) > 0 && len(audit["agent.cleanup.tool_call"]) >= 2 && len(audit["agent.cleanup.tasks"]) > 0 &&
			len(audit["agent.cleanup.handoff"]) >= 2
	}, 15*time.Second, 50*time.Millisecond, "each release is audited")
	for typ, evs := range audit {
		for _, d := range evs {
			assert.Contains(t, d["why"], why, "%s: %v", typ, d)
		}
	}
	calls := map[string]any{}
	for _, d := range audit["agent.cleanup.tool_call"] {
		calls[d["call_id"].(string)] = d["outcome"]
	}
	assert.Equal(t, map[string]any{h.asCaller: string(tool.CodeCancelled), h.asProvider: string(tool.CodeInterrupted)}, calls)
	handoffs := map[string]any{}
	for _, d := range audit["agent.cleanup.handoff"] {
		handoffs[d["request_id"].(string)] = d["outcome"]
	}
	assert.Equal(t, map[string]any{h.offered: "REJECTED", h.accepted: "EXPIRED"}, handoffs)
}

// TestAgentCleanup (§8.4 "Resource Cleanup Requirements ... regardless of shutdown method"):
// on both stores, an agent that holds a worktree binding with its git lock, a tool call it
// made, a call to a tool it provides, a dispatched task and a queued one, a handoff offered
// to it and one it accepted stops in each of
// the three ways an agent stops — it deregisters; a ShutdownAgent's grace period runs out
// (FAILED agent_shutdown_timeout); its heartbeats stop, as when its process is killed
// (FAILED agent_unavailable after the §14 debounce) — and everything it held is released:
// the worktree unbound and unlocked, its own call CANCELLED, the call it provided
// INTERRUPTED, its tasks FAILED, the handoff offered to it REJECTED, the one it accepted
// EXPIRED back to the originator, and each release audited as agent.cleanup.<kind> with why.
// An agent that lost its heartbeats and heartbeats again is RUNNABLE again, still registered.
func TestAgentCleanup(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			repo := gitRepo(t)
			cfg := newConfig(t, kind)
			cfg.Repos = "app=" + repo
			cfg.HeartbeatInterval, cfg.HeartbeatMisses = time.Second, 2
			sys := start(t, cfg)
			ctx := context.Background()
			peer := dialAgent(t, sys, "peer")
			keepAlive(t, peer)

			t.Run("deregister", func(t *testing.T) {
				subject := dialAgent(t, sys, "leaving")
				keepAlive(t, subject)
				waitState(t, sys, subject.ID(), commonpb.AgentState_RUNNABLE)
				h := hold(t, sys, repo, subject, peer)
				require.NoError(t, subject.Deregister(ctx, "going home"))
				assertReleased(t, sys, repo, subject.ID(), h, "deregistered: going home", commonpb.ErrorCode_AGENT_SHUTDOWN)
				endLifecycle(t, sys, subject, "agent_cleanup_deregistered_"+kind)
				// Not the binding's nor the caller's call: their histories hold the test's paths.
				recordHistory(t, sys.app.Temporal(), workflows.ToolWorkflowID(h.asProvider), "tool_released_provider_"+kind)
				recordHistory(t, sys.app.Temporal(), workflows.HandoffWorkflowID(h.offered), "handoff_released_offer_"+kind)
				recordHistory(t, sys.app.Temporal(), workflows.HandoffWorkflowID(h.accepted), "handoff_released_accepted_"+kind)
			})
			t.Run("shutdown grace expiry", func(t *testing.T) {
				subject := dialAgent(t, sys, "stubborn")
				keepAlive(t, subject)
				waitState(t, sys, subject.ID(), commonpb.AgentState_RUNNABLE)
				h := hold(t, sys, repo, subject, peer)
				_, err := schedulerpb.NewSchedulerServiceClient(peer.Conn()).ShutdownAgent(ctx,
					&schedulerpb.ShutdownAgentRequest{AgentId: subject.ID(), GracePeriod: durationpb.New(time.Second)})
				require.NoError(t, err)
				waitState(t, sys, subject.ID(), commonpb.AgentState_FAILED_STATE)
				assert.Equal(t, workflows.ReasonShutdownTimeout, agentStatus(t, sys, subject.ID()).Reason)
				assertReleased(t, sys, repo, subject.ID(), h, workflows.ReasonShutdownTimeout, commonpb.ErrorCode_AGENT_SHUTDOWN)
				endLifecycle(t, sys, subject, "")
			})
			t.Run("heartbeat loss", func(t *testing.T) {
				subject := dialAgent(t, sys, "silent")
				stop := keepAlive(t, subject)
				waitState(t, sys, subject.ID(), commonpb.AgentState_RUNNABLE)
				h := hold(t, sys, repo, subject, peer)
				stop()
				waitState(t, sys, subject.ID(), commonpb.AgentState_FAILED_STATE)
				st := agentStatus(t, sys, subject.ID())
				assert.True(t, strings.HasPrefix(st.Reason, workflows.ReasonHeartbeatLoss), "%+v", st)
				assertReleased(t, sys, repo, subject.ID(), h, workflows.ReasonHeartbeatLoss, commonpb.ErrorCode_AGENT_UNAVAILABLE)

				// Heartbeats again: recovered, registered all along (§14), free to bind again.
				keepAlive(t, subject)
				waitState(t, sys, subject.ID(), commonpb.AgentState_RUNNABLE)
				assert.Equal(t, "recovered: heartbeats resumed", agentStatus(t, sys, subject.ID()).Reason)
				_, err := wtsdk.New(subject).Bind(ctx, "app", "home-"+subject.ID())
				require.NoError(t, err)
				endLifecycle(t, sys, subject, "agent_cleanup_heartbeat_loss_"+kind)
			})
		})
	}
}
