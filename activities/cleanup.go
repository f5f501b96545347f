package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// What an agent's end releases (§8.4 "Resource Cleanup Requirements"): each kind is audited
// as AuditCleanupPrefix + kind ("agent.cleanup.worktree", …), with what was released and why.
const (
	// CleanupWorktree is the agent's worktree binding and its git lock (§16).
	CleanupWorktree = "worktree"
	// CleanupToolCall is a tool call the agent made, or one to a tool it provides (§18).
	CleanupToolCall = "tool_call"
	// CleanupHandoff is a handoff offered to the agent or accepted by it (§17.6).
	CleanupHandoff = "handoff"
	// CleanupTasks are the agent's running and queued tasks, failed (§7, §10).
	CleanupTasks = "tasks"
	// AuditCleanupPrefix begins the audit type of every release.
	AuditCleanupPrefix = "agent.cleanup."
)

// Roles of an agent in a tool call it is released from (AgentRelease.As).
const (
	// AsCaller: the agent made the call; it is cancelled.
	AsCaller = "caller"
	// AsProvider: the call is to a tool the agent provides; it ends INTERRUPTED.
	AsProvider = "provider"
)

// ReleaseAttempts bounds the attempts of ReleaseAgent: a release that still fails after
// them is audited as not released and the agent's lifecycle goes on.
const ReleaseAttempts = 5

// AgentRelease is the payload of the release updates an agent's end sends to the workflows
// that hold something for it: the worktree binding's, a tool call's, a handoff's.
type AgentRelease struct {
	// AgentID is the agent that stopped.
	AgentID string
	// Why says how it stopped: "deregistered: <reason>", or the reason of its FAILED state
	// (agent_shutdown_timeout, agent_unavailable: …).
	Why string
	// As is the agent's part in a tool call: AsCaller or AsProvider.
	As string `json:",omitempty"`
}

// ReleaseOutcome answers a release update.
type ReleaseOutcome struct {
	// Released is true when the workflow gave something up; false when it held nothing for
	// the agent any more.
	Released bool
	// Outcome is the state it left the resource in (UNBOUND, CANCELLED, INTERRUPTED, …) or,
	// when nothing was released, why not.
	Outcome string
	// Note says what happened, for a person.
	Note string `json:",omitempty"`
}

// AgentHoldings is what an agent holds that the store knows of, for its end to release.
type AgentHoldings struct {
	// ToolCalls are its open tool calls.
	ToolCalls []HeldToolCall `json:",omitempty"`
	// Handoffs are the request_ids of the handoffs offered to it (PENDING) and of those it
	// accepted and has not completed.
	Handoffs []string `json:",omitempty"`
}

// HeldToolCall is one open tool call of an agent.
type HeldToolCall struct {
	// CallID is the call.
	CallID string
	// As is the agent's part: AsCaller or AsProvider.
	As string
}

// FindAgentHoldings lists what the store says the agent holds: the tool calls it made (as
// caller "agent:<agent_id>", the principal the frontend records) and those to the tools it
// provides, that have no final frame yet, and the handoffs offered to it or accepted by it.
// Its worktree binding needs no lookup: the release is sent to the binding's workflow, which
// knows.
func (a *Activities) FindAgentHoldings(ctx context.Context, agentID string) (AgentHoldings, error) {
	var out AgentHoldings
	offered, err := a.Store.Handoffs().ListOfferedTo(ctx, agentID)
	if err != nil {
		return out, err
	}
	accepted, err := a.Store.Handoffs().ListAcceptedBy(ctx, agentID)
	if err != nil {
		return out, err
	}
	for _, h := range append(offered, accepted...) {
		out.Handoffs = append(out.Handoffs, h.RequestID)
	}
	calls, err := a.Store.ToolCalls().OpenCalls(ctx, "agent:"+agentID, agentID)
	if err != nil {
		return out, err
	}
	for _, c := range calls {
		as := AsProvider
		if c.Caller == "agent:"+agentID {
			as = AsCaller // its own call to a tool it provides is cancelled like any it made
		}
		out.ToolCalls = append(out.ToolCalls, HeldToolCall{CallID: c.CallID, As: as})
	}
	return out, nil
}

