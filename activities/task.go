package activities

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/taskadmission"
)

// AdmitTask is the task workflow's admission (package admission), as an activity.
func (a *Activities) AdmitTask(ctx context.Context, in taskadmission.Input) (taskadmission.Result, error) {
	return a.admitter().Admit(ctx, in)
}

// NewTaskAdmission asks AdmitNewTask to admit a task whose job key is not known yet.
type NewTaskAdmission struct {
	// Input is the admission request, without its JobKey.
	Input taskadmission.Input
	// Params and ContentType are the task's parameters, which the job key covers (§9.2).
	Params      []byte `json:",omitempty"`
	ContentType string `json:",omitempty"`
}

// TaskAdmitted is AdmitNewTask's answer: admission's verdict and the job key it used, which
// later attempts reuse.
type TaskAdmitted struct {
	Result taskadmission.Result
	JobKey string
}

// AdmitNewTask looks up the agent's type, derives the task's job key and makes the first
// admission attempt: what AgentTypeOf and AdmitTask do, in one local activity, so that a
// task's first workflow task waits on one round trip less. An agent that is not registered
// is a non-retryable no_route failure.
func (a *Activities) AdmitNewTask(ctx context.Context, in NewTaskAdmission) (TaskAdmitted, error) {
	agentType, err := a.AgentTypeOf(ctx, in.Input.AgentID)
	if err != nil {
		return TaskAdmitted{}, err
	}
	in.Input.JobKey = taskadmission.JobKey(agentType, in.Params, in.ContentType, in.Input.Scope)
	res, err := a.AdmitTask(ctx, in.Input)
	return TaskAdmitted{Result: res, JobKey: in.Input.JobKey}, err
}

// admitter is the admission over the activities' dependencies.
func (a *Activities) admitter() *taskadmission.Admitter {
	return &taskadmission.Admitter{Store: a.Store, Sink: a.Sink, Policy: a.Scheduler}
}

// AgentTypeOf returns the agent's type (its descriptor name; §9.1 counts instances per type),
// or a non-retryable error when the agent is not registered.
func (a *Activities) AgentTypeOf(ctx context.Context, agentID string) (string, error) {
	rec, err := a.Store.Registry().GetAgent(ctx, agentID)
	if errors.Is(err, store.ErrNotFound) {
		return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("agent %q is not registered", agentID), "no_route", err)
	}
	if err != nil {
		return "", err
	}
	return cmp.Or(rec.Descriptor.GetName(), agentID), nil
}

// FinishTaskInput asks FinishTask to close a task's activity entry.
type FinishTaskInput struct {
	// AgentID and TaskID name the entry.
	AgentID, TaskID string
	// Failed selects the history status.
	Failed bool
}

// FinishTask moves the task's activity entry to the history (§10: removed on completion);
// an entry that is already gone (purged) is not an error.
func (a *Activities) FinishTask(ctx context.Context, in FinishTaskInput) error {
	ab := a.Store.ActivityBuffer()
	status := store.ActivityCompleted
	if in.Failed {
		status = store.ActivityFailed
	}
	if _, err := ab.Complete(ctx, in.AgentID, in.TaskID, status); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("complete activity entry %s/%s: %w", in.AgentID, in.TaskID, err)
	}
	return nil
}

// SendControlInput asks SendControl to send one CONTROL message.
type SendControlInput struct {
	// AgentID is the recipient.
	AgentID string
	// MessageID is the message_id, chosen by the workflow so a retry sends the same message.
	MessageID string
	// Control is the payload.
	Control protocol.Control
}

// SendControl sends the scheduler's CONTROL message to an agent through the router (tracked,
// PRIVILEGED lane). An agent that is gone is a non-retryable no_route failure.
func (a *Activities) SendControl(ctx context.Context, in SendControlInput) error {
	env, err := protocol.NewControlEnvelope(in.MessageID, protocol.SchedulerID, in.Control)
	if err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), "validation_error", err)
	}
	if err := a.Router.SendControl(ctx, in.AgentID, env); err != nil {
		var perr *protocol.Error
		if errors.As(err, &perr) {
			return temporal.NewNonRetryableApplicationError(perr.Error(), strings.ToLower(protocol.CodeName(perr.Code)), err)
		}
		return err
	}
	a.Sink.Record(ctx, audit.Event{CorrelationID: env.GetCorrelationId(), Actor: protocol.SchedulerID, Type: "scheduler.control_sent",
		AgentID: in.AgentID, MessageID: in.MessageID, Details: map[string]any{"type": in.Control.Type, "task_id": in.Control.TaskID,
			"priority": in.Control.Priority, "resume": in.Control.Resume, "grace_ms": in.Control.GraceMS, "reason": in.Control.Reason}})
	return nil
}

