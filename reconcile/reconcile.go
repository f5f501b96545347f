// Package reconcile is the scheduler's reconciliation of the activity buffer (§10: "The
// Scheduler MUST reconcile and purge entries for tasks in COMPLETED, FAILED, or unknown
// states").
//
// A task's workflow (task/<task_id>) closes its activity entry as it ends. An entry outlives
// its task when that never happens: the workflow was terminated or timed out, the closing
// local activity failed for good, or the workflow's history is gone. Such an orphaned entry
// says a task is in flight that is not, and admission reads the buffer: it counts against
// the §10.1 limits and max_parallel_instances (§9.1), makes an identical job a duplicate
// (§9.2), and a task serialized behind it waits for ever.
//
// Every worker runs a Reconciler. Each sweep asks Temporal about every active entry older
// than the grace period and moves the entries whose workflow has closed, or is unknown, to
// the history with the status Temporal's answer supports (Decide), auditing each as
// activity.reconciled. Several workers may sweep at once: store.ActivityBuffer.Complete
// closes an entry for exactly one of them, and only that one audits it.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// Defaults of the reconciliation's settings (SW4RM_ACTIVITY_RECONCILE_INTERVAL and
// SW4RM_ACTIVITY_RECONCILE_GRACE).
const (
	// DefaultInterval is how often a worker sweeps the activity buffer.
	DefaultInterval = time.Minute
	// DefaultGrace is how old an entry must be before a sweep asks about its task.
	DefaultGrace = 5 * time.Minute
)

// AuditType is the audit event of a reconciled entry (§19).
const AuditType = "activity.reconciled"

const (
	// listLimit bounds the entries one sweep reads, oldest first: the default total limit of
	// §10.1, so that a buffer within it is read whole.
	listLimit = store.DefaultActivityMaxActive
	// describers bounds the Temporal calls one sweep has in flight.
	describers = 8
)

// Outcome is what Temporal knows of a task's workflow.
type Outcome struct {
	// Known is false when Temporal has no workflow task/<task_id>: it never started, or its
	// history is past the namespace's retention.
	Known bool
	// Status is the status of the workflow's latest run.
	Status enums.WorkflowExecutionStatus
	// RunID names that run.
	RunID string
	// TaskState is the task's final state (workflows.TaskStatus.State) when the run completed
	// and its result was read, or failed with the status as its error's details (a task
	// FAILED or REJECTED, workflows.TaskOutcome).
	TaskState string
	// ResultError says why a completed run's result could not be read.
	ResultError string
}

// StatusName names the workflow's status in audit events: NotFound when it is unknown, else
// Temporal's name (Running, Completed, Terminated, …).
func (o Outcome) StatusName() string {
	if !o.Known {
		return "NotFound"
	}
	return o.Status.String()
}

// Verdict is what a sweep does with one entry.
type Verdict struct {
	// Close is true when the entry moves to the history with Status.
	Close bool
	// Status is the history status: what Temporal's answer supports about how the task ended.
	Status store.ActivityStatus
	// Why explains the verdict, for the audit event.
	Why string
}

