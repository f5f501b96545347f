package workflows

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/telemetry"
)

// Names of the agent lifecycle workflow's messages (§8, §14).
const (
	// AgentRegisterSignal carries an AgentRegistration: the agent registered (again).
	AgentRegisterSignal = "agent-register"
	// AgentReadySignal carries an AgentReady: the agent opened its stream or heartbeated.
	AgentReadySignal = "agent-ready"
	// AgentDeregisterSignal carries an AgentDeregistration and ends the lifecycle (§14:
	// deregistration is explicit).
	AgentDeregisterSignal = "agent-deregister"
	// AgentStateReportSignal carries an AgentStateReport: the agent reported a state (the
	// state field of a heartbeat) that differs from the registry projection's.
	AgentStateReportSignal = "agent-state-report"
	// AgentShutdownSignal carries an AgentShutdown: SchedulerService.ShutdownAgent (§8.4).
	AgentShutdownSignal = "agent-shutdown"
	// AgentStatusQuery returns an AgentStatus.
	AgentStatusQuery = "agent-status"
)

// Default state timeouts of §8.3 and heartbeat settings of §14.
const (
	// DefaultInitTimeout bounds INITIALIZING.
	DefaultInitTimeout = 60 * time.Second
	// DefaultResourceTimeout bounds WAITING_RESOURCES.
	DefaultResourceTimeout = 300 * time.Second
	// DefaultSuspendTimeout bounds SUSPENDED.
	DefaultSuspendTimeout = 3600 * time.Second
	// DefaultRecoveryTimeout bounds RECOVERING.
	DefaultRecoveryTimeout = 120 * time.Second
	// DefaultShutdownGrace is the SHUTTING_DOWN grace period (§8.4).
	DefaultShutdownGrace = 30 * time.Second
	// DefaultHeartbeatInterval is how often the scheduler heartbeats an agent (§14).
	DefaultHeartbeatInterval = 30 * time.Second
	// DefaultHeartbeatMisses is how many consecutive missed intervals mark an agent
	// unavailable (the §14 debounce).
	DefaultHeartbeatMisses = 3
)

// The error codes of timeout-triggered transitions (§8.2, §8.3, §8.4); they are the reason
// of the FAILED transition.
const (
	ReasonInitTimeout     = "init_timeout"
	ReasonResourceTimeout = "resource_timeout"
	ReasonSuspendTimeout  = "suspend_timeout"
	ReasonRecoveryTimeout = "recovery_timeout"
	ReasonShutdownTimeout = "agent_shutdown_timeout"
	// ReasonHeartbeatLoss begins the reason of the FAILED transition of an agent that missed
	// HeartbeatMisses consecutive heartbeat intervals (§14's debounce): its process is gone or
	// cut off, and what it holds is released (§8.4).
	ReasonHeartbeatLoss = "agent_unavailable"
)

// Change IDs of workflow.GetVersion: runs started before a change keep their old command
// sequence when they replay.
const (
	versionStateTimeouts = "agent-state-timeouts"
	versionStateReports  = "agent-state-reports"
	versionShutdown      = "agent-shutdown"
	versionHeartbeats    = "agent-heartbeats"
	versionStateLocal    = "agent-state-local-activity"
	// versionStepReports marks runs that record a step's transitions and send its task
	// events together at the step's end (reportStep).
	versionStepReports = "agent-step-reports"
	// versionCleanup marks runs that fail the agent after the heartbeat debounce, recover it
	// when heartbeats resume, and release what it holds when it fails or deregisters (§8.4,
	// agent_cleanup.go).
	versionCleanup = "agent-cleanup"
	// versionHistoryLimit marks runs that continue as new once their history passes
	// HistoryLimit too, not only when Temporal suggests it, and only with every update
	// handler finished (shouldContinueAsNew).
	versionHistoryLimit = "agent-history-limit"
)

// AgentHistoryLimit is the history length (events) past which an agent's lifecycle run
// continues as new at its next quiet step, even if Temporal has not suggested it yet: a
// long-lived agent's history stays far below Temporal's limits, and a new run replays
// quickly on a worker that picks it up after a restart.
const AgentHistoryLimit = 10_000

// AgentWorkflowID is the workflow ID of an agent's lifecycle: "agent/<agent_id>".
func AgentWorkflowID(agentID string) string { return "agent/" + agentID }

