package workflows

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/jsonform"
	"github.com/sw4rm/sw4rm-temporal/telemetry"
)

// Names of the scheduler's messages to an agent's lifecycle workflow, which is the scheduler
// for that agent: it orders the agent's tasks, sends CONTROL RUN, preempts at safe points,
// escalates to forced preemption and reports every task transition to the task's workflow
// (§7, App. D C.4, C.5).
const (
	// AgentTaskEnqueueSignal carries a QueuedTask from an admitted task's workflow.
	AgentTaskEnqueueSignal = "agent-task-enqueue"
	// AgentTaskEnqueueUpdate carries the same QueuedTask as an update. Nothing sends it any
	// more: the lifecycle still takes it for runs that were sent it. An update reaches a
	// worker before it is in the history, so a lifecycle workflow task retried after its
	// worker died can take its inputs in another order and dispatch another task under a
	// CONTROL message_id already used (see the task workflow's enqueue); the signal cannot.
	AgentTaskEnqueueUpdate = "agent-task-enqueue"
	// AgentPreemptSignal carries a PreemptionRequest (SchedulerService.RequestPreemption).
	AgentPreemptSignal = "agent-preempt"
	// AgentControlAckSignal carries a ControlAck: the agent acknowledged (or the router
	// NACKed) one of the scheduler's CONTROL messages.
	AgentControlAckSignal = "agent-control-ack"
	// AgentControlAcksSignal carries ControlAcks: several ACKs of the scheduler's CONTROL
	// messages that reached the router moments apart (a RUN's RECEIVED and FULFILLED),
	// delivered in one signal.
	AgentControlAcksSignal = "agent-control-acks"
	// AgentControlSignal carries an AgentControl: the agent declared or closed a
	// non-preemptible section (§7.2).
	AgentControlSignal = "agent-control"
	// AgentTasksQuery returns a DispatchStatus.
	AgentTasksQuery = "agent-tasks"
)

// Defaults of preemption (§7.2, App. D C.5).
const (
	// DefaultPreemptTimeout is how long a PREEMPT_REQUEST outside a non-preemptible section
	// may stay unanswered before forced preemption starts.
	DefaultPreemptTimeout = 10 * time.Minute
	// DefaultTerminateGrace is TERMINATE's grace period before KILL (C.5: grace_ms 3000).
	DefaultTerminateGrace = 3 * time.Second
)

// ReasonForcedPreemption is the error_code of a task ended by forced preemption (§7.2).
const ReasonForcedPreemption = "forced_preemption"

// TaskResumed is the state of a suspended task whose RUN (resume) was sent.
const TaskResumed = "RESUMED"

const versionTasks = "agent-tasks"

// versionDerivedControlIDs marks runs whose CONTROL message_ids are derived (see send).
const versionDerivedControlIDs = "derived-control-ids"

// controlIDSpace is the UUID namespace of derived CONTROL message_ids.
var controlIDSpace = uuid.MustParse("5c1f3f9e-7b7a-4f43-9a55-0d3c2f1e8b21")

// ControlMessageID is the message_id of the n-th CONTROL message (from 1) a lifecycle run
// sends: a UUIDv5 of the run ID and n, the same every time the run's history is replayed.
func ControlMessageID(runID string, n int) string {
	return uuid.NewSHA1(controlIDSpace, []byte(runID+"/"+strconv.Itoa(n))).String()
}

// tristate is a yes/no decision that may not be taken yet.
type tristate int8

const (
	unknown tristate = iota
	no
	yes
)

// decide returns whether this run takes the change changeID, asking GetVersion the first
// time and remembering the answer, so the version marker sits where the change first acts.
func (t *tristate) decide(ctx workflow.Context, changeID string) bool {
	if *t == unknown {
		*t = no
		if workflow.GetVersion(ctx, changeID, workflow.DefaultVersion, 1) >= 1 {
			*t = yes
		}
	}
	return *t == yes
}

// versionTaskEventsLocal marks runs that report task events by local activity (see event).
const versionTaskEventsLocal = "task-events-local-activity"