// Release is one release ReleaseAgent makes: an update of the workflow that holds the
// resource.
type Release struct {
	// Kind is CleanupWorktree, CleanupToolCall or CleanupHandoff.
	Kind string
	// ID names the resource in the audit event: the call_id, the handoff's request_id;
	// empty for the worktree binding (the agent's own).
	ID string `json:",omitempty"`
	// WorkflowID and Update name the workflow and its release update, which takes an
	// AgentRelease and answers a ReleaseOutcome.
	WorkflowID, Update string
	// As is AgentRelease.As.
	As string `json:",omitempty"`
}

// ReleaseAgentInput asks ReleaseAgent to release what a stopped agent held.
type ReleaseAgentInput struct {
	// AgentID is the agent.
	AgentID string
	// Why says how it stopped (AgentRelease.Why).
	Why string
	// CleanupID is unique to this cleanup: with a release's kind and id it names the
	// update, so the activity's retries send each update once.
	CleanupID string
	// Releases are the updates to send, in order.
	Releases []Release `json:",omitempty"`
	// Tasks are the tasks the lifecycle failed because the agent stopped, and TaskCode their
	// error_code: recorded in the audit log with the rest.
	Tasks    []string `json:",omitempty"`
	TaskCode string   `json:",omitempty"`
}

// ReleaseAgent sends each release update and audits every one that released something, or
// that could not be made, as agent.cleanup.<kind> with why (§8.4: cleanup regardless of the
// shutdown method; §19: every transition logged). A workflow that is not running holds
// nothing; a refusal by the workflow is final. Any other failure (Temporal unreachable, the
// update timing out) fails the attempt so that Temporal retries it; on the last of
// ReleaseAttempts it is audited as not released instead. Every update is idempotent, so a
// retry repeats nothing that was done.
func (a *Activities) ReleaseAgent(ctx context.Context, in ReleaseAgentInput) error {
	corr := "agent/" + in.AgentID
	record := func(kind string, details map[string]any) {
		details["why"] = in.Why
		a.Sink.Record(ctx, audit.Event{CorrelationID: corr, Actor: protocol.SchedulerID, Type: AuditCleanupPrefix + kind, AgentID: in.AgentID,
			Details: details})
	}
	if len(in.Tasks) > 0 && activity.GetInfo(ctx).Attempt == 1 {
		record(CleanupTasks, map[string]any{"tasks": in.Tasks, "error_code": in.TaskCode, "outcome": "FAILED"})
	}
	last := activity.GetInfo(ctx).Attempt >= ReleaseAttempts
	var retry []error
	for _, r := range in.Releases {
		out, err := a.release(ctx, in, r)
		details := map[string]any{"workflow_id": r.WorkflowID}
		switch r.Kind {
		case CleanupToolCall:
			details["call_id"], details["as"] = r.ID, r.As
		case CleanupHandoff:
			details["request_id"] = r.ID
		}
		var refused *temporal.ApplicationError
		switch {
		case err == nil && !out.Released:
			continue // nothing held any more
		case err == nil:
			details["outcome"] = out.Outcome
			if out.Note != "" {
				details["note"] = out.Note
			}
		case errors.As(err, &refused) || last:
			details["outcome"], details["error"] = "not_released", err.Error()
		default:
			retry = append(retry, fmt.Errorf("%s %s: %w", r.Kind, r.WorkflowID, err))
			continue
		}
		record(r.Kind, details)
	}
	return errors.Join(retry...)
}

// release sends one release update and waits for its answer; a workflow that is not running
// (never started, or ended) answers that nothing was released.
func (a *Activities) release(ctx context.Context, in ReleaseAgentInput, r Release) (ReleaseOutcome, error) {
	if a.Temporal == nil {
		return ReleaseOutcome{}, temporal.NewNonRetryableApplicationError("the worker has no Temporal client", "internal_error", nil)
	}
	// A worktree release waits for git to unlock; a minute is plenty, and the activity's
	// own timeout bounds all of them.
	uctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var out ReleaseOutcome
	h, err := a.Temporal.UpdateWorkflow(uctx, client.UpdateWorkflowOptions{WorkflowID: r.WorkflowID, UpdateName: r.Update,
		UpdateID: in.CleanupID + "/" + r.Kind + "/" + r.ID, WaitForStage: client.WorkflowUpdateStageCompleted,
		Args: []any{AgentRelease{AgentID: in.AgentID, Why: in.Why, As: r.As}}})
	if err == nil {
		err = h.Get(uctx, &out)
	}
	var gone *serviceerror.NotFound
	if errors.As(err, &gone) {
		return ReleaseOutcome{Outcome: "not running"}, nil
	}
	return out, err
}
