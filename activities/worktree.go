package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
	"github.com/sw4rm/sw4rm-temporal/repos"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// The side effects of the worktree binding workflow (§16): making, locking and releasing git
// worktrees (package repos, the real git CLI), and recording every transition in the store's
// projection and the audit log. Each is idempotent: Ensure finds a worktree it made and
// locked before, Release finds it unlocked, and a projection write repeats the same row.

// Audit event types of worktree bindings (§16: every transition is logged; §19).
const (
	// WorktreeEventState records a transition of the §16.2 table.
	WorktreeEventState = "worktree.state"
	// WorktreeEventBindFailed records a failed bind attempt (the first or a retry), with its
	// §16.3 reason.
	WorktreeEventBindFailed = "worktree.bind_failed"
	// WorktreeEventRecoveryTimeout tells operators a binding stayed BIND_FAILED longer than
	// the bind recovery timeout (§16.3 "Timeout"); it is logged at warn level.
	WorktreeEventRecoveryTimeout = "worktree.bind_recovery_timeout"
	// WorktreeEventReleaseFailed records an unbind whose unlock failed: the binding ended,
	// the worktree may still be locked for the agent.
	WorktreeEventReleaseFailed = "worktree.release_failed"
)

// WorktreeCorrelation is the correlation_id of a binding's audit events: the workflow's ID,
// worktree/<agent_id>.
func WorktreeCorrelation(agentID string) string { return "worktree/" + agentID }

// EnsureWorktreeInput asks EnsureWorktree for a worktree.
type EnsureWorktreeInput struct {
	// AgentID is the agent the worktree is for.
	AgentID string
	// RepoID and WorktreeID name it.
	RepoID, WorktreeID string
	// Lock locks it for the agent: a home binding. A non-home binding (an approved switch)
	// leaves its lock as it is.
	Lock bool
}

// EnsuredWorktree is EnsureWorktree's answer.
type EnsuredWorktree struct {
	// Branch and Path are the worktree's branch and directory.
	Branch, Path string
	// Created is true when this call made it.
	Created bool
}

// EnsureWorktree makes or reuses the worktree and, for a home binding, locks it for the
// agent (repos.Manager.Ensure). A failure is a non-retryable application error whose type is
// its §16.3 reason (worktree.ParseReason reads it back): retrying a failed bind is the
// workflow's own business, with §16.3's backoff as durable timers.
func (a *Activities) EnsureWorktree(ctx context.Context, in EnsureWorktreeInput) (EnsuredWorktree, error) {
	wt, err := a.Repos.Ensure(ctx, repos.EnsureRequest{RepoID: in.RepoID, WorktreeID: in.WorktreeID, Agent: in.AgentID, Lock: in.Lock})
	if err != nil {
		if ctx.Err() != nil {
			// The activity was cancelled or timed out: say so, and let Temporal decide.
			return EnsuredWorktree{}, ctx.Err()
		}
		return EnsuredWorktree{}, temporal.NewNonRetryableApplicationError(err.Error(), string(worktree.ReasonOf(err)), nil)
	}
	return EnsuredWorktree{Branch: wt.Branch, Path: wt.Path, Created: wt.Created}, nil
}

// ReleaseWorktreeInput asks ReleaseWorktree to end a home binding.
type ReleaseWorktreeInput struct {
	// AgentID is the agent whose lock is released.
	AgentID string
	// RepoID and WorktreeID name its home worktree.
	RepoID, WorktreeID string
}

// ReleaseWorktree unlocks the agent's home worktree if the agent holds its lock; the
// directory and the branch stay (repos.Manager.Release). Failures are retried by Temporal.
func (a *Activities) ReleaseWorktree(ctx context.Context, in ReleaseWorktreeInput) error {
	return a.Repos.Release(ctx, in.RepoID, in.WorktreeID, in.AgentID)
}

// RecordWorktreeInput asks RecordWorktree to record a binding's state.
type RecordWorktreeInput struct {
	// Binding is the binding after the transition; Binding.UpdatedAt is the transition's
	// workflow time.
	Binding store.WorktreeBinding
	// Type is the audit event: WorktreeEventState for a transition, WorktreeEventBindFailed
	// for a failed attempt, WorktreeEventReleaseFailed.
	Type string
	// From and Event are the transition's previous state and §16.2 event ("" when there was
	// no transition, e.g. a failed retry that stays BIND_FAILED).
	From, Event string
	// Actor is who caused it: the agent or operator that called, or the scheduler (timers,
	// retries).
	Actor string
	// Details are added to the audit event's details.
	Details map[string]any `json:",omitempty"`
}