// Decide is the reconciliation's rule: an entry whose task's workflow still runs is left
// alone (the workflow closes it as the task ends); one whose workflow has closed is closed
// with the truth Temporal holds — completed or failed as the task's own result says when the
// workflow completed, failed when it failed, timed out or was terminated, cancelled when it
// was cancelled — and one Temporal knows nothing of, or whose result cannot be read, is
// closed as unknown (§10's "unknown states").
func Decide(o Outcome) Verdict {
	if !o.Known {
		return Verdict{Close: true, Status: store.ActivityUnknown,
			Why: "Temporal knows no task workflow: it never started, or its history is past the namespace's retention"}
	}
	switch o.Status {
	case enums.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		switch o.TaskState {
		case workflows.TaskCompleted:
			return Verdict{Close: true, Status: store.ActivityCompleted, Why: "the task workflow completed with the task COMPLETED but left its entry open"}
		case workflows.TaskFailed, workflows.TaskRejected:
			return Verdict{Close: true, Status: store.ActivityFailed, Why: "the task workflow completed with the task " + o.TaskState + " but left its entry open"}
		}
		why := "the task workflow completed, but its result names no final task state"
		if o.ResultError != "" {
			why = "the task workflow completed, but its result could not be read: " + o.ResultError
		}
		return Verdict{Close: true, Status: store.ActivityUnknown, Why: why}
	case enums.WORKFLOW_EXECUTION_STATUS_FAILED:
		if o.TaskState != "" {
			return Verdict{Close: true, Status: store.ActivityFailed, Why: "the task workflow failed with the task " + o.TaskState + " but left its entry open"}
		}
		return Verdict{Close: true, Status: store.ActivityFailed, Why: "the task workflow failed"}
	case enums.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		return Verdict{Close: true, Status: store.ActivityFailed, Why: "the task workflow timed out"}
	case enums.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		return Verdict{Close: true, Status: store.ActivityFailed, Why: "the task workflow was terminated before the task ended"}
	case enums.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return Verdict{Close: true, Status: store.ActivityCancelled, Why: "the task workflow was cancelled"}
	}
	// Running, continued as new (the described run is the latest, so this is a race with its
	// successor's start) or a status this code does not know: the task may still be in flight.
	return Verdict{Why: "the task workflow is " + o.StatusName()}
}

// Oracle tells a sweep what Temporal knows of a task.
type Oracle interface {
	// TaskOutcome describes the task's workflow. An error means nothing could be learnt
	// (Temporal unreachable, say): the entry is left for the next sweep.
	TaskOutcome(ctx context.Context, taskID string) (Outcome, error)
}

// TemporalOracle is the Oracle over a Temporal client: DescribeWorkflowExecution of
// task/<task_id>, and for a completed run its result.
func TemporalOracle(c client.Client) Oracle { return temporalOracle{c} }

type temporalOracle struct{ c client.Client }

// TaskOutcome implements Oracle.
func (o temporalOracle) TaskOutcome(ctx context.Context, taskID string) (Outcome, error) {
	wid := workflows.TaskWorkflowID(taskID)
	d, err := o.c.DescribeWorkflowExecution(ctx, wid, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return Outcome{}, nil
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("describe %s: %w", wid, err)
	}
	info := d.GetWorkflowExecutionInfo()
	out := Outcome{Known: true, Status: info.GetStatus(), RunID: info.GetExecution().GetRunId()}
	if out.Status != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED && out.Status != enums.WORKFLOW_EXECUTION_STATUS_FAILED {
		return out, nil
	}
	var st workflows.TaskStatus
	err = o.c.GetWorkflow(ctx, wid, out.RunID).Get(ctx, &st)
	if out.Status == enums.WORKFLOW_EXECUTION_STATUS_FAILED {
		// A task that FAILED or was REJECTED fails its run with its status as the error's
		// details (workflows.TaskOutcome); any other failure has no task state to tell.
		if st, ok := workflows.TaskOutcome(st, err); ok {
			out.TaskState = st.State
		}
		return out, nil
	}
	var svc interface{ Status() *status.Status }
	switch {
	case errors.As(err, &nf):
		return Outcome{}, nil // its history went between the two calls
	case errors.As(err, &svc) || ctx.Err() != nil:
		return Outcome{}, fmt.Errorf("read the result of %s: %w", wid, err)
	case err != nil:
		out.ResultError = err.Error() // a result that does not decode will not decode next time
	}
	out.TaskState = st.State
	return out, nil
}

// Config is a Reconciler's schedule.
type Config struct {
	// Interval is the time between sweeps; zero means DefaultInterval.
	Interval time.Duration
	// Grace is how old an entry must be before a sweep asks about its task; zero means
	// DefaultGrace. It spares the entries of tasks just admitted, and entries written without
	// a task workflow by embedding code, the round trips.
	Grace time.Duration
}

func (c Config) effective() Config {
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	return c
}