// AgentLifecycleInput starts (or continues as new) an agent's lifecycle workflow. Every
// duration is optional: zero means the RFC default.
type AgentLifecycleInput struct {
	// AgentID is the registered agent_id.
	AgentID string
	// Name is the descriptor's name, for notifications.
	Name string
	// Capabilities are the descriptor's capabilities, for notifications.
	Capabilities []string
	// InitTimeout bounds INITIALIZING; zero means DefaultInitTimeout.
	InitTimeout time.Duration
	// ResourceTimeout bounds WAITING_RESOURCES; zero means DefaultResourceTimeout.
	ResourceTimeout time.Duration `json:",omitempty"`
	// SuspendTimeout bounds SUSPENDED; zero means DefaultSuspendTimeout.
	SuspendTimeout time.Duration `json:",omitempty"`
	// RecoveryTimeout bounds RECOVERING; zero means DefaultRecoveryTimeout.
	RecoveryTimeout time.Duration `json:",omitempty"`
	// ShutdownGrace is the grace period of a shutdown the agent reports itself (ShutdownAgent
	// names its own); zero means DefaultShutdownGrace.
	ShutdownGrace time.Duration `json:",omitempty"`
	// HeartbeatInterval is the §14 heartbeat period; zero means DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration `json:",omitempty"`
	// HeartbeatMisses is the debounce: consecutive missed intervals before the agent is marked
	// unavailable; zero means DefaultHeartbeatMisses.
	HeartbeatMisses int `json:",omitempty"`
	// State is the state carried over a continue-as-new; zero for a fresh registration.
	State commonpb.AgentState
	// Since is when State was entered, carried over a continue-as-new.
	Since time.Time
	// Reason is the reason of State, carried over a continue-as-new.
	Reason string `json:",omitempty"`
	// Grace is the grace period of a shutdown in progress, carried over a continue-as-new.
	Grace time.Duration `json:",omitempty"`
	// Heartbeat is the heartbeat monitor's state, carried over a continue-as-new.
	Heartbeat activities.HeartbeatState `json:",omitempty"`
	// PreemptTimeout is how long a PREEMPT_REQUEST outside a non-preemptible section may stay
	// unanswered before forced preemption; zero means DefaultPreemptTimeout.
	PreemptTimeout time.Duration `json:",omitempty"`
	// TerminateGrace is TERMINATE's grace period before KILL; zero means DefaultTerminateGrace.
	TerminateGrace time.Duration `json:",omitempty"`
	// HistoryLimit is the history length past which the run continues as new; zero means
	// AgentHistoryLimit. It is carried over a continue-as-new.
	HistoryLimit int `json:",omitempty"`
	// Dispatch is the agent's task queue and running task, carried over a continue-as-new.
	Dispatch Dispatch `json:",omitempty"`
	// ReleasedSince is the Since of the FAILED state whose cleanup ran, carried over a
	// continue-as-new so that it runs once per failure.
	ReleasedSince time.Time `json:",omitempty"`
}

// AgentRegistration is the payload of AgentRegisterSignal.
type AgentRegistration struct {
	// Name is the (possibly updated) descriptor name.
	Name string
	// Capabilities are the (possibly updated) capabilities.
	Capabilities []string
}

// AgentReady is the payload of AgentReadySignal.
type AgentReady struct {
	// Via says what showed readiness: "stream" or "heartbeat".
	Via string
}

// AgentStateReport is the payload of AgentStateReportSignal.
type AgentStateReport struct {
	// State is the state the agent reports.
	State commonpb.AgentState
	// Via says where the report came from, e.g. "heartbeat".
	Via string
}

// AgentShutdown is the payload of AgentShutdownSignal.
type AgentShutdown struct {
	// GracePeriod is how long the agent has to deregister; zero means DefaultShutdownGrace.
	GracePeriod time.Duration
	// Reason explains the request.
	Reason string
}

// AgentDeregistration is the payload of AgentDeregisterSignal.
type AgentDeregistration struct {
	// Reason is the reason given to DeregisterAgent.
	Reason string
}

// AgentStatus is the answer to AgentStatusQuery.
type AgentStatus struct {
	// AgentID is the agent.
	AgentID string
	// State is the current lifecycle state's enum name, e.g. "RUNNABLE".
	State string
	// Since is when the state was entered.
	Since time.Time
	// Reason explains the last transition (an error_code for timeouts).
	Reason string
	// Available is the §14 health flag: false once the agent missed HeartbeatMisses
	// consecutive heartbeat intervals, true again when it heartbeats.
	Available bool
	// MissedHeartbeats counts the consecutive missed heartbeat intervals.
	MissedHeartbeats int
}

// AgentLifecycleResult is what a finished lifecycle returns.
type AgentLifecycleResult struct {
	// FinalState is the last state's enum name.
	FinalState string
	// Reason is the deregistration reason.
	Reason string
}

// AgentLifecycle is the durable lifecycle of one registered agent (§8, §14): it starts in
// INITIALIZING, becomes RUNNABLE once the agent shows it is ready (opens its stream or sends
// a heartbeat), follows the states the agent reports, fails with the §8.3 error code when it
// stays too long in a timed state (INITIALIZING, WAITING_RESOURCES, SUSPENDED, RECOVERING,
// SHUTTING_DOWN), recovers on re-registration after a failure, heartbeats the agent and marks
// it unavailable and FAILED after missed heartbeats (§14), recovering it when they resume,
// releases what it holds whenever it fails and when it ends (§8.4, agent_cleanup.go), and
// ends on explicit deregistration after telling the other agents. Every transition goes
// through protocol.AgentTransitionLegal and is recorded.
func AgentLifecycle(ctx workflow.Context, in AgentLifecycleInput) (AgentLifecycleResult, error) {
	w := &agentLifecycle{in: in, grace: in.Grace, hb: in.Heartbeat, releasedSince: in.ReleasedSince}
	return w.run(ctx)
}

