package workflows

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/jsonform"
	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
	"github.com/sw4rm/sw4rm-temporal/taskadmission"
)

// Names of the task workflow's messages (§7, §9).
const (
	// TaskAdmissionUpdate returns the TaskAdmission once admission has an answer: accepted and
	// queued, queued for a limit, waiting for HITL, or rejected. SubmitTask waits for it.
	TaskAdmissionUpdate = "task-admission"
	// TaskEventSignal carries a TaskEvent from the agent's workflow, which runs the task.
	TaskEventSignal = "task-event"
	// TaskEventsSignal carries TaskEvents: the events one step of the agent's workflow
	// reported for the task, in one signal (QueuedTask.EventBatches).
	TaskEventsSignal = "task-events"
	// TaskStatusQuery returns a TaskStatus.
	TaskStatusQuery = "task-status"
	// TaskAdmittedSignal carries a TaskAdmitted: SubmitTask admitted the task itself (the
	// fast path, one workflow hop shorter) and says how it went.
	TaskAdmittedSignal = "task-admitted"
)

// FrontendAdmitWait is how long a task started with FrontendAdmits waits for
// TaskAdmittedSignal before it runs admission itself (the frontend may have died between
// starting the workflow and admitting the task).
const FrontendAdmitWait = 30 * time.Second

// TaskAdmitted is the payload of TaskAdmittedSignal.
type TaskAdmitted struct {
	// Enqueued is set when the task was admitted and queued at its agent.
	Enqueued bool `json:",omitempty"`
	// Result is admission's verdict when it was not AdmitOK; the workflow takes over from it
	// (HITL, waiting). Nil, without Enqueued, means the workflow admits the task itself.
	Result *taskadmission.Result `json:",omitempty"`
	// EnqueueError says why the admitted task could not be queued at its agent.
	EnqueueError string `json:",omitempty"`
}

// AdmitInput is the admission request for a task, the same from the frontend's fast path
// and from the workflow.
func AdmitInput(in TaskInput, jobKey string) taskadmission.Input {
	return taskadmission.Input{TaskID: in.TaskID, AgentID: in.AgentID, Scope: in.Scope, JobKey: jobKey,
		Description: fmt.Sprintf("task %s (priority %d) scope: %s", in.TaskID, in.Priority, in.Scope)}
}

// QueuedTaskOf is the queue entry of a task. The task workflow of this code takes its events
// in batches, so the entry says so (EventBatches).
func QueuedTaskOf(in TaskInput) QueuedTask {
	return QueuedTask{TaskID: in.TaskID, Priority: in.Priority, Params: in.Params, ContentType: in.ContentType, Scope: in.Scope, SubmittedAt: in.SubmittedAt,
		EventBatches: true}
}

// TaskEvents is the payload of TaskEventsSignal.
type TaskEvents struct {
	// Events are in the order the agent's workflow numbered them.
	Events []TaskEvent
}

// Task states. A task is ADMITTING until admission decides, AWAITING_HITL while a human
// decides a duplicate or a conflict, WAITING while a concurrency limit or a conservative
// conflict resolution holds it back, then QUEUED at its agent, SCHEDULED when the RUN is sent,
// RUNNING, SUSPENDED after yielding to a higher-priority task (§7.2), RUNNING again when
// resumed, and finally COMPLETED, FAILED or REJECTED.
const (
	TaskAdmitting    = "ADMITTING"
	TaskAwaitingHITL = "AWAITING_HITL"
	TaskWaiting      = "WAITING"
	TaskQueued       = "QUEUED"
	TaskScheduled    = "SCHEDULED"
	TaskRunning      = "RUNNING"
	TaskSuspended    = "SUSPENDED"
	TaskCompleted    = "COMPLETED"
	TaskFailed       = "FAILED"
	TaskRejected     = "REJECTED"
)

// TaskTerminal reports whether a task state is final.
func TaskTerminal(state string) bool {
	return state == TaskCompleted || state == TaskFailed || state == TaskRejected
}

// TaskWorkflowID is the workflow ID of a task: "task/<task_id>".
func TaskWorkflowID(taskID string) string { return "task/" + taskID }