// QueuedTask is the payload of AgentTaskEnqueueSignal and an entry of the agent's queue.
type QueuedTask struct {
	// TaskID names the task.
	TaskID string
	// Priority is -19 (highest) .. 20 (lowest).
	Priority int32
	// Params, ContentType and Scope travel in the RUN; JSON parameters are JSON in the
	// signal (jsonform.Bytes).
	Params      jsonform.Bytes `json:",omitempty"`
	ContentType string         `json:",omitempty"`
	Scope       string         `json:",omitempty"`
	// SubmittedAt orders tasks of one priority (FIFO, §7.1).
	SubmittedAt time.Time
	// Seq breaks ties of SubmittedAt in arrival order.
	Seq int64 `json:",omitempty"`
	// Suspended marks a task that yielded and waits to be resumed.
	Suspended bool `json:",omitempty"`
	// SuspendedAt is when it yielded.
	SuspendedAt time.Time `json:",omitzero"`
	// Events counts the events reported to the task's workflow; each carries its number.
	Events int64 `json:",omitempty"`
	// EventBatches says the task's workflow takes a step's events in one TaskEventsSignal
	// and learns from its first event that it was queued; the lifecycle then holds a
	// dispatch's SCHEDULED (or RESUMED) back until the task's next event (Held), since the
	// agent's RECEIVED follows it within moments and one signal then carries both.
	EventBatches bool `json:",omitempty"`
	// Held are the events held back for the task's next report.
	Held []TaskEvent `json:",omitempty"`
	// span is the span of the signal that queued the task (in memory only, never encoded):
	// the task's CONTROL messages and reports join its trace rather than the lifecycle's.
	span telemetry.WorkflowSpan
}

// PreemptionRequest is the payload of AgentPreemptSignal.
type PreemptionRequest struct {
	// TaskID names the running task to preempt; empty means whatever runs.
	TaskID string
	// Reason explains the request.
	Reason string
}

// ControlAck is the payload of AgentControlAckSignal.
type ControlAck struct {
	// MessageID is the acknowledged CONTROL message.
	MessageID string
	// Stage is the ACK's stage (TIMED_OUT for the router's timeout NACK).
	Stage commonpb.AckStage
	// ErrorCode is a NACK's code.
	ErrorCode commonpb.ErrorCode `json:",omitempty"`
	// Note is the ACK's note (a RUN's result on FULFILLED).
	Note string `json:",omitempty"`
}

// ControlAcks is the payload of AgentControlAcksSignal.
type ControlAcks struct {
	// Acks are in the order the router stored them.
	Acks []ControlAck
}

// AgentControl is the payload of AgentControlSignal.
type AgentControl struct {
	// Type is protocol.ControlNonPreemptibleBegin or protocol.ControlNonPreemptibleEnd.
	Type string
	// TaskID is the task the section belongs to.
	TaskID string
	// MaxDuration bounds the section (BEGIN).
	MaxDuration time.Duration `json:",omitempty"`
}

// RunningTask is the task the agent holds, with its CONTROL conversation.
type RunningTask struct {
	QueuedTask
	// RunMsgID is the RUN's message_id; Received is set once the agent confirmed it.
	RunMsgID string
	Received bool `json:",omitempty"`
	// PreemptMsgID is the pending PREEMPT_REQUEST, PreemptAt when it was sent.
	PreemptMsgID string    `json:",omitempty"`
	PreemptAt    time.Time `json:",omitempty"`
	// NPUntil is the end of the declared non-preemptible section, zero outside one.
	NPUntil time.Time `json:",omitempty"`
	// TerminateMsgID is the TERMINATE of a forced preemption, KillAt when KILL follows.
	TerminateMsgID string    `json:",omitempty"`
	KillAt         time.Time `json:",omitempty"`
	// Waits are the responses the task waits on, oldest first (004 §2, agent_wait.go).
	Waits []TaskWait `json:",omitempty"`
}

// Dispatch is the agent's scheduling state, carried over a continue-as-new.
type Dispatch struct {
	// Queue holds the waiting tasks in dispatch order: priority, then submission (§7.1).
	Queue []QueuedTask `json:",omitempty"`
	// Running is the task the agent holds, nil when idle.
	Running *RunningTask `json:",omitempty"`
	// NextSeq numbers enqueues.
	NextSeq int64 `json:",omitempty"`
	// Done lists the most recently ended tasks, so a repeated enqueue (a task workflow's
	// fallback after SubmitTask already queued it) never runs a task twice.
	Done []string `json:",omitempty"`
	// EndedWaits lists the most recently ended response waits, so a wait whose end arrived
	// first, or whose beginning is delivered again, is not begun.
	EndedWaits []string `json:",omitempty"`
}