type agentLifecycle struct {
	in     AgentLifecycleInput
	state  commonpb.AgentState
	since  time.Time
	reason string
	// grace is the grace period of the current SHUTTING_DOWN, zero for the default.
	grace time.Duration
	// hb is the heartbeat monitor's state.
	hb activities.HeartbeatState

	// What one run keeps between the steps of its loop (see run).
	logger log.Logger
	// tasks and heartbeats say whether this run schedules tasks and heartbeats the agent
	// (both behind GetVersion, for histories recorded before them).
	tasks, heartbeats bool
	disp              *dispatcher
	// stepReports says this run reports each step at once (versionStepReports); inStep is
	// set while a step runs, report holds what the step has to record and tell, and
	// upserted is the AgentState search attribute's value this run last set (nil before).
	stepReports bool
	inStep      bool
	report      activities.StepReport
	batches     []taskBatch
	upserted    *commonpb.AgentState
	// cleanup says this run applies versionCleanup; releasedSince is ReleasedSince.
	cleanup       bool
	releasedSince time.Time
	// historyLimit says this run applies versionHistoryLimit.
	historyLimit bool
	// deregistered ends the loop; stepErr, set by a handler, fails the run.
	deregistered *AgentDeregistration
	stepErr      error
	// initTimer bounds INITIALIZING (§8.3).
	initTimeout     time.Duration
	initTimer       workflow.Future
	cancelInitTimer workflow.CancelFunc
	// stateTimer bounds one entry into another timed state (§8.3).
	stateTimer       workflow.Future
	cancelStateTimer workflow.CancelFunc
	timerState       commonpb.AgentState
	timerSince       time.Time
	timerTimeout     time.Duration
	timerCode        string
	// The heartbeat monitor (§14): one timer and one activity per interval.
	hbInterval       time.Duration
	hbMisses         int
	hbTimer, hbCheck workflow.Future
	hbCtx            workflow.Context
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// stateTimeout returns the §8.3 timeout of a state other than INITIALIZING (which keeps its
// own timer) and the error code of its expiry; zero for an untimed state.
func (w *agentLifecycle) stateTimeout(s commonpb.AgentState) (time.Duration, string) {
	switch s {
	case commonpb.AgentState_WAITING_RESOURCES:
		return orDefault(w.in.ResourceTimeout, DefaultResourceTimeout), ReasonResourceTimeout
	case commonpb.AgentState_SUSPENDED:
		return orDefault(w.in.SuspendTimeout, DefaultSuspendTimeout), ReasonSuspendTimeout
	case commonpb.AgentState_RECOVERING:
		return orDefault(w.in.RecoveryTimeout, DefaultRecoveryTimeout), ReasonRecoveryTimeout
	case commonpb.AgentState_SHUTTING_DOWN:
		return orDefault(w.grace, orDefault(w.in.ShutdownGrace, DefaultShutdownGrace)), ReasonShutdownTimeout
	}
	return 0, ""
}

func (w *agentLifecycle) run(ctx workflow.Context) (AgentLifecycleResult, error) {
	w.logger = workflow.GetLogger(ctx)
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
	})
	if err := workflow.SetQueryHandler(ctx, AgentStatusQuery, func() (AgentStatus, error) {
		return AgentStatus{AgentID: w.in.AgentID, State: w.state.String(), Since: w.since, Reason: w.reason,
			Available: !w.hb.Unavailable, MissedHeartbeats: w.hb.Misses}, nil
	}); err != nil {
		return AgentLifecycleResult{}, err
	}
	if err := w.begin(ctx); err != nil {
		return AgentLifecycleResult{}, err
	}
	ch := w.channels(ctx)
	w.armInitTimer(ctx)
	// The heartbeat monitor (§14). A failed check is skipped, not retried forever: the next
	// interval checks again.
	w.heartbeats = workflow.GetVersion(ctx, versionHeartbeats, workflow.DefaultVersion, 1) >= 1
	w.hbInterval = orDefault(w.in.HeartbeatInterval, DefaultHeartbeatInterval)
	w.hbMisses = cmp.Or(max(w.in.HeartbeatMisses, 0), DefaultHeartbeatMisses)
	w.hbCtx = workflow.WithRetryPolicy(ctx, temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3})
	// The scheduler for this agent's tasks (§7): enqueue, preempt, CONTROL ACKs, sections.
	w.tasks = workflow.GetVersion(ctx, versionTasks, workflow.DefaultVersion, 1) >= 1
	w.stepReports = w.tasks && workflow.GetVersion(ctx, versionStepReports, workflow.DefaultVersion, 1) >= 1
	w.cleanup = w.tasks && workflow.GetVersion(ctx, versionCleanup, workflow.DefaultVersion, 1) >= 1
	w.historyLimit = w.tasks && workflow.GetVersion(ctx, versionHistoryLimit, workflow.DefaultVersion, 1) >= 1
	w.disp = newDispatcher(ctx, w, w.in.Dispatch)
	if err := workflow.SetQueryHandler(ctx, AgentTasksQuery, func() (DispatchStatus, error) { return w.disp.status(), nil }); err != nil {
		return AgentLifecycleResult{}, err
	}
	// After w.tasks is known: the validator reads it.
	if err := w.setEnqueueUpdate(ctx, ch); err != nil {
		return AgentLifecycleResult{}, err
	}

	for w.deregistered == nil {
		sel := w.selector(ctx, ch)
		w.inStep = true
		sel.Select(ctx)
		if w.stepErr == nil && w.tasks {
			w.stepErr = w.disp.afterStep(ctx)
		}
		if w.stepErr == nil && w.cleanup && w.state == commonpb.AgentState_FAILED_STATE && !w.releasedSince.Equal(w.since) {
			// §8.4: however the agent failed, what it holds is released once per failure.
			w.releasedSince = w.since
			w.releaseAll(ctx, w.reason, "failed/"+w.since.UTC().Format(time.RFC3339Nano))
		}
		w.inStep = false
		if w.stepErr != nil {
			return AgentLifecycleResult{}, w.stepErr
		}
		w.disarmTimers()
		if w.deregistered == nil && !sel.HasPending() && w.shouldContinueAsNew(ctx) {
			// Long-lived agents accumulate history; start afresh with the state carried over.
			// Pending signals are handled first (HasPending) so none is lost across the boundary.
			next := w.in
			next.State, next.Since = w.state, w.since
			next.Reason, next.Grace, next.Heartbeat = w.reason, w.grace, w.hb
			next.Dispatch = w.disp.d
			next.ReleasedSince = w.releasedSince
			return AgentLifecycleResult{}, workflow.NewContinueAsNewError(ctx, AgentLifecycle, next)
		}
	}
	return w.end(ctx)
}