// TaskInput starts a task workflow (SchedulerService.SubmitTask).
type TaskInput struct {
	// TaskID and AgentID name the task and the agent that runs it.
	TaskID, AgentID string
	// Priority is -19 (highest) .. 20 (lowest), §7.1.
	Priority int32
	// Params and ContentType are the task's parameters; JSON parameters are JSON in the
	// run's input (jsonform.Bytes).
	Params      jsonform.Bytes `json:",omitempty"`
	ContentType string         `json:",omitempty"`
	// Scope is the task's scope metadata (§9.2), required.
	Scope string
	// SubmittedAt orders tasks of equal priority (FIFO, §7.1); zero means the workflow's start.
	SubmittedAt time.Time `json:",omitzero"`
	// WaitRecheck is how often a task held back by a limit or a serialized conflict checks
	// again; zero means DefaultTaskRecheck.
	WaitRecheck time.Duration `json:",omitempty"`
	// HITLTimeout bounds the HITL waits of admission; zero means the HITL default.
	HITLTimeout time.Duration `json:",omitempty"`
	// FrontendAdmits says SubmitTask admits the task and reports with TaskAdmittedSignal.
	FrontendAdmits bool `json:",omitempty"`
	// Revision is the revision of the task path the run follows, chosen by whoever starts
	// it (TaskRevisionCurrent). It is part of the run's input, so a recorded history
	// replays the path it took, without a version marker: workflow.GetVersion would cost
	// every task run a marker and a search-attribute upsert. Runs recorded before it
	// existed decode it as zero.
	Revision int `json:",omitempty"`
	// NeedsWorktree marks a task that needs its agent's worktree (§16.3): it is held WAITING,
	// before admission, while the agent is UNBOUND or BIND_FAILED, and admitted once the
	// agent is bound (worktree.Eligible). Runs recorded before the field existed decode it as
	// false and take none of its commands, so they replay unchanged.
	NeedsWorktree bool `json:",omitempty"`
}

// Revisions of the task path (TaskInput.Revision).
const (
	// TaskRevisionLean queues the task at its agent by local activity, takes its agent's
	// events in batches (TaskEventsSignal), and a task SubmitTask admits asks its agent's
	// lifecycle before admitting itself when it heard nothing (awaitQueued).
	TaskRevisionLean = 1
	// TaskRevisionAdmitOnce is TaskRevisionLean whose first admission attempt also looks up
	// the agent's type, in one local activity (activities.AdmitNewTask).
	TaskRevisionAdmitOnce = 2
	// TaskRevisionCurrent is the revision new task runs take.
	TaskRevisionCurrent = TaskRevisionAdmitOnce
)

// DefaultTaskRecheck is how often a held-back task re-runs admission.
const DefaultTaskRecheck = 2 * time.Second

// WorktreeRecheckMax bounds the interval at which a task held for its agent's binding
// (§16.3) checks again: the interval starts at the task's WaitRecheck and doubles up to it,
// so a long hold adds a few history events a minute, not dozens, and a bind is seen within
// this long.
const WorktreeRecheckMax = 30 * time.Second

// TaskAdmission is the answer of TaskAdmissionUpdate, returned by SubmitTask.
type TaskAdmission struct {
	// Accepted is true when the task will run (now or after a limit frees up).
	Accepted bool
	// State is the task's state when admission answered.
	State string
	// Reason explains it, with an error_code prefix for rejections and holds.
	Reason string
	// HitlID names the HITL invocation that decides the task, if any.
	HitlID string `json:",omitempty"`
}

// TaskEvent is the payload of TaskEventSignal: the agent workflow's report of a transition.
type TaskEvent struct {
	// State is the task's new state.
	State string
	// Reason explains it (an error_code for failures).
	Reason string `json:",omitempty"`
	// Result is the agent's result (the RUN's FULFILLED note) on completion.
	Result string `json:",omitempty"`
	// ErrorCode is the error_code of a failure.
	ErrorCode commonpb.ErrorCode `json:",omitempty"`
	// Seq numbers the task's events from 1; zero means unordered.
	Seq int64 `json:",omitempty"`
}