// maxDone bounds Dispatch.Done.
const maxDone = 256

// DispatchStatus answers AgentTasksQuery.
type DispatchStatus struct {
	// Running is the running task's id, empty when idle.
	Running string
	// RunningPriority is its priority.
	RunningPriority int32
	// PreemptPending is set while a PREEMPT_REQUEST is unanswered.
	PreemptPending bool
	// NonPreemptible is set inside a declared non-preemptible section.
	NonPreemptible bool
	// Queue lists the waiting task ids in dispatch order.
	Queue []string
	// QueuePriorities are the priorities of Queue's tasks, index for index. An answer of a
	// worker that predates the field omits it; a reader then knows the order, not the values.
	QueuePriorities []int32 `json:",omitempty"`
	// WaitingOn lists the requests the running task waits on (004 §2).
	WaitingOn []string `json:",omitempty"`
}

// less orders the queue: lower priority value first, then earlier submission, then arrival.
func (q QueuedTask) less(o QueuedTask) int {
	return cmp.Or(cmp.Compare(q.Priority, o.Priority), q.SubmittedAt.Compare(o.SubmittedAt), cmp.Compare(q.Seq, o.Seq))
}

// dispatcher runs one agent's tasks inside its lifecycle workflow.
type dispatcher struct {
	w  *agentLifecycle
	d  Dispatch
	la workflow.Context // local activity context for CONTROL sends
	// signalLA is the local activity context for task events; local is whether this run
	// reports them by local activity (older histories signal), decided at the first report,
	// and pending holds the reports of the current step.
	signalLA workflow.Context
	local    tristate
	// derivedIDs is whether this run derives CONTROL message_ids (see send); sent counts
	// the CONTROL messages this run has sent.
	derivedIDs tristate
	sent       int
	pending    []workflow.Future
	// timer is the escalation timer of the running task (deadline()).
	timer deadlineTimer
	// waitTimer bounds the running task's response waits (waitDeadline()).
	waitTimer deadlineTimer
	// stopped lists the tasks failed because the agent failed, for the step's cleanup to
	// audit (releaseAll).
	stopped []string
}

func (w *agentLifecycle) preemptTimeout() time.Duration {
	return orDefault(w.in.PreemptTimeout, DefaultPreemptTimeout)
}

func (w *agentLifecycle) terminateGrace() time.Duration {
	return orDefault(w.in.TerminateGrace, DefaultTerminateGrace)
}

func newDispatcher(ctx workflow.Context, w *agentLifecycle, d Dispatch) *dispatcher {
	la := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumInterval: 5 * time.Second, MaximumAttempts: 5},
	})
	signalLA := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		// A lost report would leave the task's workflow waiting for good, so the report is
		// retried for as long as Temporal may be briefly unreachable.
		ScheduleToCloseTimeout: 10 * time.Minute,
		StartToCloseTimeout:    10 * time.Second,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumInterval: 5 * time.Second},
	})
	return &dispatcher{w: w, d: d, la: la, signalLA: signalLA}
}

func (p *dispatcher) status() DispatchStatus {
	// A query's answer is not recorded in the history, so what it adds changes no replay.
	s := DispatchStatus{Queue: make([]string, 0, len(p.d.Queue)), QueuePriorities: make([]int32, 0, len(p.d.Queue))}
	for _, q := range p.d.Queue {
		s.Queue = append(s.Queue, q.TaskID)
		s.QueuePriorities = append(s.QueuePriorities, q.Priority)
	}
	if r := p.d.Running; r != nil {
		s.Running, s.RunningPriority = r.TaskID, r.Priority
		s.PreemptPending = r.PreemptMsgID != ""
		s.NonPreemptible = !r.NPUntil.IsZero()
		for _, tw := range r.Waits {
			s.WaitingOn = append(s.WaitingOn, tw.RequestID)
		}
	}
	return s
}