// shouldContinueAsNew says whether the run continues as new after this step: when Temporal
// suggests it or (versionHistoryLimit) the history passed HistoryLimit, and then only once
// every update handler has finished, since an update still running would be lost with the run.
func (w *agentLifecycle) shouldContinueAsNew(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	if !w.historyLimit {
		return info.GetContinueAsNewSuggested()
	}
	due := info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() > cmp.Or(max(w.in.HistoryLimit, 0), AgentHistoryLimit)
	return due && workflow.AllHandlersFinished(ctx)
}

// begin records a fresh registration and announces the join (§14), or takes up the state a
// continue-as-new carried over.
func (w *agentLifecycle) begin(ctx workflow.Context) error {
	if w.in.State != commonpb.AgentState_AGENT_STATE_UNSPECIFIED {
		w.state, w.since, w.reason = w.in.State, w.in.Since, w.in.Reason
		return nil
	}
	if err := w.enter(ctx, commonpb.AgentState_INITIALIZING, "registered"); err != nil {
		return err
	}
	var acts *activities.Activities
	return workflow.ExecuteActivity(ctx, acts.NotifyRegistryEvent, activities.RegistryEventInput{
		AgentID: w.in.AgentID, Name: w.in.Name, Capabilities: w.in.Capabilities, Event: activities.AgentJoined,
		EventID: workflow.GetInfo(ctx).WorkflowExecution.RunID,
	}).Get(ctx, nil)
}

// lifecycleChannels are the signal channels of one run.
type lifecycleChannels struct {
	register, ready, deregister, report, shutdown workflow.ReceiveChannel
	enqueue, preempt, ack, control, responseWait  workflow.ReceiveChannel
	acks                                          workflow.ReceiveChannel
	// enqueued holds the tasks AgentTaskEnqueueUpdate brought, read like enqueue.
	enqueued workflow.Channel
}

func (w *agentLifecycle) channels(ctx workflow.Context) lifecycleChannels {
	return lifecycleChannels{
		register:   workflow.GetSignalChannel(ctx, AgentRegisterSignal),
		ready:      workflow.GetSignalChannel(ctx, AgentReadySignal),
		deregister: workflow.GetSignalChannel(ctx, AgentDeregisterSignal),
		report:     workflow.GetSignalChannel(ctx, AgentStateReportSignal),
		shutdown:   workflow.GetSignalChannel(ctx, AgentShutdownSignal),
		enqueue:    workflow.GetSignalChannel(ctx, AgentTaskEnqueueSignal),
		preempt:    workflow.GetSignalChannel(ctx, AgentPreemptSignal),
		ack:        workflow.GetSignalChannel(ctx, AgentControlAckSignal),
		// Histories recorded before AgentControlAcksSignal existed never carry it, so
		// listening to it changes nothing when they replay.
		acks:    workflow.GetSignalChannel(ctx, AgentControlAcksSignal),
		control: workflow.GetSignalChannel(ctx, AgentControlSignal),
		// Response waits are tasks' business (004 §2): the channel is read with the others.
		responseWait: workflow.GetSignalChannel(ctx, AgentResponseWaitSignal),
		// Buffered, so that the update's handler never blocks: it completes in the workflow
		// task that accepts it, and nothing is left running when the run continues as new
		// (the loop continues as new only when no channel holds anything, sel.HasPending).
		enqueued: workflow.NewBufferedChannel(ctx, enqueueBuffer),
	}
}

// enqueueBuffer bounds the tasks AgentTaskEnqueueUpdate may bring in one workflow task; an
// update beyond it is refused, and SubmitTask sends the signal instead.
const enqueueBuffer = 1024