// TaskStatus answers TaskStatusQuery and is the workflow's result.
type TaskStatus struct {
	// TaskID and AgentID name the task.
	TaskID, AgentID string
	// Priority is the task's priority.
	Priority int32
	// State is the task's state.
	State string
	// Reason explains the last transition.
	Reason string `json:",omitempty"`
	// Result is the agent's result on completion.
	Result string `json:",omitempty"`
	// ErrorCode is the error_code of a failure or rejection.
	ErrorCode commonpb.ErrorCode `json:",omitempty"`
	// Suspensions counts how often the task yielded to a higher-priority task.
	Suspensions int `json:",omitempty"`
	// HitlIDs are the HITL invocations raised for the task.
	HitlIDs []string `json:",omitempty"`
	// History lists the states the task went through, in order.
	History []string
}

// TaskWorkflow is one task's durable life (§7, §9, §10): admission (the agent accepts tasks;
// no identical job is active unless HITL authorizes it; the agent type's
// max_parallel_instances holds it back with feedback; a scope conflict below the confidence
// threshold goes to HITL with reason CONFLICT, and a conservative serialization waits), then
// queueing at the agent's lifecycle workflow, which orders, runs, preempts and resumes it and
// reports every transition here, and finally the activity entry's completion.
func TaskWorkflow(ctx workflow.Context, in TaskInput) (TaskStatus, error) {
	t := &taskRun{in: in, st: TaskStatus{TaskID: in.TaskID, AgentID: in.AgentID, Priority: in.Priority}}
	st, err := t.run(ctx)
	// A SubmitTask waiting on TaskAdmissionUpdate gets its answer before the run closes,
	// never "update aborted by closing workflow": a run that ends before admission answered
	// answers with how it ended.
	if err != nil {
		t.answer(TaskAdmission{Accepted: false, Reason: "internal_error: the task ended before its admission: " + err.Error()})
	} else {
		t.answer(TaskAdmission{Accepted: TaskTerminal(st.State) && st.State != TaskRejected, Reason: st.Reason})
	}
	if aerr := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); aerr != nil && err == nil {
		err = aerr
	}
	if err != nil {
		return st, err
	}
	// A FAILED or REJECTED task fails the run, so the Temporal UI shows it failed (TaskOutcome).
	return taskEnd(ctx, st)
}

type taskRun struct {
	in        TaskInput
	st        TaskStatus
	admission *TaskAdmission
	jobKey    string
}

func (t *taskRun) set(ctx workflow.Context, state, reason string) {
	t.st.State, t.st.Reason = state, reason
	t.st.History = append(t.st.History, state)
	// The UI shows it as the run's current details: where the task is, and why.
	workflow.SetCurrentDetails(ctx, taskDetails(state, reason))
	workflow.GetLogger(ctx).Info("task state", "task_id", t.in.TaskID, "state", state, "reason", reason)
	// The workflow's metrics handler records nothing while replaying, so each transition
	// counts once however often the history replays; it issues no command.
	mh := workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"state": state})
	mh.Counter(TaskTransitionsMetric).Inc(1)
	if TaskTerminal(state) && !t.in.SubmittedAt.IsZero() {
		mh.Timer(TaskDurationMetric).Record(workflow.Now(ctx).Sub(t.in.SubmittedAt))
	}
}

// Metrics the task workflow records through workflow.GetMetricsHandler, served as
// sw4rm_task_transitions_total{state} and sw4rm_task_duration_seconds{state} (the
// Prometheus exporter adds the suffixes; docs/observability.md, "Metrics").
const (
	// TaskTransitionsMetric counts a task's transitions by the state entered (§7).
	TaskTransitionsMetric = "sw4rm_task_transitions"
	// TaskDurationMetric times a task from its submission to its terminal state.
	TaskDurationMetric = "sw4rm_task_duration"
)

// answer records admission's first answer, which TaskAdmissionUpdate returns.
func (t *taskRun) answer(a TaskAdmission) {
	if t.admission == nil {
		a.State = t.st.State
		t.admission = &a
	}
}

