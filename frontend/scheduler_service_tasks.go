package frontend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/scheduling"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/taskadmission"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// needsWorktreeOf reads wire.NeedsWorktreeKey: absent, "false" or "0" is false; "true"
// or "1" is true; anything else, or the key given twice, is validation_error.
func needsWorktreeOf(ctx context.Context) (bool, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	v, perr := scheduling.ParseFlag(wire.NeedsWorktreeKey, md.Get(wire.NeedsWorktreeKey))
	if perr != nil {
		return false, perr
	}
	return v, nil
}

// taskInput validates a SubmitTaskRequest (scheduling.ValidateSubmit, within the payload
// limit) and its metadata, and is the task workflow's input.
func (sc *schedulerService) taskInput(ctx context.Context, req *schedulerpb.SubmitTaskRequest) (workflows.TaskInput, error) {
	lim := protocol.DefaultMaxPayloadBytes
	if sc.s.router != nil {
		lim = sc.s.router.Config().MaxPayloadBytes
	}
	if perr := scheduling.ValidateSubmit(req, lim); perr != nil {
		return workflows.TaskInput{}, perr
	}
	needsWorktree, err := needsWorktreeOf(ctx)
	if err != nil {
		return workflows.TaskInput{}, err
	}
	return workflows.TaskInput{TaskID: req.GetTaskId(), AgentID: req.GetAgentId(), Priority: req.GetPriority(),
		Params: req.GetParams(), ContentType: req.GetContentType(), Scope: req.GetScope(), SubmittedAt: time.Now().UTC(),
		NeedsWorktree: needsWorktree, Revision: workflows.TaskRevisionCurrent}, nil
}

// SubmitTask submits a task (§7.1): it starts the task's workflow task/<task_id> and waits for
// its admission (§9): accepted (queued at the agent by priority, then FIFO), accepted but held
// by max_parallel_instances or a conflict awaiting HITL (the reason says so), or not accepted
// (unknown agent, shutting down, duplicate job awaiting HITL authorization, or a task_id
// already used: task_ids are unique). A task for an agent that is not registered is refused
// with no_route before anything is started, so the task_id stays free for a later
// submission. A task marked with wire.NeedsWorktreeKey is admitted by its workflow, which
// holds it (accepted, WAITING, the reason saying why) while the agent is not bound (§16.3).
func (sc *schedulerService) SubmitTask(ctx context.Context, req *schedulerpb.SubmitTaskRequest) (*schedulerpb.SubmitTaskResponse, error) {
	in, err := sc.taskInput(ctx, req)
	if err != nil {
		return nil, err
	}
	adm, err := sc.submit(ctx, in)
	var dup *duplicateTaskError
	if errors.As(err, &dup) {
		return &schedulerpb.SubmitTaskResponse{Accepted: false,
			Reason: fmt.Sprintf("duplicate_detected: task_id %q was already submitted; task ids are unique", in.TaskID)}, nil
	}
	if err != nil {
		return nil, err
	}
	details := map[string]any{"task_id": in.TaskID, "priority": in.Priority, "accepted": adm.Accepted, "state": adm.State, "reason": adm.Reason}
	if in.NeedsWorktree {
		details["needs_worktree"] = true
	}
	sc.s.sink.Record(ctx, audit.Event{CorrelationID: protocol.TaskCorrelationID(in.TaskID), Actor: protocol.SchedulerID, Type: "task.submitted",
		AgentID: in.AgentID, Details: details})
	return &schedulerpb.SubmitTaskResponse{Accepted: adm.Accepted, Reason: adm.Reason}, nil
}

// submit admits a validated task by the path that suits it, after checking its agent is
// registered.
func (sc *schedulerService) submit(ctx context.Context, in workflows.TaskInput) (workflows.TaskAdmission, error) {
	adm, err := sc.registered(ctx, in.AgentID)
	switch {
	case err != nil:
		return adm, err
	case !adm.Accepted:
		return adm, nil // nothing started: a retry is a new submission, not a duplicate of this one
	case in.NeedsWorktree:
		// The task workflow checks the agent's binding before admission and holds the task
		// while the agent is not bound (§16.3): the fast path would admit and queue it here.
		return sc.submitInWorkflow(ctx, in)
	case sc.s.router != nil:
		return sc.submitFast(ctx, in)
	}
	return sc.submitInWorkflow(ctx, in)
}

// registered checks that agentID is registered before a task workflow is started for it:
// accepted when it is, else the no_route refusal (docs/scheduler.md). Routing's registry
// cache answers when there is a router; it caches only agents it found, so a registration is
// seen at once, and an agent deregistered meanwhile is refused by admission itself.
func (sc *schedulerService) registered(ctx context.Context, agentID string) (workflows.TaskAdmission, error) {
	var err error
	if sc.s.router != nil {
		_, err = sc.s.router.Agent(ctx, agentID)
	} else {
		_, err = sc.s.store.Registry().GetAgent(ctx, agentID)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return workflows.TaskAdmission{Accepted: false, State: workflows.TaskRejected,
			Reason: fmt.Sprintf("no_route: agent %q is not registered; register it (RegistryService.RegisterAgent) and submit the task again", agentID)}, nil
	case err != nil:
		if ctx.Err() != nil {
			return workflows.TaskAdmission{}, status.FromContextError(ctx.Err()).Err()
		}
		return workflows.TaskAdmission{}, failed("registry lookup", err)
	}
	return workflows.TaskAdmission{Accepted: true}, nil
}