// setEnqueueUpdate registers AgentTaskEnqueueUpdate's handler, which hands the task to the
// loop through ch.enqueued; onEnqueue applies it as it applies the signal. Registering a
// handler adds no command, so histories recorded before it replay unchanged.
func (w *agentLifecycle) setEnqueueUpdate(ctx workflow.Context, ch lifecycleChannels) error {
	return workflow.SetUpdateHandlerWithOptions(ctx, AgentTaskEnqueueUpdate,
		func(ctx workflow.Context, q QueuedTask) error {
			if !ch.enqueued.SendAsync(q) {
				return fmt.Errorf("agent %s has %d tasks waiting to be queued; send the signal", w.in.AgentID, enqueueBuffer)
			}
			return nil
		},
		workflow.UpdateHandlerOptions{Validator: func(q QueuedTask) error {
			switch {
			case !w.tasks:
				return errors.New("this lifecycle run predates task dispatch; send the signal")
			case q.TaskID == "":
				return errors.New("a queued task needs its task_id")
			}
			return nil
		}})
}

// armInitTimer starts the INITIALIZING timer (§8.3) for what is left of it.
func (w *agentLifecycle) armInitTimer(ctx workflow.Context) {
	w.initTimeout = orDefault(w.in.InitTimeout, DefaultInitTimeout)
	if w.state != commonpb.AgentState_INITIALIZING {
		return
	}
	remaining := w.initTimeout - workflow.Now(ctx).Sub(w.since)
	var timerCtx workflow.Context
	timerCtx, w.cancelInitTimer = workflow.WithCancel(ctx)
	w.initTimer = workflow.NewTimer(timerCtx, max(remaining, time.Millisecond))
}

// selector arms the timers the current state needs and returns one step's selector over
// every signal and timer.
func (w *agentLifecycle) selector(ctx workflow.Context, ch lifecycleChannels) workflow.Selector {
	if d, code := w.stateTimeout(w.state); d > 0 && (w.stateTimer == nil || w.timerState != w.state || !w.timerSince.Equal(w.since)) &&
		workflow.GetVersion(ctx, versionStateTimeouts, workflow.DefaultVersion, 1) >= 1 {
		var timerCtx workflow.Context
		timerCtx, w.cancelStateTimer = workflow.WithCancel(ctx)
		w.stateTimer = workflow.NewTimer(timerCtx, max(d-workflow.Now(ctx).Sub(w.since), time.Millisecond))
		w.timerState, w.timerSince, w.timerTimeout, w.timerCode = w.state, w.since, d, code
	}
	if w.heartbeats && w.hbTimer == nil && w.hbCheck == nil {
		w.hbTimer = workflow.NewTimer(ctx, w.hbInterval)
	}
	on := func(handle func(workflow.Context, workflow.ReceiveChannel)) func(workflow.ReceiveChannel, bool) {
		return func(c workflow.ReceiveChannel, _ bool) { handle(ctx, c) }
	}
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(ch.ready, on(w.onReady))
	sel.AddReceive(ch.register, on(w.onRegister))
	sel.AddReceive(ch.deregister, on(w.onDeregister))
	sel.AddReceive(ch.report, on(w.onReport))
	sel.AddReceive(ch.shutdown, on(w.onShutdown))
	if w.tasks {
		sel.AddReceive(ch.enqueue, on(w.onEnqueue))
		sel.AddReceive(ch.enqueued, on(w.onEnqueue))
		sel.AddReceive(ch.preempt, on(w.onPreempt))
		sel.AddReceive(ch.ack, on(w.onAck))
		sel.AddReceive(ch.acks, on(w.onAcks))
		sel.AddReceive(ch.control, on(w.onControl))
		sel.AddReceive(ch.responseWait, on(w.onResponseWait))
		w.disp.armTimer(ctx)
		if w.disp.timer.f != nil {
			sel.AddFuture(w.disp.timer.f, func(f workflow.Future) {
				if f.Get(ctx, nil) == nil {
					w.stepErr = w.disp.onTimer(ctx)
				}
			})
		}
		// Armed only while a task waits on a response, which only runs that apply response
		// waits (versionResponseWaits) record: older histories never see this timer.
		w.disp.armWaitTimer(ctx)
		if w.disp.waitTimer.f != nil {
			sel.AddFuture(w.disp.waitTimer.f, func(f workflow.Future) {
				if f.Get(ctx, nil) == nil {
					w.stepErr = w.disp.onWaitTimer(ctx)
				}
			})
		}
	}
	if w.initTimer != nil && w.state == commonpb.AgentState_INITIALIZING {
		sel.AddFuture(w.initTimer, func(f workflow.Future) { w.onInitTimeout(ctx, f) })
	}
	if w.stateTimer != nil {
		sel.AddFuture(w.stateTimer, func(f workflow.Future) { w.onStateTimeout(ctx, f) })
	}
	if w.hbTimer != nil {
		sel.AddFuture(w.hbTimer, func(workflow.Future) { w.checkHeartbeat() })
	}
	if w.hbCheck != nil {
		sel.AddFuture(w.hbCheck, func(f workflow.Future) { w.onHeartbeatChecked(ctx, f) })
	}
	return sel
}