func (t *taskRun) run(ctx workflow.Context) (TaskStatus, error) {
	t.set(ctx, TaskAdmitting, "submitted")
	if err := workflow.SetQueryHandler(ctx, TaskStatusQuery, func() (TaskStatus, error) { return t.st, nil }); err != nil {
		return t.st, err
	}
	if err := workflow.SetUpdateHandler(ctx, TaskAdmissionUpdate, func(ctx workflow.Context) (TaskAdmission, error) {
		if err := workflow.Await(ctx, func() bool { return t.admission != nil }); err != nil {
			return TaskAdmission{}, err
		}
		return *t.admission, nil
	}); err != nil {
		return t.st, err
	}
	if t.in.SubmittedAt.IsZero() {
		t.in.SubmittedAt = workflow.Now(ctx)
	}
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumInterval: 10 * time.Second},
	})

	var (
		first    *taskadmission.Result
		enqueued bool
	)
	var early []TaskEvent
	if t.in.FrontendAdmits {
		var adm TaskAdmitted
		var got bool
		if t.in.Revision < TaskRevisionLean {
			adm, got = t.awaitFrontendAdmission(ctx)
		} else {
			adm, got, early = t.awaitQueued(ctx, lctx)
		}
		switch {
		case !got:
			workflow.GetLogger(ctx).Warn("no admission from SubmitTask; admitting the task here", "task_id", t.in.TaskID)
		case adm.EnqueueError != "":
			t.finish(ctx, lctx, true)
			return t.reject(ctx, commonpb.ErrorCode_NO_ROUTE, "no_route: "+adm.EnqueueError)
		case adm.Enqueued:
			enqueued = true
		default:
			first = adm.Result
		}
	}
	if !enqueued {
		if done, err := t.holdForWorktree(ctx, lctx); done || err != nil {
			return t.st, err
		}
		if done, err := t.admit(ctx, lctx, first); done || err != nil {
			return t.st, err
		}
		// Queue at the agent, whose lifecycle workflow runs the task and reports back.
		if err := t.enqueue(ctx, lctx); err != nil {
			t.finish(ctx, lctx, true)
			return t.reject(ctx, commonpb.ErrorCode_NO_ROUTE, fmt.Sprintf("no_route: agent %s has no running lifecycle: %v", t.in.AgentID, err))
		}
	}
	t.set(ctx, TaskQueued, "queued at agent "+t.in.AgentID)
	t.answer(TaskAdmission{Accepted: true, Reason: "queued"})
	t.follow(ctx, early)
	t.finish(ctx, lctx, t.st.State != TaskCompleted)
	return t.st, nil
}

// enqueue queues the admitted task at its agent's lifecycle. A TaskRevisionLean run sends
// AgentTaskEnqueueSignal from a local activity within the workflow task that admitted the
// task (an external signal's completion is an event that costs the task one more workflow
// task for nothing it needs).
//
// Not AgentTaskEnqueueUpdate, which runs used to send first: an update reaches the lifecycle
// before it is in its history, so when the lifecycle's worker dies in a workflow task that
// took an update and dispatched its task, the retried workflow task can take its inputs in
// another order (the update again, or this signal sent after it timed out) and dispatch another
// task as the same CONTROL message — whose derived message_id (ControlMessageID: the run and a
// count) the router then takes for a repeat of the RUN already sent. One task ran twice and
// another never, with the first one's result (the DAG worker-kill scenario). A signal is in
// the history before any workflow task sees it, so a retried task repeats the same decisions.
// The lifecycle still takes the update, for runs that recorded sending it.
func (t *taskRun) enqueue(ctx, lctx workflow.Context) error {
	if t.in.Revision < TaskRevisionLean {
		return workflow.SignalExternalWorkflow(ctx, AgentWorkflowID(t.in.AgentID), "", AgentTaskEnqueueSignal, QueuedTaskOf(t.in)).Get(ctx, nil)
	}
	// json.Marshal of this struct (no maps, no floats) is a pure function of its value;
	// workflowcheck flags it only for the encoder cache it fills on first use.
	arg, err := json.Marshal(QueuedTaskOf(t.in)) //workflowcheck:ignore
	if err != nil {
		return err
	}
	var acts *activities.Activities
	return workflow.ExecuteLocalActivity(lctx, acts.SignalWorkflow, activities.SignalInput{
		WorkflowID: AgentWorkflowID(t.in.AgentID), Signal: AgentTaskEnqueueSignal, Arg: arg, MustExist: true}).Get(ctx, nil)
}