// event reports a task transition to the task's workflow. It does not wait: the signal is
// a command of this workflow task, delivered in order, and a task workflow that is gone has
// nothing left to learn.
func (p *dispatcher) event(ctx workflow.Context, q *QueuedTask, ev TaskEvent) {
	// Signals may be delivered in another order than they were sent; the task's own event
	// number lets its workflow apply them in order.
	q.Events++
	ev.Seq = q.Events
	taskID := q.TaskID
	if TaskTerminal(ev.State) {
		p.d.Done = append(p.d.Done, taskID)
		if len(p.d.Done) > maxDone {
			p.d.Done = slices.Delete(p.d.Done, 0, len(p.d.Done)-maxDone)
		}
	}
	if p.w.stepReports && q.EventBatches {
		if ev.State == TaskScheduled || ev.State == TaskResumed {
			q.Held = append(q.Held, ev)
			return
		}
		evs := append(q.Held, ev)
		q.Held = nil
		p.w.batch(taskID, evs, q.span)
		return
	}
	if p.w.stepReports {
		// Sent with the rest of the step (reportStep).
		arg, err := json.Marshal(ev) //workflowcheck:ignore
		if err != nil {
			workflow.GetLogger(ctx).Error("task event not encodable", "task_id", taskID, "error", err)
			return
		}
		p.w.report.Signals = append(p.w.report.Signals, activities.SignalInput{WorkflowID: TaskWorkflowID(taskID), Signal: TaskEventSignal, Arg: arg})
		return
	}
	if !p.local.decide(ctx, versionTaskEventsLocal) {
		workflow.SignalExternalWorkflow(ctx, TaskWorkflowID(taskID), "", TaskEventSignal, ev)
		return
	}
	// A local activity, started now and awaited at the end of the step (flush): the reports
	// of one step go out together, inside the step's workflow task, and their completions
	// schedule no further workflow task that would delay the scheduler's next reaction.
	// json.Marshal of this struct (no maps, no floats) is a pure function of its value;
	// workflowcheck flags it only for the encoder cache it fills on first use.
	arg, err := json.Marshal(ev) //workflowcheck:ignore
	if err != nil {
		workflow.GetLogger(ctx).Error("task event not encodable", "task_id", taskID, "error", err)
		return
	}
	var acts *activities.Activities
	p.pending = append(p.pending, workflow.ExecuteLocalActivity(telemetry.WithSpan(p.signalLA, q.span), acts.SignalWorkflow,
		activities.SignalInput{WorkflowID: TaskWorkflowID(taskID), Signal: TaskEventSignal, Arg: arg}))
}

// flush waits for the step's task-event reports. A report that kept failing for ten minutes
// is logged and given up; the task's workflow keeps its last known state.
func (p *dispatcher) flush(ctx workflow.Context) {
	for _, f := range p.pending {
		if err := f.Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Error("task event not delivered", "agent_id", p.w.in.AgentID, "error", err)
		}
	}
	p.pending = nil
}

// send sends one CONTROL message with a fresh message_id (recorded by SideEffect, so replay
// sends the same) and returns the id.
func (p *dispatcher) send(ctx workflow.Context, c protocol.Control) (string, error) {
	var id string
	if p.derivedIDs.decide(ctx, versionDerivedControlIDs) {
		// Derived from the run and a per-run count rather than drawn by SideEffect: when a
		// workflow task fails after its local activities ran (a signal arriving while the
		// run continues as new is refused as UnhandledCommand), the retried task sends the
		// same message_ids, which the router takes as repeats, so the agent never gets a
		// second RUN for one dispatch.
		p.sent++
		id = ControlMessageID(workflow.GetInfo(ctx).WorkflowExecution.RunID, p.sent)
	} else if err := workflow.SideEffect(ctx, func(workflow.Context) any { return newUUID() }).Get(&id); err != nil {
		return "", err
	}
	var acts *activities.Activities
	la := p.la
	if r := p.d.Running; r != nil && r.TaskID == c.TaskID {
		la = telemetry.WithSpan(la, r.span) // the message joins its task's trace
	}
	err := workflow.ExecuteLocalActivity(la, acts.SendControl, activities.SendControlInput{AgentID: p.w.in.AgentID, MessageID: id, Control: c}).Get(ctx, nil)
	return id, err
}

// enqueue adds a task and preempts the running one if the new task outranks it (§7.1:
// strictly lower priority value; equal or lower priority never preempts).
func (p *dispatcher) enqueue(ctx workflow.Context, q QueuedTask) error {
	if r := p.d.Running; (r != nil && r.TaskID == q.TaskID) || slices.ContainsFunc(p.d.Queue, func(o QueuedTask) bool { return o.TaskID == q.TaskID }) ||
		slices.Contains(p.d.Done, q.TaskID) {
		return nil // a repeated enqueue
	}
	p.d.NextSeq++
	q.Seq = p.d.NextSeq
	i, _ := slices.BinarySearchFunc(p.d.Queue, q, func(a, b QueuedTask) int { return a.less(b) })
	p.d.Queue = slices.Insert(p.d.Queue, i, q)
	if r := p.d.Running; r != nil && q.Priority < r.Priority {
		return p.preempt(ctx, fmt.Sprintf("task %s of priority %d outranks task %s of priority %d (§7.1)", q.TaskID, q.Priority, r.TaskID, r.Priority))
	}
	return p.dispatch(ctx)
}