// duplicateTaskError reports a task_id that names an existing task workflow.
type duplicateTaskError struct{}

func (*duplicateTaskError) Error() string { return "task_id already used" }

func (sc *schedulerService) taskStartOptions(in workflows.TaskInput) client.StartWorkflowOptions {
	return workflows.TaskStartOptions(in, sc.s.cfg.TaskQueue)
}

// submitFast is SubmitTask's usual path, one workflow hop shorter than letting the task
// workflow admit the task (which matters for preemption latency): start the task workflow,
// admit the task here with the same activity code, queue an admitted task at the agent's
// lifecycle workflow directly, and tell the task workflow how it went. Anything but a plain
// admission (HITL, waiting for a limit) is handed to the task workflow, whose answer is
// awaited as in submitInWorkflow. If this process dies half way, the task workflow asks the
// agent's lifecycle after workflows.FrontendAdmitWait whether it holds the task (it learns
// it from the agent's first event for it too) and otherwise admits the task itself; the
// agent ignores a repeated enqueue.
func (sc *schedulerService) submitFast(ctx context.Context, in workflows.TaskInput) (workflows.TaskAdmission, error) {
	in.FrontendAdmits = true
	tc := sc.s.temporal
	// The task's workflow starts while admission's checks run: neither needs the other, so
	// the agent hears of the task after the slower of the two rather than their sum. The
	// checks only read; the activity entry is created once the start succeeded, so a refused
	// start (a task_id used before) leaves nothing behind.
	started := make(chan error, 1)
	go func() {
		_, err := tc.ExecuteWorkflow(ctx, sc.taskStartOptions(in), workflows.TaskWorkflow, in)
		started <- err
	}()
	adm := &taskadmission.Admitter{Store: sc.s.store, Sink: sc.s.sink, Policy: sc.s.cfg.SchedulerPolicy}
	prep, err := adm.Prepare(ctx, workflows.AdmitInput(in, ""), func(agentType string) string {
		return taskadmission.JobKey(agentType, in.Params, in.ContentType, in.Scope)
	})
	if serr := <-started; serr != nil {
		if classify(serr) == temporalAlreadyStarted {
			return workflows.TaskAdmission{}, &duplicateTaskError{}
		}
		return workflows.TaskAdmission{}, temporalUnavailable("start the task", serr)
	}
	var res taskadmission.Result
	if err == nil {
		res, err = prep.Commit(ctx)
	}
	wid := workflows.TaskWorkflowID(in.TaskID)
	report := func(a workflows.TaskAdmitted) error {
		if err := tc.SignalWorkflow(ctx, wid, "", workflows.TaskAdmittedSignal, a); err != nil {
			return temporalUnavailable("report the task's admission", err)
		}
		return nil
	}
	switch {
	case err != nil:
		// The store failed: the workflow admits (or rejects) the task itself.
		if rerr := report(workflows.TaskAdmitted{}); rerr != nil {
			return workflows.TaskAdmission{}, rerr
		}
	case res.Verdict == taskadmission.OK:
		err := sc.enqueue(ctx, in)
		if err != nil {
			if rerr := report(workflows.TaskAdmitted{EnqueueError: fmt.Sprintf("agent %s has no running lifecycle: %v", in.AgentID, err)}); rerr != nil {
				return workflows.TaskAdmission{}, rerr
			}
			return workflows.TaskAdmission{Accepted: false, State: workflows.TaskRejected, Reason: fmt.Sprintf("no_route: agent %s has no running lifecycle", in.AgentID)}, nil
		}
		// Told at once, not left to the agent's first event: a task queued behind a long one
		// would show ADMITTING until its agent gets to it. SubmitTask does not wait for it:
		// the task is queued already, and should the signal fail, the task workflow learns
		// it from its agent's first event or asks the agent's lifecycle
		// (workflows.FrontendAdmitWait).
		go func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := tc.SignalWorkflow(rctx, wid, "", workflows.TaskAdmittedSignal, workflows.TaskAdmitted{Enqueued: true}); err != nil {
				sc.s.log.Warn("task queued; its workflow learns it from its agent instead", "task_id", in.TaskID, "error", err)
			}
		}()
		reason := "queued"
		if res.NoActivityEntry {
			reason = "queued; " + res.Reason
		}
		return workflows.TaskAdmission{Accepted: true, State: workflows.TaskQueued, Reason: reason}, nil
	case res.Verdict == taskadmission.Reject:
		// The answer is known here; the workflow, told the same verdict, rejects the task and
		// closes, and an update sent to it now could find it closed.
		if err := report(workflows.TaskAdmitted{Result: &res}); err != nil {
			return workflows.TaskAdmission{}, err
		}
		return workflows.TaskAdmission{Accepted: false, State: workflows.TaskRejected, Reason: res.Reason}, nil
	default:
		if err := report(workflows.TaskAdmitted{Result: &res}); err != nil {
			return workflows.TaskAdmission{}, err
		}
	}
	ans, err := update[workflows.TaskAdmission](ctx, tc, client.UpdateWorkflowOptions{WorkflowID: wid, UpdateName: workflows.TaskAdmissionUpdate})
	if err != nil {
		return closedAdmission(ctx, tc, wid, err)
	}
	return ans, nil
}