// awaitQueued waits for the word of SubmitTask's fast path (TaskAdmittedSignal) or, should
// the agent's lifecycle be quicker or the frontend have died after queueing the task, the
// agent's first events for the task (early, which the caller applies). When neither came
// within FrontendAdmitWait, the agent's lifecycle is asked whether it holds the task: if it
// does, the task is queued (got, with Enqueued); if not, got is false and the task admits
// itself — without the check, a task queued behind a long one would be admitted twice.
func (t *taskRun) awaitQueued(ctx, lctx workflow.Context) (adm TaskAdmitted, got bool, early []TaskEvent) {
	tctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	timedOut := false
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(workflow.GetSignalChannel(ctx, TaskAdmittedSignal), func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(ctx, &adm)
		got = true
	})
	sel.AddReceive(workflow.GetSignalChannel(ctx, TaskEventsSignal), func(c workflow.ReceiveChannel, _ bool) {
		var evs TaskEvents
		c.Receive(ctx, &evs)
		adm, got, early = TaskAdmitted{Enqueued: true}, true, evs.Events
	})
	sel.AddReceive(workflow.GetSignalChannel(ctx, TaskEventSignal), func(c workflow.ReceiveChannel, _ bool) {
		var ev TaskEvent
		c.Receive(ctx, &ev)
		adm, got, early = TaskAdmitted{Enqueued: true}, true, []TaskEvent{ev}
	})
	sel.AddFuture(workflow.NewTimerWithOptions(tctx, FrontendAdmitWait, admitWaitTimer), func(workflow.Future) { timedOut = true })
	sel.Select(ctx)
	if !timedOut {
		return adm, got, early
	}
	var acts *activities.Activities
	var held bool
	if err := workflow.ExecuteLocalActivity(lctx, acts.TaskHeld, activities.TaskHeldInput{
		AgentWorkflowID: AgentWorkflowID(t.in.AgentID), Query: AgentTasksQuery, TaskID: t.in.TaskID}).Get(ctx, &held); err != nil {
		workflow.GetLogger(ctx).Warn("could not ask the agent whether it holds the task", "task_id", t.in.TaskID, "error", err)
	}
	if held {
		return TaskAdmitted{Enqueued: true}, true, nil
	}
	// An admission SubmitTask reported after all wins over admitting again.
	if workflow.GetSignalChannel(ctx, TaskAdmittedSignal).ReceiveAsync(&adm) {
		return adm, true, nil
	}
	return TaskAdmitted{}, false, nil
}

// awaitFrontendAdmission waits up to FrontendAdmitWait for the admission SubmitTask's fast
// path made (TaskAdmittedSignal); got is false when none came (the frontend died).
func (t *taskRun) awaitFrontendAdmission(ctx workflow.Context) (adm TaskAdmitted, got bool) {
	tctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(workflow.GetSignalChannel(ctx, TaskAdmittedSignal), func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(ctx, &adm)
		got = true
	})
	sel.AddFuture(workflow.NewTimerWithOptions(tctx, FrontendAdmitWait, admitWaitTimer), func(workflow.Future) {})
	sel.Select(ctx)
	return adm, got
}