// disarmTimers cancels the timers of states the last step left.
func (w *agentLifecycle) disarmTimers() {
	if w.state != commonpb.AgentState_INITIALIZING && w.cancelInitTimer != nil {
		w.cancelInitTimer()
		w.cancelInitTimer, w.initTimer = nil, nil
	}
	if w.stateTimer != nil && (w.timerState != w.state || !w.timerSince.Equal(w.since)) {
		w.cancelStateTimer()
		w.stateTimer = nil
	}
}

// onReady applies AgentReadySignal: INITIALIZING → RUNNABLE.
func (w *agentLifecycle) onReady(ctx workflow.Context, c workflow.ReceiveChannel) {
	var r AgentReady
	c.Receive(ctx, &r)
	if w.state == commonpb.AgentState_INITIALIZING {
		w.stepErr = w.transition(ctx, commonpb.AgentState_RUNNABLE, "ready via "+r.Via)
	}
}

// onRegister applies AgentRegisterSignal: new name and capabilities, and recovery after a
// failure (§8.1 RECOVERING).
func (w *agentLifecycle) onRegister(ctx workflow.Context, c workflow.ReceiveChannel) {
	var r AgentRegistration
	c.Receive(ctx, &r)
	w.in.Name, w.in.Capabilities = r.Name, r.Capabilities
	if w.state == commonpb.AgentState_FAILED_STATE {
		if w.stepErr = w.transition(ctx, commonpb.AgentState_RECOVERING, "re-registered after failure"); w.stepErr == nil {
			w.stepErr = w.transition(ctx, commonpb.AgentState_RUNNABLE, "recovered by re-registration")
		}
	}
}

// onDeregister applies AgentDeregisterSignal: the loop ends.
func (w *agentLifecycle) onDeregister(ctx workflow.Context, c workflow.ReceiveChannel) {
	var d AgentDeregistration
	c.Receive(ctx, &d)
	w.deregistered = &d
}

// onReport applies AgentStateReportSignal: a state the agent reports, along legal edges only.
func (w *agentLifecycle) onReport(ctx workflow.Context, c workflow.ReceiveChannel) {
	var r AgentStateReport
	c.Receive(ctx, &r)
	if workflow.GetVersion(ctx, versionStateReports, workflow.DefaultVersion, 1) == workflow.DefaultVersion || r.State == w.state {
		return
	}
	from := w.state
	if w.stepErr = w.transition(ctx, r.State, "reported via "+r.Via); w.stepErr == nil && from != w.state && w.state == commonpb.AgentState_SHUTTING_DOWN {
		w.grace = 0 // a shutdown the agent reports itself has the default grace
	}
}

