package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// SignalInput asks SignalWorkflow to signal one workflow.
type SignalInput struct {
	// WorkflowID names the workflow (its current run).
	WorkflowID string
	// Signal is the signal's name.
	Signal string
	// Arg is the signal's payload, already encoded as JSON by the sending workflow (the
	// payload types live in the workflows package, which imports this one).
	Arg json.RawMessage
	// MustExist makes a workflow that is not running a non-retryable "no_route" failure
	// rather than nothing to do.
	MustExist bool `json:",omitempty"`
	// Update, when set, names an update that carries the same Arg: it is sent first, and
	// the signal only if the update fails (a worker that does not know it, or a run that
	// refused it). Temporal dispatches an update without writing it to history first, so
	// the workflow hears of it one persistence write sooner.
	Update string `json:",omitempty"`
	// UpdateID identifies the update, so that the activity's retries send one update.
	UpdateID string `json:",omitempty"`
	// UpdateWait bounds the wait for the update, after which the signal is sent instead:
	// an update completes only once a worker runs the workflow, and the workflow's worker
	// may just have died, while a signal is durable the moment the server takes it. Zero
	// means no bound but the activity's own.
	UpdateWait time.Duration `json:",omitempty"`
}

// SignalWorkflow signals a workflow from a local activity. The agent lifecycle reports task
// transitions this way rather than with SignalExternalWorkflow: an external signal's
// completion is a history event that schedules one more workflow task, and while that task
// runs the lifecycle cannot react to an urgent task (§7.2 preemption latency). A workflow
// that is gone has nothing left to learn, so that is not an error.
func (a *Activities) SignalWorkflow(ctx context.Context, in SignalInput) error {
	if a.Temporal == nil {
		return temporal.NewNonRetryableApplicationError("the worker has no Temporal client", "internal_error", nil)
	}
	if in.Update != "" {
		uctx, cancel := ctx, context.CancelFunc(func() {})
		if in.UpdateWait > 0 {
			uctx, cancel = context.WithTimeout(ctx, in.UpdateWait)
		}
		h, err := a.Temporal.UpdateWorkflow(uctx, client.UpdateWorkflowOptions{WorkflowID: in.WorkflowID, UpdateName: in.Update,
			UpdateID: in.UpdateID, Args: []any{in.Arg}, WaitForStage: client.WorkflowUpdateStageCompleted})
		if err == nil {
			err = h.Get(uctx, nil)
		}
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
	}
	err := a.Temporal.SignalWorkflow(ctx, in.WorkflowID, "", in.Signal, in.Arg)
	var gone *serviceerror.NotFound
	if errors.As(err, &gone) {
		if in.MustExist {
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s is not running", in.WorkflowID), "no_route", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("signal %s to %s: %w", in.Signal, in.WorkflowID, err)
	}
	return nil
}

// StepReport is what one step of an agent's lifecycle has to record and tell: the agent's
// transitions in order, and the task events for the task workflows.
type StepReport struct {
	// States are the step's agent transitions, in the order they were taken.
	States []AgentStateInput `json:",omitempty"`
	// Signals are the step's task events, in the order they were reported.
	Signals []SignalInput `json:",omitempty"`
}

// ReportStep records a lifecycle step's transitions and sends its task events, in one local
// activity: one history marker and one worker hop per step instead of one per transition and
// one per event. Every transition is audited; the registry projection is written once, with
// the step's last state, since the states before it within one step were never observable.
// The registry write and the signals go out together: the task workflows waiting for their
// events need not wait for the agent's projection, which nothing they do reads.
func (a *Activities) ReportStep(ctx context.Context, in StepReport) error {
	recorded := make(chan error, 1)
	go func() { recorded <- a.recordStates(ctx, in.States) }()
	var err error
	for _, s := range in.Signals {
		if err = a.SignalWorkflow(ctx, s); err != nil {
			break
		}
	}
	return errors.Join(<-recorded, err)
}

// recordStates writes a step's last state to the registry projection and audits every
// transition of the step.
func (a *Activities) recordStates(ctx context.Context, states []AgentStateInput) error {
	n := len(states)
	if n == 0 {
		return nil
	}
	if last := states[n-1]; !last.Final {
		if err := a.Store.Registry().SetAgentState(ctx, last.AgentID, last.To); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("record state of %s: %w", last.AgentID, err)
		}
	}
	for _, s := range states {
		a.auditAgentState(ctx, s)
	}
	return nil
}