// holdForWorktree holds a task that needs a worktree while its agent is not bound (§16.3
// "Task scheduling": an agent in BIND_FAILED MUST NOT be assigned such a task, and UNBOUND is
// treated the same way): the task is WAITING, its reason says why, and it checks the agent's
// binding again after a durable timer — WaitRecheck doubling up to WorktreeRecheckMax —
// until worktree.Eligible says yes. done reports that the task ended instead (its agent
// deregistered meanwhile).
func (t *taskRun) holdForWorktree(ctx, lctx workflow.Context) (done bool, err error) {
	if !t.in.NeedsWorktree {
		return false, nil
	}
	var acts *activities.Activities
	wait := orDefault(t.in.WaitRecheck, DefaultTaskRecheck)
	for {
		var aw activities.AgentWorktree
		if err := workflow.ExecuteLocalActivity(lctx, acts.AgentWorktreeOf, t.in.AgentID).Get(ctx, &aw); err != nil {
			return true, err
		}
		if !aw.Registered {
			_, err := t.reject(ctx, commonpb.ErrorCode_NO_ROUTE, fmt.Sprintf("no_route: agent %q is not registered", t.in.AgentID))
			return true, err
		}
		if worktree.Eligible(worktree.State(aw.State)) {
			return false, nil
		}
		reason := HeldForWorktreeReason(t.in.AgentID, aw)
		if t.st.State != TaskWaiting || t.st.Reason != reason {
			t.set(ctx, TaskWaiting, reason)
		}
		t.answer(TaskAdmission{Accepted: true, Reason: reason})
		if err := sleep(ctx, wait, "check the agent's worktree binding again (§16.3)"); err != nil {
			return true, err
		}
		wait = min(2*wait, WorktreeRecheckMax)
	}
}

// HeldForWorktreeReason is the reason of a task held because its agent is not bound (§16.3):
// "waiting: agent <id> is UNBOUND; …", with the §16.3 reason of a failed bind.
func HeldForWorktreeReason(agentID string, aw activities.AgentWorktree) string {
	state := aw.State
	if state == "" {
		state = worktree.StateUnbound.String()
	}
	if aw.Reason != "" {
		state += " (" + aw.Reason + ")"
	}
	return fmt.Sprintf("waiting: agent %s is %s; a task that needs a worktree is dispatched once the agent is bound (§16.3)", agentID, state)
}

// admit runs admission (§9) until the task is admitted, rejected or denied, starting from
// first when the frontend already made the first attempt; done reports that the task ended
// (rejected) instead of being admitted.
func (t *taskRun) admit(ctx, lctx workflow.Context, first *taskadmission.Result) (done bool, err error) {
	var acts *activities.Activities
	recheck := orDefault(t.in.WaitRecheck, DefaultTaskRecheck)
	if first == nil && t.in.Revision >= TaskRevisionAdmitOnce {
		// The agent's type (for the job key) and the first attempt in one local activity.
		var got activities.TaskAdmitted
		err := workflow.ExecuteLocalActivity(lctx, acts.AdmitNewTask, activities.NewTaskAdmission{
			Input: AdmitInput(t.in, ""), Params: t.in.Params, ContentType: t.in.ContentType}).Get(ctx, &got)
		if err != nil {
			_, err = t.reject(ctx, commonpb.ErrorCode_NO_ROUTE, fmt.Sprintf("no_route: %v", err))
			return true, err
		}
		t.jobKey, first = got.JobKey, &got.Result
	} else {
		var agentType string
		if err := workflow.ExecuteLocalActivity(lctx, acts.AgentTypeOf, t.in.AgentID).Get(ctx, &agentType); err != nil {
			_, err = t.reject(ctx, commonpb.ErrorCode_NO_ROUTE, fmt.Sprintf("no_route: %v", err))
			return true, err
		}
		t.jobKey = taskadmission.JobKey(agentType, t.in.Params, t.in.ContentType, t.in.Scope)
	}
	admitIn := AdmitInput(t.in, t.jobKey)
	for {
		var res taskadmission.Result
		if first != nil {
			res, first = *first, nil
		} else if err := workflow.ExecuteLocalActivity(lctx, acts.AdmitTask, admitIn).Get(ctx, &res); err != nil {
			return true, err
		}
		switch res.Verdict {
		case taskadmission.OK:
			return false, nil
		case taskadmission.Reject:
			_, err := t.reject(ctx, res.Code, res.Reason)
			return true, err
		case taskadmission.Duplicate, taskadmission.Conflict:
			approved, err := t.escalate(ctx, res)
			if err != nil {
				return true, err
			}
			if !approved {
				if res.Verdict == taskadmission.Duplicate {
					_, err := t.reject(ctx, commonpb.ErrorCode_DUPLICATE_DETECTED, "duplicate_detected: HITL did not authorize the identical job: "+t.st.Reason)
					return true, err
				}
				// C.6 QUEUE_TASKS: a denied parallel run is serialized behind the other task.
				t.set(ctx, TaskWaiting, "HITL denied parallel execution; waiting for task "+res.OtherTaskID+" to finish")
				admitIn.AuthorizedConflicts = slices.DeleteFunc(admitIn.AuthorizedConflicts, func(s string) bool { return s == res.OtherTaskID })
				if err := t.waitFor(ctx, lctx, res.OtherTaskID, recheck); err != nil {
					return true, err
				}
				continue
			}
			if res.Verdict == taskadmission.Duplicate {
				admitIn.AuthorizedDuplicate = true
			} else {
				admitIn.AuthorizedConflicts = append(admitIn.AuthorizedConflicts, res.OtherTaskID)
			}
		case taskadmission.Concurrency, taskadmission.Serialize:
			if t.st.State != TaskWaiting {
				t.set(ctx, TaskWaiting, res.Reason)
			}
			t.answer(TaskAdmission{Accepted: true, Reason: res.Reason})
			if err := sleep(ctx, recheck, "run admission again: "+res.Reason); err != nil {
				return true, err
			}
		default:
			return true, fmt.Errorf("unknown admission verdict %q", res.Verdict)
		}
	}
}