// TaskEnded reports whether a task no longer has an active activity entry, i.e. it
// completed, failed or was purged.
func (a *Activities) TaskEnded(ctx context.Context, taskID string) (bool, error) {
	es, err := a.Store.ActivityBuffer().List(ctx, store.ActivityFilter{TaskID: taskID, Limit: 1})
	if err != nil {
		return false, fmt.Errorf("look up task %s: %w", taskID, err)
	}
	return len(es) == 0, nil
}

// WaitingOnInput asks RecordWaitingOn to set what a task's activity entry waits on.
type WaitingOnInput struct {
	// AgentID and TaskID name the entry.
	AgentID, TaskID string
	// WaitingOn is the request's message_id; empty clears the wait.
	WaitingOn string
}

// RecordWaitingOn records in the running task's activity entry what its agent waits on, with
// the time it began, or clears it (004 §6). A task without an entry (purged, or admitted while
// the buffer was full, §10.1) has nothing to record.
func (a *Activities) RecordWaitingOn(ctx context.Context, in WaitingOnInput) error {
	e, err := a.Store.ActivityBuffer().SetWaitingOn(ctx, in.AgentID, in.TaskID, in.WaitingOn)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("record waiting_on of %s/%s: %w", in.AgentID, in.TaskID, err)
	}
	a.Sink.Record(ctx, audit.Event{CorrelationID: protocol.TaskCorrelationID(in.TaskID), Actor: protocol.SchedulerID, Type: "activity.waiting_on",
		AgentID: in.AgentID, MessageID: in.WaitingOn, Details: map[string]any{"task_id": in.TaskID, "waiting_on": e.WaitingOn, "waiting_since": e.WaitingSince}})
	return nil
}

// AgentWorktree is what a task that needs a worktree learns of its agent (§16.3): whether it
// is registered, and its binding as the store's projection records it.
type AgentWorktree struct {
	// Registered is false once the agent deregistered.
	Registered bool
	// State is the binding's §16.1 state; UNBOUND when none is recorded.
	State string
	// RepoID, WorktreeID and Branch are where the agent works now; empty when not bound.
	RepoID, WorktreeID, Branch string `json:",omitempty"`
	// Reason is the §16.3 reason of the last failed bind while BIND_FAILED.
	Reason string `json:",omitempty"`
}

// AgentWorktreeOf reads the agent's registration and worktree binding (store.Worktrees,
// written by workflow worktree/<agent_id> on every transition).
func (a *Activities) AgentWorktreeOf(ctx context.Context, agentID string) (AgentWorktree, error) {
	_, err := a.Store.Registry().GetAgent(ctx, agentID)
	if errors.Is(err, store.ErrNotFound) {
		return AgentWorktree{State: worktree.StateUnbound.String()}, nil
	}
	if err != nil {
		return AgentWorktree{}, fmt.Errorf("look up %s: %w", agentID, err)
	}
	b, err := a.Store.Worktrees().GetBinding(ctx, agentID)
	if errors.Is(err, store.ErrNotFound) {
		return AgentWorktree{Registered: true, State: worktree.StateUnbound.String()}, nil
	}
	if err != nil {
		return AgentWorktree{}, fmt.Errorf("look up the worktree binding of %s: %w", agentID, err)
	}
	return AgentWorktree{Registered: true, State: b.State, RepoID: b.RepoID, WorktreeID: b.WorktreeID, Branch: b.Branch, Reason: b.Reason}, nil
}

// TaskHeldInput asks TaskHeld whether an agent's lifecycle holds a task.
type TaskHeldInput struct {
	// AgentWorkflowID is the agent's lifecycle workflow; Query is its query that answers
	// with the running task ("Running") and the queue ("Queue").
	AgentWorkflowID, Query string
	// TaskID is the task.
	TaskID string
}

// TaskHeld reports whether the agent's lifecycle runs the task or has it queued: how a task
// workflow that has not heard from its agent for a while learns that it was queued. A
// lifecycle that is not running holds nothing.
func (a *Activities) TaskHeld(ctx context.Context, in TaskHeldInput) (bool, error) {
	if a.Temporal == nil {
		return false, temporal.NewNonRetryableApplicationError("the worker has no Temporal client", "internal_error", nil)
	}
	v, err := a.Temporal.QueryWorkflow(ctx, in.AgentWorkflowID, "", in.Query)
	var gone *serviceerror.NotFound
	if errors.As(err, &gone) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("ask %s about task %s: %w", in.AgentWorkflowID, in.TaskID, err)
	}
	var st struct {
		Running string
		Queue   []string
	}
	if err := v.Get(&st); err != nil {
		return false, fmt.Errorf("read %s's answer: %w", in.AgentWorkflowID, err)
	}
	return st.Running == in.TaskID || slices.Contains(st.Queue, in.TaskID), nil
}