// preempt sends PREEMPT_REQUEST for the running task unless one is pending. Inside a
// non-preemptible section the agent defers yielding; the scheduler waits for the section's
// declared bound before it escalates (§7.2).
func (p *dispatcher) preempt(ctx workflow.Context, reason string) error {
	r := p.d.Running
	if r == nil || r.PreemptMsgID != "" || r.TerminateMsgID != "" {
		return nil
	}
	id, err := p.send(ctx, protocol.Control{Type: protocol.ControlPreemptRequest, TaskID: r.TaskID, Reason: reason})
	if err != nil {
		return p.sendFailed(ctx, err)
	}
	r.PreemptMsgID, r.PreemptAt = id, workflow.Now(ctx)
	workflow.GetLogger(ctx).Info("preemption requested", "agent_id", p.w.in.AgentID, "task_id", r.TaskID, "reason", reason)
	return nil
}

// dispatchable reports whether the agent may be given a task: it is idle in RUNNABLE, or it
// just suspended a task to make room (§8.1: never while INITIALIZING or SHUTTING_DOWN).
func (p *dispatcher) dispatchable() bool {
	s := p.w.state
	return p.d.Running == nil && len(p.d.Queue) > 0 && (s == commonpb.AgentState_RUNNABLE || s == commonpb.AgentState_SUSPENDED)
}

// dispatch sends CONTROL RUN for the head of the queue if the agent can take it.
func (p *dispatcher) dispatch(ctx workflow.Context) error {
	if !p.dispatchable() {
		return nil
	}
	q := p.d.Queue[0]
	p.d.Queue = p.d.Queue[1:]
	p.d.Running = &RunningTask{QueuedTask: q}
	next, taskState, why := commonpb.AgentState_SCHEDULED, TaskScheduled, "task "+q.TaskID+" dispatched"
	if p.w.state == commonpb.AgentState_SUSPENDED {
		next, why = commonpb.AgentState_RESUMED, "running task "+q.TaskID+" after a preemption"
	}
	if q.Suspended {
		taskState = TaskResumed
	}
	if err := p.w.transition(ctx, next, why); err != nil {
		return err
	}
	id, err := p.send(ctx, protocol.Control{Type: protocol.ControlRun, TaskID: q.TaskID, Priority: q.Priority, Params: q.Params,
		ParamsContentType: q.ContentType, Scope: q.Scope, Resume: q.Suspended})
	if err != nil {
		return p.sendFailed(ctx, err)
	}
	p.d.Running.RunMsgID = id
	p.event(ctx, &p.d.Running.QueuedTask, TaskEvent{State: taskState, Reason: why})
	// A task that outranks this one may have arrived while it was suspended or queued.
	if len(p.d.Queue) > 0 && p.d.Queue[0].Priority < q.Priority {
		return p.preempt(ctx, fmt.Sprintf("task %s of priority %d outranks task %s of priority %d (§7.1)", p.d.Queue[0].TaskID, p.d.Queue[0].Priority, q.TaskID, q.Priority))
	}
	return nil
}

// sendFailed handles a CONTROL message that could not be sent (the agent is gone): the
// running task fails with no_route and the agent fails.
func (p *dispatcher) sendFailed(ctx workflow.Context, err error) error {
	workflow.GetLogger(ctx).Warn("CONTROL send failed", "agent_id", p.w.in.AgentID, "error", err)
	if r := p.d.Running; r != nil {
		p.d.Running = nil
		p.event(ctx, &r.QueuedTask, TaskEvent{State: TaskFailed, ErrorCode: commonpb.ErrorCode_NO_ROUTE, Reason: "no_route: " + err.Error()})
	}
	return p.w.transition(ctx, commonpb.AgentState_FAILED_STATE, "no_route: the scheduler cannot reach the agent")
}