// onShutdown applies AgentShutdownSignal (§8.4).
func (w *agentLifecycle) onShutdown(ctx workflow.Context, c workflow.ReceiveChannel) {
	var s AgentShutdown
	c.Receive(ctx, &s)
	if workflow.GetVersion(ctx, versionShutdown, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	if !protocol.AgentTransitionLegal(w.state, commonpb.AgentState_SHUTTING_DOWN) {
		w.logger.Warn("shutdown request refused", "agent_id", w.in.AgentID, "state", w.state.String(), "reason", s.Reason)
		return
	}
	w.grace = orDefault(s.GracePeriod, DefaultShutdownGrace)
	reason := "shutdown requested"
	if s.Reason != "" {
		reason += ": " + s.Reason
	}
	if w.stepErr = w.transition(ctx, commonpb.AgentState_SHUTTING_DOWN, reason); w.stepErr == nil && w.tasks {
		// §8.4: no task is dispatched during the grace period; the queued ones fail, the
		// running one may finish. The agent is told, so it can wind down and deregister.
		w.disp.failQueued(ctx, commonpb.ErrorCode_AGENT_SHUTDOWN, "agent_shutdown: agent "+w.in.AgentID+" is shutting down (§8.4)")
		if _, err := w.disp.send(ctx, protocol.Control{Type: protocol.ControlShutdown, GraceMS: w.grace.Milliseconds(), Reason: reason}); err != nil {
			w.logger.Warn("could not tell the agent to shut down", "agent_id", w.in.AgentID, "error", err)
		}
	}
}

// onEnqueue applies AgentTaskEnqueueSignal or AgentTaskEnqueueUpdate: an admitted task joins
// the queue (§7.1).
func (w *agentLifecycle) onEnqueue(ctx workflow.Context, c workflow.ReceiveChannel) {
	var q QueuedTask
	c.Receive(ctx, &q)
	// The signal's span, so the task's dispatch joins the trace of whoever queued it; the
	// update's channel has no recorded spans and takes none.
	q.span = telemetry.TakeSignalSpan(ctx, c.Name())
	if w.state == commonpb.AgentState_SHUTTING_DOWN {
		w.disp.event(ctx, &q, TaskEvent{State: TaskRejected, ErrorCode: commonpb.ErrorCode_AGENT_SHUTDOWN, Reason: "agent_shutdown: agent " + w.in.AgentID + " is shutting down (§8.1)"})
		return
	}
	w.stepErr = w.disp.enqueue(ctx, q)
}

// onPreempt applies AgentPreemptSignal (§7.2).
func (w *agentLifecycle) onPreempt(ctx workflow.Context, c workflow.ReceiveChannel) {
	var r PreemptionRequest
	c.Receive(ctx, &r)
	if run := w.disp.d.Running; run != nil && (r.TaskID == "" || r.TaskID == run.TaskID) {
		w.stepErr = w.disp.preempt(ctx, cmp.Or(r.Reason, "RequestPreemption"))
	}
}

// onAck applies AgentControlAckSignal: an ACK of one of the scheduler's CONTROL messages.
func (w *agentLifecycle) onAck(ctx workflow.Context, c workflow.ReceiveChannel) {
	var a ControlAck
	c.Receive(ctx, &a)
	w.stepErr = w.disp.onAck(ctx, a)
}

// onAcks applies AgentControlAcksSignal: several ACKs, in order, in one step.
func (w *agentLifecycle) onAcks(ctx workflow.Context, c workflow.ReceiveChannel) {
	var as ControlAcks
	c.Receive(ctx, &as)
	for _, a := range as.Acks {
		if w.stepErr = w.disp.onAck(ctx, a); w.stepErr != nil {
			return
		}
	}
}

// onControl applies AgentControlSignal: a non-preemptible section's BEGIN or END (§7.2).
func (w *agentLifecycle) onControl(ctx workflow.Context, c workflow.ReceiveChannel) {
	var a AgentControl
	c.Receive(ctx, &a)
	w.stepErr = w.disp.onControl(ctx, a)
}

// onInitTimeout fails an agent that never became ready (§8.3 init_timeout).
func (w *agentLifecycle) onInitTimeout(ctx workflow.Context, f workflow.Future) {
	if f.Get(ctx, nil) != nil {
		return // cancelled
	}
	w.logger.Warn("agent never became ready; init_timeout", "agent_id", w.in.AgentID, "timeout", w.initTimeout)
	w.stepErr = w.transition(ctx, commonpb.AgentState_FAILED_STATE, ReasonInitTimeout)
}

// onStateTimeout fails an agent that stayed too long in a timed state (§8.3).
func (w *agentLifecycle) onStateTimeout(ctx workflow.Context, f workflow.Future) {
	w.stateTimer = nil
	if f.Get(ctx, nil) != nil || w.state != w.timerState || !w.since.Equal(w.timerSince) {
		return // cancelled, or the state was left meanwhile
	}
	// §8.3: every timeout-triggered transition is logged (and recorded with its code).
	w.logger.Warn("agent state timed out", "agent_id", w.in.AgentID, "state", w.timerState.String(), "timeout", w.timerTimeout, "error_code", w.timerCode)
	w.stepErr = w.transition(ctx, commonpb.AgentState_FAILED_STATE, w.timerCode)
}

// checkHeartbeat starts one interval's heartbeat check (§14).
func (w *agentLifecycle) checkHeartbeat() {
	var acts *activities.Activities
	w.hbTimer = nil
	w.hbCheck = workflow.ExecuteActivity(w.hbCtx, acts.CheckHeartbeat, activities.HeartbeatCheckInput{
		AgentID: w.in.AgentID, State: w.hb, MaxMisses: w.hbMisses, Interval: w.hbInterval,
	})
}

// onHeartbeatChecked takes the monitor's new state from a finished check.
func (w *agentLifecycle) onHeartbeatChecked(ctx workflow.Context, f workflow.Future) {
	w.hbCheck = nil
	var next activities.HeartbeatState
	if err := f.Get(ctx, &next); err != nil {
		w.logger.Warn("heartbeat check failed", "agent_id", w.in.AgentID, "error", err)
		return
	}
	was := w.hb.Unavailable
	w.hb = next
	if w.cleanup {
		w.stepErr = w.onAvailability(ctx, was)
	}
}

// end fails what is left of the agent's tasks, announces the leave (§14) and records the
// final state.
func (w *agentLifecycle) end(ctx workflow.Context) (AgentLifecycleResult, error) {
	var acts *activities.Activities
	var failed []string
	if w.tasks {
		failed = w.disp.taskIDs()
		w.disp.failAll(ctx, commonpb.ErrorCode_AGENT_SHUTDOWN, "agent_shutdown: agent "+w.in.AgentID+" deregistered: "+w.deregistered.Reason)
		w.reportStep(ctx)
		w.disp.flush(ctx)
	}
	if w.cleanup {
		// §8.4: what the agent holds is released before the leave is announced.
		w.release(ctx, deregisteredWhy(w.deregistered.Reason), "deregistered", failed, commonpb.ErrorCode_AGENT_SHUTDOWN)
	}
	if err := workflow.ExecuteActivity(ctx, acts.NotifyRegistryEvent, activities.RegistryEventInput{
		AgentID: w.in.AgentID, Name: w.in.Name, Event: activities.AgentLeft, Reason: w.deregistered.Reason,
		EventID: workflow.GetInfo(ctx).WorkflowExecution.RunID + "/leave",
	}).Get(ctx, nil); err != nil {
		return AgentLifecycleResult{}, err
	}
	if err := workflow.ExecuteActivity(ctx, acts.RecordAgentState, activities.AgentStateInput{
		AgentID: w.in.AgentID, From: w.state, To: w.state, Reason: "deregistered: " + w.deregistered.Reason, Final: true,
	}).Get(ctx, nil); err != nil {
		return AgentLifecycleResult{}, err
	}
	return AgentLifecycleResult{FinalState: w.state.String(), Reason: w.deregistered.Reason}, nil
}

// transition moves to a new state if the lifecycle table allows it; an illegal request is
// refused and logged, never applied (§8).
func (w *agentLifecycle) transition(ctx workflow.Context, to commonpb.AgentState, reason string) error {
	if !protocol.AgentTransitionLegal(w.state, to) {
		workflow.GetLogger(ctx).Warn("illegal agent transition refused", "agent_id", w.in.AgentID, "from", w.state.String(), "to", to.String(), "reason", reason)
		return nil
	}
	return w.enter(ctx, to, reason)
}

// enter records a state: in the workflow, its search attribute and, through an activity, the
// registry projection and the audit log.
func (w *agentLifecycle) enter(ctx workflow.Context, to commonpb.AgentState, reason string) error {
	from := w.state
	w.state, w.since, w.reason = to, workflow.Now(ctx), reason
	if w.inStep && w.stepReports {
		// Recorded with the rest of the step (reportStep): a task's RUN → RUNNING →
		// COMPLETED → RUNNABLE walk is then one marker and one search-attribute upsert per
		// step rather than one of each per state.
		w.report.States = append(w.report.States, activities.AgentStateInput{AgentID: w.in.AgentID, From: from, To: to, Reason: reason})
		return nil
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, AgentStateKey.ValueSet(to.String())); err != nil {
		return err
	}
	w.upserted = &to
	var acts *activities.Activities
	rec := activities.AgentStateInput{AgentID: w.in.AgentID, From: from, To: to, Reason: reason}
	if workflow.GetVersion(ctx, versionStateLocal, workflow.DefaultVersion, 1) >= 1 {
		// A local activity: a task's RUN → RUNNING → COMPLETED → RUNNABLE walk records three
		// states, and a task-queue round trip for each kept the scheduler from reacting to a
		// preemption meanwhile.
		lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
			StartToCloseTimeout: 10 * time.Second,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumInterval: 10 * time.Second},
		})
		return workflow.ExecuteLocalActivity(lctx, acts.RecordAgentState, rec).Get(ctx, nil)
	}
	return workflow.ExecuteActivity(ctx, acts.RecordAgentState, rec).Get(ctx, nil)
}