// Reconciler sweeps one store's activity buffer (see the package comment).
type Reconciler struct {
	ab     store.ActivityBuffer
	oracle Oracle
	sink   *audit.Sink
	cfg    Config
	log    *slog.Logger
	now    func() time.Time
}

// New returns a Reconciler of st's activity buffer that asks oracle and audits to sink.
func New(st store.Store, oracle Oracle, sink *audit.Sink, cfg Config, log *slog.Logger) *Reconciler {
	return &Reconciler{ab: st.ActivityBuffer(), oracle: oracle, sink: sink, cfg: cfg.effective(), log: log, now: time.Now}
}

// Reconciled is an entry a sweep closed.
type Reconciled struct {
	// Entry is the entry as the history holds it.
	Entry store.ActivityEntry
	// Outcome is what Temporal said of its task.
	Outcome Outcome
	// Verdict is the status it was closed with, and why.
	Verdict Verdict
}

// Run sweeps every Interval until ctx ends. A failed sweep is logged; the next one tries
// again.
func (r *Reconciler) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := r.Sweep(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("activity buffer reconciliation: some entries were not checked; the next sweep tries again",
				"error", err, "interval", r.cfg.Interval.String())
		}
	}
}

// Sweep runs one sweep: every active entry older than the grace period (the oldest listLimit
// entries of the buffer) whose task Decide closes moves to the history, audited. It returns
// the entries this sweep closed; the error joins what kept some entries from being checked,
// which stay for the next sweep.
func (r *Reconciler) Sweep(ctx context.Context) ([]Reconciled, error) {
	es, err := r.ab.List(ctx, store.ActivityFilter{Limit: listLimit})
	if err != nil {
		return nil, fmt.Errorf("list the activity buffer: %w", err)
	}
	cutoff := r.now().Add(-r.cfg.Grace)
	var (
		mu   sync.Mutex
		out  []Reconciled
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, describers)
	)
	for _, e := range es {
		if e.CreatedAt.After(cutoff) {
			break // List is ordered by CreatedAt: the rest are younger still
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			rec, ok, err := r.reconcile(ctx, e)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if ok {
				out = append(out, rec)
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// reconcile checks one entry and closes it when Decide says so; ok reports that this call
// closed it (and audited it).
func (r *Reconciler) reconcile(ctx context.Context, e store.ActivityEntry) (Reconciled, bool, error) {
	o, err := r.oracle.TaskOutcome(ctx, e.TaskID)
	if err != nil {
		return Reconciled{}, false, fmt.Errorf("task %s of agent %s: %w", e.TaskID, e.AgentID, err)
	}
	v := Decide(o)
	if !v.Close {
		return Reconciled{}, false, nil
	}
	done, err := r.ab.Complete(ctx, e.AgentID, e.TaskID, v.Status)
	if errors.Is(err, store.ErrNotFound) {
		// Another worker's sweep, the task's own workflow or an operator's PurgeActivity
		// closed it first, and audited that.
		return Reconciled{}, false, nil
	}
	if err != nil {
		return Reconciled{}, false, fmt.Errorf("close the entry of task %s of agent %s: %w", e.TaskID, e.AgentID, err)
	}
	details := map[string]any{
		"task_id": e.TaskID, "workflow_id": workflows.TaskWorkflowID(e.TaskID), "workflow_status": o.StatusName(),
		"before": string(e.Status), "after": string(done.Status), "reason": v.Why,
		"created_at": e.CreatedAt, "grace": r.cfg.Grace.String(),
	}
	if o.RunID != "" {
		details["run_id"] = o.RunID
	}
	if o.TaskState != "" {
		details["task_state"] = o.TaskState
	}
	if e.WaitingOn != "" {
		details["waiting_on"] = e.WaitingOn
	}
	r.sink.Record(ctx, audit.Event{CorrelationID: protocol.TaskCorrelationID(e.TaskID), Actor: protocol.SchedulerID, Type: AuditType,
		AgentID: e.AgentID, Level: slog.LevelWarn, Details: details})
	return Reconciled{Entry: done, Outcome: o, Verdict: v}, true, nil
}
