// Package worker is the one place that registers every SW4RM workflow and activity with a
// Temporal worker (the tool runners of the providers' task queues included), and that makes
// sure the namespace knows SW4RM's search attributes.
package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// Register adds every workflow and the activities to a worker (or a test environment).
func Register(r sdkworker.Registry, acts *activities.Activities) {
	RegisterWorkflows(r)
	r.RegisterActivity(acts)
}

// RegisterWorkflows adds every workflow, and nothing else, to r — a worker or the replayer
// that checks recorded histories for determinism.
func RegisterWorkflows(r sdkworker.WorkflowRegistry) {
	r.RegisterWorkflow(workflows.AgentLifecycle)
	r.RegisterWorkflow(workflows.DAGRun)
	r.RegisterWorkflow(workflows.HandoffWorkflow)
	r.RegisterWorkflow(workflows.Negotiation)
	r.RegisterWorkflowWithOptions(workflows.HitlWait, workflow.RegisterOptions{Name: hitl.WorkflowType})
	r.RegisterWorkflow(workflows.RoomCoordinator)
	r.RegisterWorkflow(workflows.TaskWorkflow)
	r.RegisterWorkflow(workflows.ToolCall)
	r.RegisterWorkflow(workflows.WorktreeWorkflow)
}

// ToolWorkerOptions are the options of the worker that polls one tool provider's task queue
// (workflows.ToolTaskQueue): heartbeats reach the server at once rather than throttled to most
// of the heartbeat timeout, so that a cancel reaches the running tool within a heartbeat
// (§18.6).
func ToolWorkerOptions() sdkworker.Options {
	return sdkworker.Options{
		MaxHeartbeatThrottleInterval:     activities.ToolHeartbeatEvery,
		DefaultHeartbeatThrottleInterval: activities.ToolHeartbeatEvery,
	}
}

// RegisterToolRunner adds the activity that runs one provider's tool calls to r, the worker
// polling that provider's task queue (created with ToolWorkerOptions). Each provider has a
// worker of its own, so tool workers scale per provider and a slow provider never starves
// another's calls (§18).
func RegisterToolRunner(r sdkworker.ActivityRegistry, runner *activities.ToolRunner) {
	r.RegisterActivity(runner)
}

// EnsureSearchAttributes registers SW4RM's custom search attributes in the namespace if they
// are missing, so workflows can be started with them and filtered in the Temporal UI. It is
// idempotent and safe to run from every process at start.
func EnsureSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	// A Temporal server that is starting, or a busy dev server, may fail these calls for a
	// moment (Unavailable, or an interrupted query surfacing as Internal); sw4rm starting a
	// few seconds later beats sw4rm not starting.
	delay := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := ensureSearchAttributes(ctx, c, namespace)
		if err == nil || attempt == searchAttributeAttempts || !transient(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// searchAttributeAttempts bounds EnsureSearchAttributes' retries (about 15 s in all).
const searchAttributeAttempts = 10

// transient reports whether a Temporal error may go away by itself.
func transient(err error) bool {
	var unavailable *serviceerror.Unavailable
	var internal *serviceerror.Internal
	var deadline *serviceerror.DeadlineExceeded
	var busy *serviceerror.ResourceExhausted
	return errors.As(err, &unavailable) || errors.As(err, &internal) || errors.As(err, &deadline) || errors.As(err, &busy)
}

func ensureSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	existing, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("list search attributes: %w", err)
	}
	missing := workflows.SearchAttributes()
	for name := range existing.GetCustomAttributes() {
		delete(missing, name)
	}
	if len(missing) == 0 {
		return nil
	}
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: namespace, SearchAttributes: missing,
	})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("add search attributes: %w", err)
	}
	return nil
}