// reportStep sets the AgentState search attribute to the state the step ended in, if it
// changed, and records the step's transitions and sends its task events in one local
// activity (activities.ReportStep). States a step passed through within one workflow task
// were never visible in the Temporal UI, so one upsert per step loses nothing; every
// transition still reaches the audit log. A report that keeps failing for ten minutes is
// logged and given up, as a task event always was; the registry projection is corrected by
// the next step's report.
func (w *agentLifecycle) reportStep(ctx workflow.Context) {
	if len(w.report.States) > 0 && (w.upserted == nil || *w.upserted != w.state) {
		if err := workflow.UpsertTypedSearchAttributes(ctx, AgentStateKey.ValueSet(w.state.String())); err != nil {
			w.logger.Error("could not set the agent's state attribute", "agent_id", w.in.AgentID, "error", err)
		} else {
			st := w.state
			w.upserted = &st
		}
	}
	for _, b := range w.batches {
		// json.Marshal of these structs (no maps, no floats) is a pure function of their
		// value; workflowcheck flags it only for the encoder cache it fills on first use.
		arg, err := json.Marshal(TaskEvents{Events: b.events}) //workflowcheck:ignore
		if err != nil {
			w.logger.Error("task events not encodable", "task_id", b.taskID, "error", err)
			continue
		}
		w.report.Signals = append(w.report.Signals, activities.SignalInput{WorkflowID: TaskWorkflowID(b.taskID), Signal: TaskEventsSignal, Arg: arg})
	}
	// One report carries the step's events of every task; it joins the trace of the first
	// task it reports on (usually the only one).
	var span telemetry.WorkflowSpan
	for _, b := range w.batches {
		if !b.span.IsZero() {
			span = b.span
			break
		}
	}
	w.batches = nil
	if len(w.report.States) == 0 && len(w.report.Signals) == 0 {
		return
	}
	rep := w.report
	w.report = activities.StepReport{}
	var acts *activities.Activities
	if err := workflow.ExecuteLocalActivity(telemetry.WithSpan(w.disp.signalLA, span), acts.ReportStep, rep).Get(ctx, nil); err != nil {
		w.logger.Error("step not reported", "agent_id", w.in.AgentID, "states", len(rep.States), "events", len(rep.Signals), "error", err)
	}
}

// taskBatch is the events one step reports for one task, and the span of the signal that
// queued the task.
type taskBatch struct {
	taskID string
	events []TaskEvent
	span   telemetry.WorkflowSpan
}

// batch adds events for a task to the step's report: one TaskEventsSignal per task and step.
func (w *agentLifecycle) batch(taskID string, evs []TaskEvent, span telemetry.WorkflowSpan) {
	for i := range w.batches {
		if w.batches[i].taskID == taskID {
			w.batches[i].events = append(w.batches[i].events, evs...)
			return
		}
	}
	w.batches = append(w.batches, taskBatch{taskID: taskID, events: evs, span: span})
}
