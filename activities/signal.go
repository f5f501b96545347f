package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
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
	err := a.Temporal.SignalWorkflow(ctx, in.WorkflowID, "", in.Signal, in.Arg)
	var gone *serviceerror.NotFound
	if errors.As(err, &gone) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("signal %s to %s: %w", in.Signal, in.WorkflowID, err)
	}
	return nil
}