// RecordWorktree writes the binding to the store's projection and records the audit event
// (§16: all state transitions are logged). A binding no longer bound is told to
// WorktreeUnbound.
func (a *Activities) RecordWorktree(ctx context.Context, in RecordWorktreeInput) error {
	b := in.Binding
	if err := a.Store.Worktrees().PutBinding(ctx, b); err != nil {
		return fmt.Errorf("record worktree binding of %s: %w", b.AgentID, err)
	}
	if a.WorktreeUnbound != nil && !worktree.Bound(worktree.State(b.State)) {
		a.WorktreeUnbound()
	}
	details := map[string]any{"state": b.State, "repo_id": b.RepoID, "home_worktree_id": b.HomeWorktreeID, "worktree_id": b.WorktreeID}
	for k, v := range map[string]string{"from": in.From, "event": in.Event, "branch": b.Branch, "path": b.Path,
		"target_worktree_id": b.TargetWorktreeID, "reason": b.Reason, "note": b.Note} {
		if v != "" {
			details[k] = v
		}
	}
	if !b.ExpiresAt.IsZero() {
		details["expires_at"] = b.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	for k, v := range in.Details {
		details[k] = v
	}
	typ, level := in.Type, slog.LevelInfo
	if typ == "" {
		typ = WorktreeEventState
	}
	if typ != WorktreeEventState {
		level = slog.LevelWarn
	}
	actor := in.Actor
	if actor == "" {
		actor = protocol.SchedulerID
	}
	a.Sink.Record(ctx, audit.Event{CorrelationID: WorktreeCorrelation(b.AgentID), Actor: actor, Type: typ, AgentID: b.AgentID,
		Details: details, Level: level})
	return nil
}

// BindRecoveryTimeoutInput asks NotifyBindRecoveryTimeout to tell operators.
type BindRecoveryTimeoutInput struct {
	// AgentID is the agent whose binding stayed BIND_FAILED.
	AgentID string
	// RepoID and WorktreeID name the worktree it failed to bind.
	RepoID, WorktreeID string
	// Reason and Note are the last failure's §16.3 reason and message.
	Reason, Note string
	// FailedAt is when the binding entered BIND_FAILED; Attempts how many binds failed.
	FailedAt time.Time
	Attempts int
}

// NotifyBindRecoveryTimeout escalates a binding still BIND_FAILED after the bind recovery
// timeout to operators (§16.3 "Timeout"): the audit event worktree.bind_recovery_timeout,
// logged at warn level, which operators watch (and alert on) in the log and the audit log.
// No HITL invocation is raised: there is nothing to decide, only a repository, lock or
// permission to fix, then an UNBIND or a new BIND (§16.3 manual recovery).
func (a *Activities) NotifyBindRecoveryTimeout(ctx context.Context, in BindRecoveryTimeoutInput) error {
	a.Sink.Record(ctx, audit.Event{
		CorrelationID: WorktreeCorrelation(in.AgentID), Actor: protocol.SchedulerID, Type: WorktreeEventRecoveryTimeout, AgentID: in.AgentID,
		Level: slog.LevelWarn,
		Details: map[string]any{"repo_id": in.RepoID, "worktree_id": in.WorktreeID, "reason": in.Reason, "note": in.Note,
			"failed_at": in.FailedAt.UTC().Format(time.RFC3339Nano), "attempts": in.Attempts,
			"timeout": worktree.BindRecoveryTimeout.String(),
			"action":  "fix the cause, then UNBIND the agent or BIND it again (§16.3 manual recovery)"},
	})
	return nil
}

// ReasonOfActivityError is the §16.3 reason of a failed EnsureWorktree as the workflow sees
// it: the type of its application error; anything else (a timeout, a worker lost) is
// filesystem_error.
func ReasonOfActivityError(err error) (worktree.Reason, string) {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		if r, perr := worktree.ParseReason(app.Type()); perr == nil {
			return r, app.Message()
		}
		return worktree.ReasonFilesystemError, app.Message()
	}
	return worktree.ReasonFilesystemError, err.Error()
}
