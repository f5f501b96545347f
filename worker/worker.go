// Package worker is the one place that registers every SW4RM workflow and activity with a
// Temporal worker (the tool runners of the providers' task queues included), and that makes
// sure the namespace knows SW4RM's search attributes.
package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
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
// are missing, so workflows can be started with them and filtered in the Temporal UI, and
// then waits until the frontend accepts them (awaitSearchAttributes). It is idempotent and
// safe to run from every process at start.
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
	return awaitSearchAttributes(ctx, c, namespace, missing)
}

// searchAttributeSettle bounds the wait for newly added search attributes to be usable.
const searchAttributeSettle = 15 * time.Second

// awaitSearchAttributes waits until the frontend accepts a query on every attribute just
// added. A cluster's frontend maps them through its namespace cache, refreshed every few
// seconds (system.namespaceCacheRefreshInterval): until then it refuses a workflow started
// with one ("no mapping defined for search attribute"), and this process would start such
// workflows at once. The dev server hides the delay by reading through its cache
// (system.forceSearchAttributesCacheRefreshOnRead, a testing setting). A count query is the
// probe: refused by the same mapping, and without side effects.
func awaitSearchAttributes(ctx context.Context, c client.Client, namespace string, added map[string]enums.IndexedValueType) error {
	query := searchAttributesProbe(added)
	ctx, cancel := context.WithTimeout(ctx, searchAttributeSettle)
	defer cancel()
	for {
		_, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: namespace, Query: query})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("search attributes added but not yet usable after %s: %w", searchAttributeSettle, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// searchAttributesProbe is a visibility query that names every attribute of attrs, each
// compared with a value of its type.
func searchAttributesProbe(attrs map[string]enums.IndexedValueType) string {
	terms := make([]string, 0, len(attrs))
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		value := "'probe'"
		switch attrs[name] {
		case enums.INDEXED_VALUE_TYPE_BOOL:
			value = "true"
		case enums.INDEXED_VALUE_TYPE_INT, enums.INDEXED_VALUE_TYPE_DOUBLE:
			value = "0"
		case enums.INDEXED_VALUE_TYPE_DATETIME:
			value = "'2000-01-01T00:00:00Z'"
		}
		terms = append(terms, name+" = "+value)
	}
	return strings.Join(terms, " OR ")
}