// enqueue queues an admitted task at its agent's lifecycle by AgentTaskEnqueueSignal. Not by
// the update of the same name: a lifecycle whose worker dies after taking an update can
// dispatch differently when its workflow task is retried, which reuses a CONTROL message_id
// for another task (see the task workflow's enqueue). Its error is the signal's: no running
// lifecycle.
func (sc *schedulerService) enqueue(ctx context.Context, in workflows.TaskInput) error {
	return sc.s.temporal.SignalWorkflow(ctx, workflows.AgentWorkflowID(in.AgentID), "", workflows.AgentTaskEnqueueSignal, workflows.QueuedTaskOf(in))
}

// closedAdmission answers SubmitTask when the task-admission update failed with updateErr.
// A task workflow that rejects the task (an agent deregistered meanwhile, say) closes at
// once, and an update it had not completed, or one that arrives after, fails ("workflow
// update was aborted by closing workflow"): the task's answer is then its result, which holds
// the rejection. Only a task that is still running, or unreadable, leaves the failure, as
// Unavailable.
func closedAdmission(ctx context.Context, tc client.Client, wid string, updateErr error) (workflows.TaskAdmission, error) {
	if ctx.Err() != nil {
		return workflows.TaskAdmission{}, status.FromContextError(ctx.Err()).Err()
	}
	d, err := tc.DescribeWorkflowExecution(ctx, wid, "")
	// A REJECTED task completed its run before, and fails it now (workflows.TaskOutcome).
	if s := d.GetWorkflowExecutionInfo().GetStatus(); err != nil || s != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED && s != enums.WORKFLOW_EXECUTION_STATUS_FAILED {
		return workflows.TaskAdmission{}, temporalUnavailable("wait for the task's admission", updateErr)
	}
	var st workflows.TaskStatus
	getErr := tc.GetWorkflow(ctx, wid, d.GetWorkflowExecutionInfo().GetExecution().GetRunId()).Get(ctx, &st)
	st, ok := workflows.TaskOutcome(st, getErr)
	if !ok {
		return workflows.TaskAdmission{}, temporalUnavailable("read the task's outcome", getErr)
	}
	return workflows.TaskAdmission{Accepted: st.State != workflows.TaskRejected, State: st.State, Reason: st.Reason}, nil
}

// submitInWorkflow starts the task workflow with update-with-start and returns the answer of
// its admission; the workflow admits the task.
func (sc *schedulerService) submitInWorkflow(ctx context.Context, in workflows.TaskInput) (workflows.TaskAdmission, error) {
	opts := sc.taskStartOptions(in)
	adm, err := updateWithStart[workflows.TaskAdmission](ctx, sc.s.temporal, opts, workflows.TaskWorkflow, in,
		client.UpdateWorkflowOptions{UpdateName: workflows.TaskAdmissionUpdate})
	switch {
	case err == nil:
		return adm, nil
	case classify(err) == temporalAlreadyStarted:
		return workflows.TaskAdmission{}, &duplicateTaskError{}
	}
	return closedAdmission(ctx, sc.s.temporal, opts.ID, err)
}

// RequestPreemption asks the agent's scheduler to preempt the running task at its next safe
// point (§7.2). enqueued is true when the request reached the agent's lifecycle; the
// preemption happens only if task_id (or, when empty, any task) is running then.
func (sc *schedulerService) RequestPreemption(ctx context.Context, req *schedulerpb.PreemptRequest) (*schedulerpb.PreemptResponse, error) {
	if perr := protocol.ValidateAgentID(req.GetAgentId()); perr != nil {
		return nil, perr
	}
	err := sc.s.temporal.SignalWorkflow(ctx, workflows.AgentWorkflowID(req.GetAgentId()), "", workflows.AgentPreemptSignal,
		workflows.PreemptionRequest{TaskID: req.GetTaskId(), Reason: req.GetReason()})
	if classify(err) == temporalNotFound {
		return nil, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "agent %q has no running lifecycle", req.GetAgentId())
	}
	if err != nil {
		return nil, temporalUnavailable("signal the agent's scheduler", err)
	}
	sc.s.sink.Record(ctx, audit.Event{CorrelationID: protocol.TaskCorrelationID(req.GetTaskId()), Actor: protocol.SchedulerID, Type: "task.preemption_requested",
		AgentID: req.GetAgentId(), Details: map[string]any{"task_id": req.GetTaskId(), "reason": req.GetReason()}})
	return &schedulerpb.PreemptResponse{Enqueued: true}, nil
}