// onAck applies an ACK or NACK of one of the scheduler's CONTROL messages.
func (p *dispatcher) onAck(ctx workflow.Context, a ControlAck) error {
	r := p.d.Running
	if r == nil {
		return nil
	}
	switch a.MessageID {
	case r.RunMsgID:
		return p.onRunAck(ctx, r, a)
	case r.PreemptMsgID:
		if a.Stage == commonpb.AckStage_FULFILLED && a.Note == "yielded" {
			return p.yielded(ctx, r)
		}
	case r.TerminateMsgID:
		if a.Stage == commonpb.AckStage_FULFILLED {
			return p.finish(ctx, r, TaskEvent{State: TaskFailed, ErrorCode: commonpb.ErrorCode_FORCED_PREEMPTION,
				Reason: ReasonForcedPreemption + ": terminated after the non-preemptible section or preemption deadline passed (§7.2)"})
		}
	}
	return nil
}

func (p *dispatcher) onRunAck(ctx workflow.Context, r *RunningTask, a ControlAck) error {
	switch a.Stage {
	case commonpb.AckStage_RECEIVED, commonpb.AckStage_READ:
		if r.Received {
			return nil
		}
		r.Received = true
		if err := p.w.transition(ctx, commonpb.AgentState_RUNNING, "running task "+r.TaskID); err != nil {
			return err
		}
		p.event(ctx, &r.QueuedTask, TaskEvent{State: TaskRunning, Reason: "the agent received the RUN"})
		// A request the task sent before its RUN's confirmation arrived waits from now on.
		return p.syncWaiting(ctx, "task "+r.TaskID+" waits on a response (004 §2)")
	case commonpb.AckStage_FULFILLED:
		if !r.Received {
			// The delivery confirmation (RECEIVED) and the FULFILLED ACK travel separately and
			// a fast task's FULFILLED can arrive first; the task did run.
			p.event(ctx, &r.QueuedTask, TaskEvent{State: TaskRunning, Reason: "implied by the agent's FULFILLED ACK"})
		}
		return p.finish(ctx, r, TaskEvent{State: TaskCompleted, Result: a.Note, Reason: "the agent fulfilled the RUN"})
	}
	code := a.ErrorCode
	if r.TerminateMsgID != "" {
		code = commonpb.ErrorCode_FORCED_PREEMPTION // §7.2: marked FAILED with forced_preemption
	}
	if code == commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
		code = commonpb.ErrorCode_INTERNAL_ERROR
	}
	if a.Stage == commonpb.AckStage_TIMED_OUT && !r.Received {
		// The agent never took the RUN (§11 ACK timeout): the task fails and so does the
		// agent, which must recover by registering again.
		p.d.Running = nil
		p.event(ctx, &r.QueuedTask, TaskEvent{State: TaskFailed, ErrorCode: commonpb.ErrorCode_ACK_TIMEOUT, Reason: "ack_timeout: the agent did not receive the RUN"})
		return p.w.transition(ctx, commonpb.AgentState_FAILED_STATE, "ack_timeout: the agent did not receive the RUN of task "+r.TaskID)
	}
	return p.finish(ctx, r, TaskEvent{State: TaskFailed, ErrorCode: code, Reason: protocol.CodeName(code) + ": " + a.Note})
}

// finish ends the running task and walks the agent back to RUNNABLE through the §8 table
// (a task's failure is not the agent's), then dispatches the next task.
func (p *dispatcher) finish(ctx workflow.Context, r *RunningTask, ev TaskEvent) error {
	p.d.Running = nil
	p.stopTimer()
	p.leaveWaits(ctx, r)
	p.event(ctx, &r.QueuedTask, ev)
	why := "task " + r.TaskID + " " + ev.State
	for _, step := range []commonpb.AgentState{commonpb.AgentState_RUNNING, commonpb.AgentState_COMPLETED, commonpb.AgentState_RUNNABLE} {
		switch {
		case p.w.state == step:
			continue
		case step == commonpb.AgentState_RUNNING && p.w.state != commonpb.AgentState_WAITING && p.w.state != commonpb.AgentState_WAITING_RESOURCES &&
			p.w.state != commonpb.AgentState_SCHEDULED && p.w.state != commonpb.AgentState_RESUMED:
			continue // only the in-task states pass through RUNNING
		case !protocol.AgentTransitionLegal(p.w.state, step):
			return p.dispatch(ctx) // e.g. SHUTTING_DOWN: the agent stays where it is
		}
		if err := p.w.transition(ctx, step, why); err != nil {
			return err
		}
	}
	return p.dispatch(ctx)
}

