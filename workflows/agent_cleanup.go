package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
)

// This file is the agent's end as §8.4 asks for it: "complete cleanup of Agent-associated
// resources regardless of shutdown method". However an agent stops — it deregisters, its
// shutdown grace period runs out, it fails any other way (a state timeout, the scheduler
// unable to reach it, its heartbeats gone: its process was killed) — its lifecycle fails
// the tasks it holds and releases, through the workflows that hold them, its worktree
// binding with the git lock, the tool calls it made and the calls to the tools it provides,
// the handoffs offered to it and those it accepted.
// Each release is audited as agent.cleanup.<kind> with why (activities.ReleaseAgent). Runs
// recorded before versionCleanup do none of it.

// onAvailability applies a change of the heartbeat monitor's health flag (§14): an agent
// that missed HeartbeatMisses intervals in a row fails with ReasonHeartbeatLoss (its
// resources are then released, as for any failure), and one that failed so recovers when
// it heartbeats again (FAILED → RECOVERING → RUNNABLE, as re-registration recovers it). It
// stays registered either way: deregistration is explicit (§14).
func (w *agentLifecycle) onAvailability(ctx workflow.Context, was bool) error {
	switch {
	case !was && w.hb.Unavailable && !w.hb.Gone && w.state != commonpb.AgentState_FAILED_STATE:
		reason := fmt.Sprintf("%s: no heartbeat in %d consecutive intervals of %s (§14)", ReasonHeartbeatLoss, w.hb.Misses, w.hbInterval)
		w.logger.Warn("agent lost; FAILED", "agent_id", w.in.AgentID, "state", w.state.String(), "reason", reason)
		return w.transition(ctx, commonpb.AgentState_FAILED_STATE, reason)
	case was && !w.hb.Unavailable && w.state == commonpb.AgentState_FAILED_STATE && strings.HasPrefix(w.reason, ReasonHeartbeatLoss):
		if err := w.transition(ctx, commonpb.AgentState_RECOVERING, "heartbeats resumed"); err != nil {
			return err
		}
		return w.transition(ctx, commonpb.AgentState_RUNNABLE, "recovered: heartbeats resumed")
	}
	return nil
}

// releaseAll is the cleanup of a failure: the queued tasks fail as the running one did
// (afterStep), with failureCode, and the agent's resources are released.
func (w *agentLifecycle) releaseAll(ctx workflow.Context, why, cleanupID string) {
	code := failureCode(w.reason)
	failed := w.disp.stopped
	w.disp.stopped = nil
	if len(w.disp.d.Queue) > 0 {
		failed = append(failed, w.disp.taskIDs()...)
		w.disp.failQueued(ctx, code, "agent failed: "+why)
		w.reportStep(ctx)
		w.disp.flush(ctx)
	}
	w.release(ctx, why, cleanupID, failed, code)
}

// release releases what the agent holds: FindAgentHoldings lists its open tool calls and
// the handoffs offered to it or accepted by it, and ReleaseAgent sends the release updates —
// the worktree binding's always, since only its workflow knows whether it is bound — and
// audits them with the tasks the lifecycle failed. A failure is logged, never the
// lifecycle's: the agent's end goes on.
func (w *agentLifecycle) release(ctx workflow.Context, why, cleanupID string, tasks []string, code commonpb.ErrorCode) {
	var acts *activities.Activities
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		// ReleaseAgent waits for each workflow's answer, a worktree's up to a minute.
		StartToCloseTimeout: 10 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second,
			MaximumAttempts: activities.ReleaseAttempts},
	})
	id := w.in.AgentID
	var held activities.AgentHoldings
	if err := workflow.ExecuteActivity(actx, acts.FindAgentHoldings, id).Get(ctx, &held); err != nil {
		w.logger.Error("the agent's holdings could not be listed; only its worktree is released", "agent_id", id, "error", err)
	}
	rels := []activities.Release{{Kind: activities.CleanupWorktree, WorkflowID: WorktreeWorkflowID(id), Update: WorktreeReleaseUpdate}}
	for _, c := range held.ToolCalls {
		rels = append(rels, activities.Release{Kind: activities.CleanupToolCall, ID: c.CallID, WorkflowID: ToolWorkflowID(c.CallID),
			Update: ToolReleaseUpdate, As: c.As})
	}
	for _, id := range held.Handoffs {
		rels = append(rels, activities.Release{Kind: activities.CleanupHandoff, ID: id, WorkflowID: HandoffWorkflowID(id), Update: HandoffReleaseUpdate})
	}
	in := activities.ReleaseAgentInput{AgentID: id, Why: why, CleanupID: workflow.GetInfo(ctx).WorkflowExecution.RunID + "/" + cleanupID,
		Releases: rels, Tasks: tasks}
	if len(tasks) > 0 {
		in.TaskCode = strings.ToLower(code.String())
	}
	if err := workflow.ExecuteActivity(actx, acts.ReleaseAgent, in).Get(ctx, nil); err != nil {
		w.logger.Error("the agent's resources were not all released", "agent_id", id, "why", why, "error", err)
	}
}

// deregisteredWhy is the why of a deregistration's cleanup.
func deregisteredWhy(reason string) string {
	if reason == "" {
		return "deregistered"
	}
	return "deregistered: " + reason
}