// follow applies the lifecycle's task events until the task ends. Events are applied in the
// order the scheduler numbered them: a signal can overtake an earlier one on the way, so a
// later event waits for the ones before it.
func (t *taskRun) follow(ctx workflow.Context, early []TaskEvent) {
	pending := map[int64]TaskEvent{}
	next := int64(1)
	take := func(ev TaskEvent) {
		if ev.Seq == 0 {
			t.apply(ctx, ev)
			return
		}
		if ev.Seq < next {
			return // a repeat
		}
		pending[ev.Seq] = ev
		for !TaskTerminal(t.st.State) {
			e, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			next++
			t.apply(ctx, e)
		}
	}
	for _, ev := range early {
		take(ev)
	}
	// Both channels: a lifecycle whose runs batch a step's events for the task sends
	// TaskEventsSignal, older ones TaskEventSignal; the sequence numbers order them alike.
	// Histories recorded before TaskEventsSignal existed never signal it, so listening to it
	// changes nothing when they replay.
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(workflow.GetSignalChannel(ctx, TaskEventSignal), func(c workflow.ReceiveChannel, _ bool) {
		var ev TaskEvent
		c.Receive(ctx, &ev)
		take(ev)
	})
	sel.AddReceive(workflow.GetSignalChannel(ctx, TaskEventsSignal), func(c workflow.ReceiveChannel, _ bool) {
		var evs TaskEvents
		c.Receive(ctx, &evs)
		for _, ev := range evs.Events {
			take(ev)
		}
	})
	for !TaskTerminal(t.st.State) {
		sel.Select(ctx)
	}
}

// apply records one task event.
func (t *taskRun) apply(ctx workflow.Context, ev TaskEvent) {
	if ev.State == TaskSuspended {
		t.st.Suspensions++
	}
	t.st.Result, t.st.ErrorCode = ev.Result, ev.ErrorCode
	t.set(ctx, ev.State, ev.Reason)
}

// finish closes the activity entry (§10: removed on completion).
func (t *taskRun) finish(ctx, lctx workflow.Context, failed bool) {
	var acts *activities.Activities
	if err := workflow.ExecuteLocalActivity(lctx, acts.FinishTask, activities.FinishTaskInput{AgentID: t.in.AgentID, TaskID: t.in.TaskID, Failed: failed}).Get(ctx, nil); err != nil {
		// The workers' reconciliation (package reconcile, §10) closes what is left behind.
		workflow.GetLogger(ctx).Warn("could not close the activity entry", "task_id", t.in.TaskID, "error", err)
	}
}