// yielded applies a PREEMPT_REQUEST's FULFILLED ACK: the task is SUSPENDED and queued again
// (keeping its priority and submission time), the agent is SUSPENDED, and the outranking
// task runs (App. D C.4).
func (p *dispatcher) yielded(ctx workflow.Context, r *RunningTask) error {
	p.d.Running = nil
	p.stopTimer()
	waited := len(r.Waits) > 0
	p.leaveWaits(ctx, r)
	q := r.QueuedTask
	q.Suspended, q.SuspendedAt = true, workflow.Now(ctx)
	p.event(ctx, &q, TaskEvent{State: TaskSuspended, Reason: "yielded at a safe point (§7.2)"})
	i, _ := slices.BinarySearchFunc(p.d.Queue, q, func(a, b QueuedTask) int { return a.less(b) })
	p.d.Queue = slices.Insert(p.d.Queue, i, q)
	if p.w.state == commonpb.AgentState_SCHEDULED || p.w.state == commonpb.AgentState_RESUMED ||
		(waited && p.w.state == commonpb.AgentState_WAITING) { // WAITING → SUSPENDED is no §8 edge
		if err := p.w.transition(ctx, commonpb.AgentState_RUNNING, "task "+r.TaskID+" started"); err != nil {
			return err
		}
	}
	if err := p.w.transition(ctx, commonpb.AgentState_SUSPENDED, "task "+r.TaskID+" yielded"); err != nil {
		return err
	}
	return p.dispatch(ctx)
}

// onControl applies a non-preemptible section's BEGIN or END (§7.2).
func (p *dispatcher) onControl(ctx workflow.Context, c AgentControl) error {
	r := p.d.Running
	if r == nil || r.TaskID != c.TaskID {
		workflow.GetLogger(ctx).Warn("non-preemptible section for a task that is not running ignored", "agent_id", p.w.in.AgentID, "task_id", c.TaskID)
		return nil
	}
	switch c.Type {
	case protocol.ControlNonPreemptibleBegin:
		r.NPUntil = workflow.Now(ctx).Add(c.MaxDuration)
	case protocol.ControlNonPreemptibleEnd:
		r.NPUntil = time.Time{}
	}
	return nil
}

// deadline returns when the running task's preemption escalates next, zero for never.
func (p *dispatcher) deadline() time.Time {
	r := p.d.Running
	switch {
	case r == nil:
		return time.Time{}
	case r.TerminateMsgID != "":
		return r.KillAt
	case r.PreemptMsgID == "":
		return time.Time{}
	case !r.NPUntil.IsZero():
		// §7.2: deferred while the declared section lasts, enforced at its bound.
		return r.NPUntil
	}
	return r.PreemptAt.Add(p.w.preemptTimeout())
}

// deadlineTimer is a durable timer kept on a deadline that moves: armed for at, re-armed
// (the old one cancelled) when the deadline changes, none for a zero deadline.
type deadlineTimer struct {
	f      workflow.Future
	at     time.Time
	cancel workflow.CancelFunc
}

// arm keeps the timer on at.
func (t *deadlineTimer) arm(ctx workflow.Context, at time.Time) {
	if at.Equal(t.at) && (t.f != nil || at.IsZero()) {
		return
	}
	t.stop()
	if at.IsZero() {
		return
	}
	var tctx workflow.Context
	tctx, t.cancel = workflow.WithCancel(ctx)
	t.f, t.at = workflow.NewTimer(tctx, max(at.Sub(workflow.Now(ctx)), time.Millisecond)), at
}

// stop cancels the timer, if any.
func (t *deadlineTimer) stop() {
	if t.cancel != nil {
		t.cancel()
	}
	t.fired()
}

// fired forgets a timer that went off.
func (t *deadlineTimer) fired() { *t = deadlineTimer{} }

// armTimer keeps the escalation timer on deadline().
func (p *dispatcher) armTimer(ctx workflow.Context) { p.timer.arm(ctx, p.deadline()) }

func (p *dispatcher) stopTimer() { p.timer.stop() }

