package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
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
	// AgentStatusQuery returns an AgentStatus.
	AgentStatusQuery = "agent-status"
)

// DefaultInitTimeout is the INITIALIZING timeout of §8.3.
const DefaultInitTimeout = 60 * time.Second

// AgentWorkflowID is the workflow ID of an agent's lifecycle: "agent/<agent_id>".
func AgentWorkflowID(agentID string) string { return "agent/" + agentID }

// AgentLifecycleInput starts (or continues as new) an agent's lifecycle workflow.
type AgentLifecycleInput struct {
	// AgentID is the registered agent_id.
	AgentID string
	// Name is the descriptor's name, for notifications.
	Name string
	// Capabilities are the descriptor's capabilities, for notifications.
	Capabilities []string
	// InitTimeout bounds INITIALIZING; zero means DefaultInitTimeout.
	InitTimeout time.Duration
	// State is the state carried over a continue-as-new; zero for a fresh registration.
	State commonpb.AgentState
	// Since is when State was entered, carried over a continue-as-new.
	Since time.Time
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
// a heartbeat), fails with init_timeout if it never does (§8.3), recovers on re-registration
// after a failure, and ends on explicit deregistration after telling the other agents.
// The scheduler issue extends it with task states; every transition goes through the table in
// protocol.AgentTransitionLegal and is recorded.
func AgentLifecycle(ctx workflow.Context, in AgentLifecycleInput) (AgentLifecycleResult, error) {
	w := &agentLifecycle{in: in}
	return w.run(ctx)
}

type agentLifecycle struct {
	in     AgentLifecycleInput
	state  commonpb.AgentState
	since  time.Time
	reason string
}

func (w *agentLifecycle) run(ctx workflow.Context) (AgentLifecycleResult, error) {
	logger := workflow.GetLogger(ctx)
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
	})
	if err := workflow.SetQueryHandler(ctx, AgentStatusQuery, func() (AgentStatus, error) {
		return AgentStatus{AgentID: w.in.AgentID, State: w.state.String(), Since: w.since, Reason: w.reason}, nil
	}); err != nil {
		return AgentLifecycleResult{}, err
	}
	var acts *activities.Activities

	if w.in.State == commonpb.AgentState_AGENT_STATE_UNSPECIFIED {
		// A fresh registration: record it and announce the join (§14).
		if err := w.enter(ctx, commonpb.AgentState_INITIALIZING, "registered"); err != nil {
			return AgentLifecycleResult{}, err
		}
		if err := workflow.ExecuteActivity(ctx, acts.NotifyRegistryEvent, activities.RegistryEventInput{
			AgentID: w.in.AgentID, Name: w.in.Name, Capabilities: w.in.Capabilities, Event: activities.AgentJoined,
			EventID: workflow.GetInfo(ctx).WorkflowExecution.RunID,
		}).Get(ctx, nil); err != nil {
			return AgentLifecycleResult{}, err
		}
	} else {
		w.state, w.since = w.in.State, w.in.Since
	}

	registerCh := workflow.GetSignalChannel(ctx, AgentRegisterSignal)
	readyCh := workflow.GetSignalChannel(ctx, AgentReadySignal)
	deregisterCh := workflow.GetSignalChannel(ctx, AgentDeregisterSignal)

	initTimeout := w.in.InitTimeout
	if initTimeout <= 0 {
		initTimeout = DefaultInitTimeout
	}
	var initTimer workflow.Future
	var cancelInitTimer workflow.CancelFunc
	if w.state == commonpb.AgentState_INITIALIZING {
		remaining := initTimeout - workflow.Now(ctx).Sub(w.since)
		var timerCtx workflow.Context
		timerCtx, cancelInitTimer = workflow.WithCancel(ctx)
		initTimer = workflow.NewTimer(timerCtx, max(remaining, time.Millisecond))
	}

	var deregistered *AgentDeregistration
	var stepErr error
	onReady := func(c workflow.ReceiveChannel, _ bool) {
		var r AgentReady
		c.Receive(ctx, &r)
		if w.state == commonpb.AgentState_INITIALIZING {
			stepErr = w.transition(ctx, commonpb.AgentState_RUNNABLE, "ready via "+r.Via)
		}
	}
	onRegister := func(c workflow.ReceiveChannel, _ bool) {
		var r AgentRegistration
		c.Receive(ctx, &r)
		w.in.Name, w.in.Capabilities = r.Name, r.Capabilities
		if w.state == commonpb.AgentState_FAILED_STATE {
			// Re-registration after a failure is the agent's recovery (§8.1 RECOVERING).
			if stepErr = w.transition(ctx, commonpb.AgentState_RECOVERING, "re-registered after failure"); stepErr == nil {
				stepErr = w.transition(ctx, commonpb.AgentState_RUNNABLE, "recovered by re-registration")
			}
		}
	}
	onDeregister := func(c workflow.ReceiveChannel, _ bool) {
		var d AgentDeregistration
		c.Receive(ctx, &d)
		deregistered = &d
	}

	for deregistered == nil {
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(readyCh, onReady)
		sel.AddReceive(registerCh, onRegister)
		sel.AddReceive(deregisterCh, onDeregister)
		if initTimer != nil && w.state == commonpb.AgentState_INITIALIZING {
			sel.AddFuture(initTimer, func(f workflow.Future) {
				if f.Get(ctx, nil) != nil {
					return // cancelled
				}
				logger.Warn("agent never became ready; init_timeout", "agent_id", w.in.AgentID, "timeout", initTimeout)
				stepErr = w.transition(ctx, commonpb.AgentState_FAILED_STATE, "init_timeout")
			})
		}
		sel.Select(ctx)
		if stepErr != nil {
			return AgentLifecycleResult{}, stepErr
		}
		if w.state != commonpb.AgentState_INITIALIZING && cancelInitTimer != nil {
			cancelInitTimer()
			cancelInitTimer, initTimer = nil, nil
		}
		if deregistered == nil && !sel.HasPending() && workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			// Long-lived agents accumulate history; start afresh with the state carried over.
			// Pending signals are handled first (HasPending) so none is lost across the boundary.
			next := w.in
			next.State, next.Since = w.state, w.since
			return AgentLifecycleResult{}, workflow.NewContinueAsNewError(ctx, AgentLifecycle, next)
		}
	}

	if err := workflow.ExecuteActivity(ctx, acts.NotifyRegistryEvent, activities.RegistryEventInput{
		AgentID: w.in.AgentID, Name: w.in.Name, Event: activities.AgentLeft, Reason: deregistered.Reason,
		EventID: workflow.GetInfo(ctx).WorkflowExecution.RunID + "/leave",
	}).Get(ctx, nil); err != nil {
		return AgentLifecycleResult{}, err
	}
	if err := workflow.ExecuteActivity(ctx, acts.RecordAgentState, activities.AgentStateInput{
		AgentID: w.in.AgentID, From: w.state, To: w.state, Reason: "deregistered: " + deregistered.Reason, Final: true,
	}).Get(ctx, nil); err != nil {
		return AgentLifecycleResult{}, err
	}
	return AgentLifecycleResult{FinalState: w.state.String(), Reason: deregistered.Reason}, nil
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
	if err := workflow.UpsertTypedSearchAttributes(ctx, AgentStateKey.ValueSet(to.String())); err != nil {
		return err
	}
	var acts *activities.Activities
	return workflow.ExecuteActivity(ctx, acts.RecordAgentState, activities.AgentStateInput{
		AgentID: w.in.AgentID, From: from, To: to, Reason: reason,
	}).Get(ctx, nil)
}