func (t *taskRun) reject(ctx workflow.Context, code commonpb.ErrorCode, reason string) (TaskStatus, error) {
	t.st.ErrorCode = code
	t.set(ctx, TaskRejected, reason)
	t.answer(TaskAdmission{Accepted: false, Reason: reason})
	return t.st, nil
}

// escalate raises the HITL invocation for a duplicate job or a scope conflict and waits for
// its outcome; it reports whether the human (or the fallback) approved.
func (t *taskRun) escalate(ctx workflow.Context, res taskadmission.Result) (bool, error) {
	reasonType, title := commonpb.HitlReasonType_CONFLICT.String(), "scope conflict between tasks "+t.in.TaskID+" and "+res.OtherTaskID
	actions := []string{"approve: run both in parallel", "deny: run " + t.in.TaskID + " after " + res.OtherTaskID}
	if res.Verdict == taskadmission.Duplicate {
		reasonType, title = commonpb.HitlReasonType_MANUAL_OVERRIDE.String(), "duplicate job: task "+t.in.TaskID+" repeats "+res.OtherTaskID
		actions = []string{"approve: run the identical job again", "deny: reject " + t.in.TaskID}
	}
	var id string
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return newUUID() }).Get(&id); err != nil {
		return false, err
	}
	t.st.HitlIDs = append(t.st.HitlIDs, id)
	t.set(ctx, TaskAwaitingHITL, res.Reason)
	accepted := res.Verdict == taskadmission.Conflict // a conflict holds the task; a duplicate is refused until authorized
	t.answer(TaskAdmission{Accepted: accepted, HitlID: id, Reason: fmt.Sprintf("%s; awaiting HITL decision %s", res.Reason, hitl.WorkflowID(id))})
	out, err := RequestHITL(ctx, hitl.Invocation{
		InvocationID: id, ReasonType: reasonType, CorrelationID: protocol.TaskCorrelationID(t.in.TaskID),
		Subject: hitl.Subject{TaskID: t.in.TaskID, AgentID: t.in.AgentID},
		Context: hitl.Context{
			Facts: []string{title, res.Reason, "scope of " + t.in.TaskID + ": " + t.in.Scope,
				"other task " + res.OtherTaskID + " runs on agent " + res.OtherAgentID},
			Inference: map[string]string{"confidence": fmt.Sprintf("%.2f", res.Confidence), "overlaps": strings.Join(res.Overlaps, "; ")},
		},
		ProposedActions: actions, Priority: t.in.Priority, Timeout: t.in.HITLTimeout,
	})
	if err != nil {
		return false, err
	}
	return out.Decision == hitl.Approve, nil
}

// waitFor waits until another task has ended, checking its workflow's state.
func (t *taskRun) waitFor(ctx, lctx workflow.Context, taskID string, every time.Duration) error {
	var acts *activities.Activities
	for {
		var done bool
		if err := workflow.ExecuteLocalActivity(lctx, acts.TaskEnded, taskID).Get(ctx, &done); err != nil {
			return err
		}
		if done {
			return nil
		}
		if err := sleep(ctx, every, "check whether task "+taskID+" has ended"); err != nil {
			return err
		}
	}
}

// KindTask is the SW4RMKind search-attribute value of task runs.
const KindTask = "task"

// TaskStartOptions are the start options of workflow task/<task_id> on taskQueue. A task_id
// names one task for good: a second submission fails as a duplicate (§9.2).
func TaskStartOptions(in TaskInput, taskQueue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID: TaskWorkflowID(in.TaskID), TaskQueue: taskQueue,
		WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:    enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		// Without this the SDK hands back the running task's handle as if it were new.
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TypedSearchAttributes:                    temporal.NewSearchAttributes(KindKey.ValueSet(KindTask), AgentIDKey.ValueSet(in.AgentID)),
		StaticSummary:                            TaskSummary(in),
		StaticDetails:                            summary("scope: %s", in.Scope),
	}
}