// onTimer escalates: TERMINATE with a grace period, then KILL (§7.2 forced preemption,
// App. D C.5). The task ends FAILED with forced_preemption.
func (p *dispatcher) onTimer(ctx workflow.Context) error {
	p.timer.fired()
	r := p.d.Running
	if r == nil || p.deadline().IsZero() || p.deadline().After(workflow.Now(ctx)) {
		return nil // the task ended or the deadline moved
	}
	logger := workflow.GetLogger(ctx)
	if r.TerminateMsgID == "" {
		grace := p.w.terminateGrace()
		reason := "the preemption request was not honoured in time"
		if !r.NPUntil.IsZero() {
			reason = "the non-preemptible section exceeded its declared max_duration"
		}
		logger.Warn("forced preemption: TERMINATE", "agent_id", p.w.in.AgentID, "task_id", r.TaskID, "reason", reason, "grace", grace)
		id, err := p.send(ctx, protocol.Control{Type: protocol.ControlTerminate, TaskID: r.TaskID, GraceMS: grace.Milliseconds(), Reason: reason})
		if err != nil {
			return p.sendFailed(ctx, err)
		}
		r.TerminateMsgID, r.KillAt = id, workflow.Now(ctx).Add(grace)
		return nil
	}
	logger.Warn("forced preemption: KILL", "agent_id", p.w.in.AgentID, "task_id", r.TaskID)
	if _, err := p.send(ctx, protocol.Control{Type: protocol.ControlKill, TaskID: r.TaskID, Reason: "TERMINATE was not acknowledged within its grace period"}); err != nil {
		return p.sendFailed(ctx, err)
	}
	return p.finish(ctx, r, TaskEvent{State: TaskFailed, ErrorCode: commonpb.ErrorCode_FORCED_PREEMPTION,
		Reason: ReasonForcedPreemption + ": killed after TERMINATE's grace period (§7.2)"})
}

// failAll ends every task the agent holds, when the agent leaves or fails.
func (p *dispatcher) failAll(ctx workflow.Context, code commonpb.ErrorCode, reason string) {
	if r := p.d.Running; r != nil {
		p.d.Running = nil
		p.stopTimer()
		p.leaveWaits(ctx, r)
		p.event(ctx, &r.QueuedTask, TaskEvent{State: TaskFailed, ErrorCode: code, Reason: reason})
	}
	for i := range p.d.Queue {
		p.event(ctx, &p.d.Queue[i], TaskEvent{State: TaskFailed, ErrorCode: code, Reason: reason})
	}
	p.d.Queue = nil
}

// taskIDs lists the running task and the queued ones.
func (p *dispatcher) taskIDs() []string {
	var out []string
	if r := p.d.Running; r != nil {
		out = append(out, r.TaskID)
	}
	for _, q := range p.d.Queue {
		out = append(out, q.TaskID)
	}
	return out
}

// failureCode is the error_code of the tasks a FAILED agent loses: agent_shutdown when its
// shutdown grace period ran out (§8.4), agent_unavailable otherwise.
func failureCode(reason string) commonpb.ErrorCode {
	if reason == ReasonShutdownTimeout {
		return commonpb.ErrorCode_AGENT_SHUTDOWN
	}
	return commonpb.ErrorCode_AGENT_UNAVAILABLE
}

// failQueued ends the queued tasks (the agent will not run them).
func (p *dispatcher) failQueued(ctx workflow.Context, code commonpb.ErrorCode, reason string) {
	for i := range p.d.Queue {
		p.event(ctx, &p.d.Queue[i], TaskEvent{State: TaskFailed, ErrorCode: code, Reason: reason})
	}
	p.d.Queue = nil
}

// afterStep reacts to the lifecycle's state after each event: a FAILED agent loses its
// running task (with the failure's reason as error code, e.g. agent_shutdown_timeout), and an
// agent that became RUNNABLE again (ready, recovered) gets the head of its queue.
func (p *dispatcher) afterStep(ctx workflow.Context) error {
	if r := p.d.Running; r != nil && p.w.state == commonpb.AgentState_FAILED_STATE {
		p.d.Running = nil
		p.stopTimer()
		p.leaveWaits(ctx, r)
		if p.w.cleanup {
			p.stopped = append(p.stopped, r.TaskID)
		}
		p.event(ctx, &r.QueuedTask, TaskEvent{State: TaskFailed, ErrorCode: failureCode(p.w.reason), Reason: "agent failed: " + p.w.reason})
	}
	err := p.dispatch(ctx)
	p.w.reportStep(ctx)
	p.flush(ctx)
	return err
}
