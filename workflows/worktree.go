package workflows

import (
	"encoding/json"
	"fmt"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// KindWorktree is the SW4RMKind search-attribute value of worktree binding runs.
const KindWorktree = "worktree"

// Names of the worktree binding workflow's messages (§16). Each update answers once the
// operation is applied (and recorded), with the binding as it then is.
const (
	// WorktreeBindUpdate carries a WorktreeBind (BIND); it returns a WorktreeBindResult.
	WorktreeBindUpdate = "bind"
	// WorktreeUnbindUpdate carries a WorktreeUnbind (UNBIND); it returns the WorktreeState.
	// The run ends once the binding is UNBOUND.
	WorktreeUnbindUpdate = "unbind"
	// WorktreeSwitchRequestUpdate carries a WorktreeSwitchRequest (SWITCH_REQUEST); it
	// returns the WorktreeState.
	WorktreeSwitchRequestUpdate = "switch-request"
	// WorktreeSwitchApproveUpdate carries a WorktreeSwitchApproval (SWITCH_APPROVE); it
	// returns the WorktreeState.
	WorktreeSwitchApproveUpdate = "switch-approve"
	// WorktreeSwitchRejectUpdate carries a WorktreeSwitchRejection: SWITCH_REJECT of a
	// pending switch, SWITCH_REVOKE of an approved one; it returns the WorktreeState.
	WorktreeSwitchRejectUpdate = "switch-reject"
	// WorktreeStateQuery returns the WorktreeState.
	WorktreeStateQuery = "state"
	// WorktreeReleaseUpdate carries an activities.AgentRelease: the agent stopped (§8.4),
	// so its binding ends from whatever state it is in — a pending switch is rejected, then
	// the binding is unbound and the home worktree's lock released. It answers an
	// activities.ReleaseOutcome, and the run ends as after an unbind.
	WorktreeReleaseUpdate = "release"
)

// Error types of refused worktree updates. A refusal by a validator leaves nothing in the
// workflow's history.
const (
	// WorktreeUpdateRefused: the binding's state does not allow the operation (§16.2), or
	// the request contradicts the binding (another worktree, another switch target).
	WorktreeUpdateRefused = "worktree_update_refused"
	// WorktreeRunClosing: the run is ending after an unbind; the caller calls again, which
	// reaches the next run.
	WorktreeRunClosing = "worktree_run_closing"
)

// Switch limits (§16.2: BOUND_NON_HOME is time-limited).
const (
	// DefaultSwitchTTL is the TTL of an approval that names none (ttl_ms 0, or a HITL
	// approval without a ttl_ms patch).
	DefaultSwitchTTL = 30 * time.Minute
	// MaxSwitchTTL is the longest TTL an approval may give.
	MaxSwitchTTL = 24 * time.Hour
	// SwitchPendingTimeout bounds a switch nobody decides when it requires no HITL: it is
	// then rejected, so an agent is never stuck unable to unbind. A HITL switch is bounded by
	// its invocation's deadline and fallback instead.
	SwitchPendingTimeout = time.Hour
	// worktreeIdleTimeout ends a run that never got a bind (its first was refused).
	worktreeIdleTimeout = time.Minute
)

// WorktreeWorkflowID is the workflow ID of an agent's worktree binding: "worktree/<agent_id>".
func WorktreeWorkflowID(agentID string) string { return "worktree/" + agentID }

// WorktreeStartOptions are the start options of workflow worktree/<agentID> on taskQueue. A
// Bind starts it (update-with-start) and joins a running one; an unbind ends it, and the
// next Bind starts a new run under the same ID.
func WorktreeStartOptions(agentID, taskQueue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID: WorktreeWorkflowID(agentID), TaskQueue: taskQueue,
		WorkflowIDReusePolicy:    enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes: temporal.NewSearchAttributes(KindKey.ValueSet(KindWorktree), AgentIDKey.ValueSet(agentID),
			WorktreeStateKey.ValueSet(worktree.StateUnbound.String())),
		StaticSummary: summary("worktree binding of agent %s (§16)", agentID),
	}
}

// WorktreeInput starts a worktree binding run.
type WorktreeInput struct {
	// AgentID is the agent bound.
	AgentID string
	// Carried is the binding carried over by continue-as-new; nil for a new run.
	Carried *WorktreeState `json:",omitempty"`
}

// WorktreeBind is the payload of WorktreeBindUpdate.
type WorktreeBind struct {
	// RepoID and WorktreeID name the agent's home worktree.
	RepoID, WorktreeID string
	// By is the proven caller (the agent or an operator); "" when authentication is off.
	By string `json:",omitempty"`
}

// WorktreeBindResult is the answer of WorktreeBindUpdate: BindResponse's ok and reason, and
// the binding after the bind.
type WorktreeBindResult struct {
	// OK is true when the agent is bound to the worktree.
	OK bool
	// Reason says why not ("<§16.3 reason>: <message>; …"), or that it was bound already.
	Reason string `json:",omitempty"`
	// State is the binding after the bind.
	State WorktreeState
}

// WorktreeUnbind is the payload of WorktreeUnbindUpdate.
type WorktreeUnbind struct {
	// By is the proven caller.
	By string `json:",omitempty"`
}

// WorktreeSwitchRequest is the payload of WorktreeSwitchRequestUpdate.
type WorktreeSwitchRequest struct {
	// TargetWorktreeID is the non-home worktree asked for, in the home's repository.
	TargetWorktreeID string
	// RequiresHITL has a human decide, through a HITL invocation with reason
	// WORKTREE_OVERRIDE; ApproveSwitch and RejectSwitch are then refused. Without it
	// operators decide with ApproveSwitch or RejectSwitch.
	RequiresHITL bool
	// By is the proven caller.
	By string `json:",omitempty"`
}

// WorktreeSwitchApproval is the payload of WorktreeSwitchApproveUpdate.
type WorktreeSwitchApproval struct {
	// TargetWorktreeID must be the pending switch's target; empty means it.
	TargetWorktreeID string `json:",omitempty"`
	// TTL is how long the agent stays in the target; zero means DefaultSwitchTTL.
	TTL time.Duration
	// By is the proven caller (an operator).
	By string `json:",omitempty"`
}

// WorktreeSwitchRejection is the payload of WorktreeSwitchRejectUpdate.
type WorktreeSwitchRejection struct {
	// Reason is the operator's reason.
	Reason string `json:",omitempty"`
	// By is the proven caller (an operator).
	By string `json:",omitempty"`
}

// WorktreeState is an agent's binding: the answer of WorktreeStateQuery and of the updates,
// and the run's result.
type WorktreeState struct {
	// AgentID is the agent.
	AgentID string
	// State is the §16.1 state.
	State worktree.State
	// RepoID, HomeWorktreeID, HomeBranch and HomePath are the home worktree.
	RepoID, HomeWorktreeID string
	HomeBranch, HomePath   string `json:",omitempty"`
	// WorktreeID, Branch and Path are the worktree the agent works in now: home, or the
	// switch's target while BOUND_NON_HOME; empty when not bound.
	WorktreeID, Branch, Path string `json:",omitempty"`
	// TargetWorktreeID is the target of a pending or approved switch.
	TargetWorktreeID string `json:",omitempty"`
	// RequiresHITL and HitlID: a pending switch decided by a HITL invocation, hitl/<HitlID>.
	RequiresHITL bool   `json:",omitempty"`
	HitlID       string `json:",omitempty"`
	// PendingSince is when the pending switch was asked for.
	PendingSince time.Time `json:",omitempty"`
	// TTL and ExpiresAt bound a BOUND_NON_HOME binding: the agent returns home at ExpiresAt.
	TTL       time.Duration `json:",omitempty"`
	ExpiresAt time.Time     `json:",omitempty"`
	// Reason is the §16.3 reason of the last failed bind while BIND_FAILED.
	Reason worktree.Reason `json:",omitempty"`
	// Note says what the last change was about, for a person.
	Note string `json:",omitempty"`
	// FailedAt is when the binding entered BIND_FAILED; Attempts counts the failed binds
	// since (the first and each retry); Retries the automatic retries made (at most
	// worktree.BindRetry.MaxRetries); NextRetryAt is when the next one runs (zero: none
	// left); Notified is set once operators were told (§16.3 "Timeout").
	FailedAt    time.Time `json:",omitempty"`
	Attempts    int       `json:",omitempty"`
	Retries     int       `json:",omitempty"`
	NextRetryAt time.Time `json:",omitempty"`
	Notified    bool      `json:",omitempty"`
	// UpdatedAt is the time of the last change.
	UpdatedAt time.Time
}

// TTLRemaining is how long a BOUND_NON_HOME binding has left at now; zero otherwise.
func (s WorktreeState) TTLRemaining(now time.Time) time.Duration {
	if s.State != worktree.StateBoundNonHome || s.ExpiresAt.IsZero() {
		return 0
	}
	return max(s.ExpiresAt.Sub(now), 0)
}

// WorktreeStateFromBinding is the state a store projection records, for Status once the
// run has ended.
func WorktreeStateFromBinding(b store.WorktreeBinding) WorktreeState {
	st := WorktreeState{AgentID: b.AgentID, State: worktree.State(b.State), RepoID: b.RepoID, HomeWorktreeID: b.HomeWorktreeID,
		WorktreeID: b.WorktreeID, Branch: b.Branch, Path: b.Path, TargetWorktreeID: b.TargetWorktreeID,
		Reason: worktree.Reason(b.Reason), Note: b.Note, ExpiresAt: b.ExpiresAt, UpdatedAt: b.UpdatedAt}
	if st.WorktreeID == st.HomeWorktreeID {
		st.HomeBranch, st.HomePath = st.Branch, st.Path
	}
	return st
}

// WorktreeSwitchPatch is the JSON patch a HITL decision of kind modify may carry to approve
// a switch for another TTL than DefaultSwitchTTL: {"ttl_ms": 600000}.
type WorktreeSwitchPatch struct {
	// TTLMs is the TTL in milliseconds.
	TTLMs uint64 `json:"ttl_ms"`
}

// WorktreeWorkflow is an agent's worktree binding (§16): the states of §16.1, moved only by
// worktree.Transition, i.e. exactly §16.2's table. Bind makes or reuses the agent's home
// worktree and locks it (EnsureWorktree); a failure enters BIND_FAILED with its reason and
// is retried with worktree.BindRetry's backoff as durable timers, and a binding still
// BIND_FAILED after worktree.BindRecoveryTimeout is escalated to operators (§16.3). A switch
// asked for waits in SWITCH_PENDING for an operator's ApproveSwitch or RejectSwitch, or for a
// HITL invocation with reason WORKTREE_OVERRIDE; an approved switch binds the target for its
// TTL, a durable timer that returns the agent home, as does a revoke (RejectSwitch) at once.
// Unbind releases the home worktree and ends the run. Every transition updates
// SW4RMWorktreeState and is recorded in the store's projection and the audit log.
func WorktreeWorkflow(ctx workflow.Context, in WorktreeInput) (WorktreeState, error) {
	w := &worktreeRun{in: in}
	res, err := w.run(ctx)
	w.closing = true
	// An update being applied finishes, and its caller gets the answer, before the run ends.
	if aerr := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); aerr != nil && err == nil {
		err = aerr
	}
	return res, err
}

// Kinds of the operations updates hand to the main loop.
const (
	opBind    = "bind"
	opUnbind  = "unbind"
	opRequest = "switch_request"
	opApprove = "switch_approve"
	opReject  = "switch_reject"
	opRelease = "release"
)

// worktreeOp is one update handed to the main loop, and its answer.
type worktreeOp struct {
	kind    string
	bind    WorktreeBind
	unbind  WorktreeUnbind
	request WorktreeSwitchRequest
	approve WorktreeSwitchApproval
	reject  WorktreeSwitchRejection
	release activities.AgentRelease

	done bool
	// released answers a release.
	released activities.ReleaseOutcome
	bindRes  WorktreeBindResult
	// st is the binding right after the operation: later operations, applied before the
	// update's handler resumes, must not change its answer.
	st  WorktreeState
	err error
}

// hitlResult is the outcome of a switch's HITL invocation.
type hitlResult struct {
	out hitl.Outcome
	err error
}

// worktreeRun is one run's state machine. Updates do not change the state themselves: they
// queue an operation and wait for the main loop to apply it, so every transition happens in
// one place, in order, between the timers' (retries, recovery timeout, TTL).
type worktreeRun struct {
	in WorktreeInput
	st WorktreeState

	ops []*worktreeOp
	// hitl is the pending switch's HITL outcome once it came.
	hitl *hitlResult
	// started is when the run began (the idle timeout counts from it); bound is set once
	// the run has been bound, unbound once an unbind ended it; closing once it is ending.
	started        time.Time
	bound, unbound bool
	closing        bool
	// stateSet is the last value of SW4RMWorktreeState upserted.
	stateSet worktree.State
	// acts is nil: its method values name the activities, checked at compile time.
	acts *activities.Activities
}

func (w *worktreeRun) run(ctx workflow.Context) (WorktreeState, error) {
	w.started = workflow.Now(ctx)
	if w.in.Carried != nil {
		w.st = *w.in.Carried
		w.bound = w.st.State != worktree.StateUnbound
		w.stateSet = w.st.State
	} else {
		w.st = WorktreeState{AgentID: w.in.AgentID, State: worktree.StateUnbound, UpdatedAt: w.started}
		w.stateSet = worktree.StateUnbound
	}
	if err := w.setHandlers(ctx); err != nil {
		return w.st, err
	}
	for {
		if done, err := w.step(ctx); done || err != nil {
			return w.st, err
		}
		if len(w.ops) > 0 {
			o := w.ops[0]
			w.ops = w.ops[1:]
			if err := w.apply(ctx, o); err != nil {
				return w.st, err
			}
			continue
		}
		if w.unbound || (!w.bound && w.st.State == worktree.StateUnbound && !workflow.Now(ctx).Before(w.started.Add(worktreeIdleTimeout))) {
			return w.st, nil
		}
		if w.canContinueAsNew(ctx) {
			st := w.st
			return w.st, workflow.NewContinueAsNewError(ctx, WorktreeWorkflow, WorktreeInput{AgentID: w.in.AgentID, Carried: &st})
		}
		cond := func() bool { return len(w.ops) > 0 || w.hitl != nil }
		if d, ok := w.nextDeadline(ctx); ok {
			if _, err := workflow.AwaitWithTimeout(ctx, d, cond); err != nil {
				return w.st, err
			}
		} else if err := workflow.Await(ctx, cond); err != nil {
			return w.st, err
		}
	}
}

// canContinueAsNew: only where nothing is in flight (no timer but the recovery timeout's
// end, no HITL wait, no update), so the carried state is all there is.
func (w *worktreeRun) canContinueAsNew(ctx workflow.Context) bool {
	if !workflow.GetInfo(ctx).GetContinueAsNewSuggested() || len(w.ops) > 0 || !workflow.AllHandlersFinished(ctx) {
		return false
	}
	switch w.st.State {
	case worktree.StateBoundHome:
		return true
	case worktree.StateBindFailed:
		return w.st.NextRetryAt.IsZero() && w.st.Notified
	}
	return false
}

// nextDeadline is how long until the next timer of the current state is due.
func (w *worktreeRun) nextDeadline(ctx workflow.Context) (time.Duration, bool) {
	now := workflow.Now(ctx)
	var at []time.Time
	switch w.st.State {
	case worktree.StateUnbound:
		if !w.bound {
			at = append(at, w.started.Add(worktreeIdleTimeout))
		}
	case worktree.StateBindFailed:
		if !w.st.NextRetryAt.IsZero() {
			at = append(at, w.st.NextRetryAt)
		}
		if !w.st.Notified {
			at = append(at, w.st.FailedAt.Add(worktree.BindRecoveryTimeout))
		}
	case worktree.StateSwitchPending:
		if !w.st.RequiresHITL {
			at = append(at, w.st.PendingSince.Add(SwitchPendingTimeout))
		}
	case worktree.StateBoundNonHome:
		at = append(at, w.st.ExpiresAt)
	}
	if len(at) == 0 {
		return 0, false
	}
	next := at[0]
	for _, t := range at[1:] {
		if t.Before(next) {
			next = t
		}
	}
	// A timer of at least a millisecond: one due now is handled by step before waiting.
	return max(next.Sub(now), time.Millisecond), true
}

// step handles whatever timer or HITL outcome is due; done ends the run.
func (w *worktreeRun) step(ctx workflow.Context) (done bool, err error) {
	for {
		now := workflow.Now(ctx)
		var handled bool
		switch w.st.State {
		case worktree.StateBindFailed:
			switch {
			case !w.st.NextRetryAt.IsZero() && !now.Before(w.st.NextRetryAt):
				handled, err = true, w.retry(ctx)
			case !w.st.Notified && !now.Before(w.st.FailedAt.Add(worktree.BindRecoveryTimeout)):
				handled, err = true, w.escalate(ctx)
			}
		case worktree.StateBoundNonHome:
			if !now.Before(w.st.ExpiresAt) {
				note := fmt.Sprintf("the switch to %s ended: its TTL of %s expired", w.st.TargetWorktreeID, w.st.TTL)
				handled, err = true, w.returnHome(ctx, worktree.EventTTLExpired, note, "")
			}
		case worktree.StateSwitchPending:
			switch {
			case w.hitl != nil:
				handled, err = true, w.applyHITL(ctx)
			case !w.st.RequiresHITL && !now.Before(w.st.PendingSince.Add(SwitchPendingTimeout)):
				note := fmt.Sprintf("the switch to %s was rejected: nobody decided it within %s", w.st.TargetWorktreeID, SwitchPendingTimeout)
				handled, err = true, w.rejectPending(ctx, note, "")
			}
		}
		if err != nil || !handled {
			return false, err
		}
	}
}

// setHandlers installs the query and the updates with their validators.
func (w *worktreeRun) setHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, WorktreeStateQuery, func() (WorktreeState, error) { return w.st, nil }); err != nil {
		return err
	}
	enqueue := func(ctx workflow.Context, o *worktreeOp) error {
		w.ops = append(w.ops, o)
		return workflow.Await(ctx, func() bool { return o.done })
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, WorktreeBindUpdate,
		func(ctx workflow.Context, b WorktreeBind) (WorktreeBindResult, error) {
			o := &worktreeOp{kind: opBind, bind: b}
			if err := enqueue(ctx, o); err != nil {
				return WorktreeBindResult{}, err
			}
			return o.bindRes, o.err
		},
		workflow.UpdateHandlerOptions{Validator: func(_ workflow.Context, b WorktreeBind) error {
			if err := w.validate(); err != nil {
				return err
			}
			if b.RepoID == "" || b.WorktreeID == "" {
				return refused("repo_id and worktree_id are required")
			}
			return w.checkBind(b)
		}},
	); err != nil {
		return err
	}
	stateOp := func(kind string, fill func(*worktreeOp)) func(workflow.Context) (WorktreeState, error) {
		return func(ctx workflow.Context) (WorktreeState, error) {
			o := &worktreeOp{kind: kind}
			fill(o)
			if err := enqueue(ctx, o); err != nil {
				return WorktreeState{}, err
			}
			return o.st, o.err
		}
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, WorktreeUnbindUpdate,
		func(ctx workflow.Context, u WorktreeUnbind) (WorktreeState, error) {
			return stateOp(opUnbind, func(o *worktreeOp) { o.unbind = u })(ctx)
		},
		workflow.UpdateHandlerOptions{Validator: func(_ workflow.Context, _ WorktreeUnbind) error {
			if err := w.validate(); err != nil {
				return err
			}
			return w.checkEvent(worktree.EventUnbind)
		}},
	); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, WorktreeSwitchRequestUpdate,
		func(ctx workflow.Context, r WorktreeSwitchRequest) (WorktreeState, error) {
			return stateOp(opRequest, func(o *worktreeOp) { o.request = r })(ctx)
		},
		workflow.UpdateHandlerOptions{Validator: func(_ workflow.Context, r WorktreeSwitchRequest) error {
			if err := w.validate(); err != nil {
				return err
			}
			return w.checkRequest(r)
		}},
	); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, WorktreeSwitchApproveUpdate,
		func(ctx workflow.Context, a WorktreeSwitchApproval) (WorktreeState, error) {
			return stateOp(opApprove, func(o *worktreeOp) { o.approve = a })(ctx)
		},
		workflow.UpdateHandlerOptions{Validator: func(_ workflow.Context, a WorktreeSwitchApproval) error {
			if err := w.validate(); err != nil {
				return err
			}
			return w.checkApprove(a)
		}},
	); err != nil {
		return err
	}
	// Registering a handler adds no command: runs recorded before it replay unchanged.
	if err := workflow.SetUpdateHandlerWithOptions(ctx, WorktreeReleaseUpdate,
		func(ctx workflow.Context, rel activities.AgentRelease) (activities.ReleaseOutcome, error) {
			o := &worktreeOp{kind: opRelease, release: rel}
			if err := enqueue(ctx, o); err != nil {
				return activities.ReleaseOutcome{}, err
			}
			return o.released, o.err
		},
		workflow.UpdateHandlerOptions{Validator: func(_ workflow.Context, _ activities.AgentRelease) error { return w.validate() }},
	); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, WorktreeSwitchRejectUpdate,
		func(ctx workflow.Context, r WorktreeSwitchRejection) (WorktreeState, error) {
			return stateOp(opReject, func(o *worktreeOp) { o.reject = r })(ctx)
		},
		workflow.UpdateHandlerOptions{Validator: func(_ workflow.Context, _ WorktreeSwitchRejection) error {
			if err := w.validate(); err != nil {
				return err
			}
			return w.checkReject()
		}},
	)
}

// validate refuses every update once the run is ending; with operations queued, the state
// they will leave is unknown, so the checks of the state wait for the main loop.
func (w *worktreeRun) validate() error {
	if w.closing || w.unbound {
		return temporal.NewApplicationError(fmt.Sprintf("the binding of %s is ending; call again", w.in.AgentID), WorktreeRunClosing)
	}
	return nil
}

// queued reports whether operations wait: a validator then leaves the state's checks to the
// main loop, which applies them in order.
func (w *worktreeRun) queued() bool { return len(w.ops) > 0 }

// refused is the error of a refused operation.
func refused(format string, args ...any) error {
	return temporal.NewApplicationError(fmt.Sprintf(format, args...), WorktreeUpdateRefused)
}

// checkEvent refuses an event the current state does not accept (§16.2).
func (w *worktreeRun) checkEvent(ev worktree.Event) error {
	if w.queued() {
		return nil
	}
	if ev == worktree.EventUnbind && w.st.State == worktree.StateUnbound {
		return nil // answered idempotently
	}
	if _, err := worktree.Transition(w.st.State, ev); err != nil {
		return refused("%s", err.Error())
	}
	return nil
}

// checkBind refuses a bind to another worktree than the one the agent is bound to.
func (w *worktreeRun) checkBind(b WorktreeBind) error {
	if w.queued() || !worktree.Bound(w.st.State) {
		return nil
	}
	if b.RepoID != w.st.RepoID || b.WorktreeID != w.st.HomeWorktreeID {
		return refused("%s is bound to %s/%s (state %s): unbind it before binding %s/%s", w.st.AgentID, w.st.RepoID, w.st.HomeWorktreeID,
			w.st.State, b.RepoID, b.WorktreeID)
	}
	return nil
}

// checkRequest refuses a switch request the state or the target does not allow.
func (w *worktreeRun) checkRequest(r WorktreeSwitchRequest) error {
	if r.TargetWorktreeID == "" {
		return refused("target_worktree_id is required")
	}
	if err := w.checkEvent(worktree.EventSwitchRequest); err != nil || w.queued() {
		return err
	}
	if r.TargetWorktreeID == w.st.HomeWorktreeID {
		return refused("%s is the home worktree of %s: a switch names another worktree", r.TargetWorktreeID, w.st.AgentID)
	}
	return nil
}

// checkApprove refuses an approval the pending switch does not allow.
func (w *worktreeRun) checkApprove(a WorktreeSwitchApproval) error {
	if a.TTL < 0 || a.TTL > MaxSwitchTTL {
		return refused("ttl %s is outside 0..%s", a.TTL, MaxSwitchTTL)
	}
	if err := w.checkEvent(worktree.EventSwitchApprove); err != nil || w.queued() {
		return err
	}
	return w.checkDecision(a.TargetWorktreeID)
}

// checkDecision refuses an operator's decision of a switch a HITL invocation decides, or one
// naming another target.
func (w *worktreeRun) checkDecision(target string) error {
	if w.st.RequiresHITL {
		return refused("the switch of %s to %s is decided by HITL invocation %s: decide it there", w.st.AgentID, w.st.TargetWorktreeID,
			hitl.WorkflowID(w.st.HitlID))
	}
	if target != "" && target != w.st.TargetWorktreeID {
		return refused("the pending switch of %s is to %s, not %s", w.st.AgentID, w.st.TargetWorktreeID, target)
	}
	return nil
}

// checkReject refuses a rejection unless a switch is pending (reject) or approved (revoke).
func (w *worktreeRun) checkReject() error {
	if w.queued() {
		return nil
	}
	switch w.st.State {
	case worktree.StateSwitchPending:
		return w.checkDecision("")
	case worktree.StateBoundNonHome:
		return nil
	}
	return refused("worktree: %s has no switch to reject or revoke (state %s; §16.2)", w.st.AgentID, w.st.State)
}

// apply applies one queued operation and answers it; the checks of its validator are made
// again, since operations queued before it may have changed the state.
func (w *worktreeRun) apply(ctx workflow.Context, o *worktreeOp) error {
	defer func() { o.st, o.done = w.st, true }()
	if w.unbound {
		if o.kind == opRelease {
			// Queued behind the unbind that ends this run: nothing is left to release.
			o.released = activities.ReleaseOutcome{Outcome: worktree.StateUnbound.String()}
			return nil
		}
		// Queued behind the unbind that ends this run: the caller calls again and reaches
		// the next run, so no run ever ends bound.
		o.err = w.validate()
		return nil
	}
	var err error
	switch o.kind {
	case opBind:
		if o.err = w.checkBind(o.bind); o.err == nil {
			o.bindRes, err = w.applyBind(ctx, o.bind)
		}
	case opUnbind:
		if o.err = w.checkEvent(worktree.EventUnbind); o.err == nil {
			err = w.applyUnbind(ctx, o.unbind, "")
		}
	case opRelease:
		o.released, err = w.applyRelease(ctx, o.release)
	case opRequest:
		if o.err = w.checkRequest(o.request); o.err == nil {
			err = w.applyRequest(ctx, o.request)
		}
	case opApprove:
		if o.err = w.checkApprove(o.approve); o.err == nil {
			o.err, err = w.applyApprove(ctx, o.approve.TTL, o.approve.By, "")
		}
	case opReject:
		if o.err = w.checkReject(); o.err == nil {
			err = w.applyReject(ctx, o.reject)
		}
	}
	return err
}

// applyBind binds the home worktree: at once, idempotently, when it is bound already; else
// an attempt (EnsureWorktree) that either binds it or enters (or stays in) BIND_FAILED and
// schedules the retries.
func (w *worktreeRun) applyBind(ctx workflow.Context, b WorktreeBind) (WorktreeBindResult, error) {
	if worktree.Bound(w.st.State) {
		return WorktreeBindResult{OK: true, Reason: fmt.Sprintf("already bound to %s/%s (state %s)", w.st.RepoID, w.st.HomeWorktreeID, w.st.State),
			State: w.st}, nil
	}
	if w.st.State == worktree.StateBindFailed && (b.RepoID != w.st.RepoID || b.WorktreeID != w.st.HomeWorktreeID) {
		// A bind of another worktree is no retry of the failed one: the error state is
		// cleared first (§16.2 "Retry reset").
		prev := w.st
		w.clearFailure()
		w.st.RepoID, w.st.HomeWorktreeID = "", ""
		w.st.Note = fmt.Sprintf("the failed bind of %s/%s is reset for a bind of %s/%s", prev.RepoID, prev.HomeWorktreeID, b.RepoID, b.WorktreeID)
		if err := w.transition(ctx, worktree.EventRetryReset, b.By, nil); err != nil {
			return WorktreeBindResult{}, err
		}
	}
	w.bound = true
	w.st.RepoID, w.st.HomeWorktreeID = b.RepoID, b.WorktreeID
	manual := w.st.State == worktree.StateBindFailed
	ok, err := w.attempt(ctx, b.By, manual, 0)
	if err != nil {
		return WorktreeBindResult{}, err
	}
	res := WorktreeBindResult{OK: ok, State: w.st}
	if !ok {
		res.Reason = w.failureText()
	}
	return res, nil
}

// attempt makes one bind attempt of the home worktree. On success the binding moves to
// BOUND_HOME; on failure it enters BIND_FAILED (or, failing again, stays there with the new
// reason; §16.2 has no transition for a failed retry) and the next retry is scheduled.
// manual marks a new BIND while BIND_FAILED (§16.3 manual recovery), which starts the
// automatic retries afresh; retry numbers an automatic retry (0 for none). The state changes
// only once the attempt is over, so a query meanwhile sees the previous attempt's whole
// record.
func (w *worktreeRun) attempt(ctx workflow.Context, by string, manual bool, retry int) (bool, error) {
	var got activities.EnsuredWorktree
	err := workflow.ExecuteActivity(w.gitCtx(ctx), w.acts.EnsureWorktree, activities.EnsureWorktreeInput{AgentID: w.st.AgentID,
		RepoID: w.st.RepoID, WorktreeID: w.st.HomeWorktreeID, Lock: true}).Get(ctx, &got)
	if err == nil {
		w.clearFailure()
		w.st.HomeBranch, w.st.HomePath = got.Branch, got.Path
		w.st.WorktreeID, w.st.Branch, w.st.Path = w.st.HomeWorktreeID, got.Branch, got.Path
		w.st.Note = fmt.Sprintf("bound to %s/%s on %s", w.st.RepoID, w.st.HomeWorktreeID, got.Branch)
		if got.Created {
			w.st.Note += " (worktree created)"
		}
		return true, w.transition(ctx, worktree.EventBindOK, by, map[string]any{"created": got.Created})
	}
	if temporal.IsCanceledError(err) {
		return false, err
	}
	reason, msg := activities.ReasonOfActivityError(err)
	now := workflow.Now(ctx)
	w.st.Reason, w.st.Attempts = reason, w.st.Attempts+1
	switch {
	case manual:
		w.st.Retries = 0
	case retry > 0:
		w.st.Retries = retry
	}
	w.st.NextRetryAt = time.Time{}
	if wait, ok := worktree.BindRetry.Delay(w.st.Retries + 1); ok {
		w.st.NextRetryAt = now.Add(wait)
	}
	w.st.Note = msg
	details := map[string]any{"attempt": w.st.Attempts, "retries": w.st.Retries}
	if !w.st.NextRetryAt.IsZero() {
		details["next_retry_in"] = w.st.NextRetryAt.Sub(now).String()
	}
	if w.st.State == worktree.StateBindFailed {
		return false, w.record(ctx, activities.WorktreeEventBindFailed, "", "", by, details)
	}
	w.st.FailedAt, w.st.Notified = now, false
	return false, w.transition(ctx, worktree.EventBindFailed, by, details)
}

// retry is an automatic retry of a failed bind (§16.3), when its backoff is over.
func (w *worktreeRun) retry(ctx workflow.Context) error {
	_, err := w.attempt(ctx, "", false, w.st.Retries+1)
	return err
}

// escalate tells operators that the binding stayed BIND_FAILED for the recovery timeout.
func (w *worktreeRun) escalate(ctx workflow.Context) error {
	w.st.Notified = true
	return workflow.ExecuteLocalActivity(w.localCtx(ctx), w.acts.NotifyBindRecoveryTimeout, activities.BindRecoveryTimeoutInput{
		AgentID: w.st.AgentID, RepoID: w.st.RepoID, WorktreeID: w.st.HomeWorktreeID, Reason: string(w.st.Reason), Note: w.st.Note,
		FailedAt: w.st.FailedAt, Attempts: w.st.Attempts}).Get(ctx, nil)
}

// failureText is BindResponse.reason of a failed bind.
func (w *worktreeRun) failureText() string {
	s := string(w.st.Reason) + ": " + w.st.Note
	if !w.st.NextRetryAt.IsZero() {
		s += fmt.Sprintf("; retry %d of %d follows automatically (§16.3)", w.st.Retries+1, worktree.BindRetry.MaxRetries)
	}
	return s
}

// clearFailure forgets a failed bind's record.
func (w *worktreeRun) clearFailure() {
	w.st.Reason, w.st.FailedAt, w.st.NextRetryAt = "", time.Time{}, time.Time{}
	w.st.Attempts, w.st.Retries, w.st.Notified = 0, 0, false
}

// applyRelease ends the binding of an agent that stopped (§8.4): a pending switch is
// rejected first (§16.2 has no UNBIND from SWITCH_PENDING; the switch's HITL invocation, if
// any, ends with the run), then the binding is unbound — every transition through §16.2's
// table, by the scheduler, with why in its note and audit details. An unbound agent releases
// nothing and keeps its run.
func (w *worktreeRun) applyRelease(ctx workflow.Context, rel activities.AgentRelease) (activities.ReleaseOutcome, error) {
	why := "agent " + rel.AgentID + " stopped: " + rel.Why
	if w.st.State == worktree.StateUnbound {
		return activities.ReleaseOutcome{Outcome: worktree.StateUnbound.String(), Note: "nothing was bound"}, nil
	}
	from := w.st
	if w.st.State == worktree.StateSwitchPending {
		if err := w.rejectPending(ctx, fmt.Sprintf("the switch to %s was rejected: %s", w.st.TargetWorktreeID, why), protocol.SchedulerID); err != nil {
			return activities.ReleaseOutcome{}, err
		}
	}
	if err := w.applyUnbind(ctx, WorktreeUnbind{By: protocol.SchedulerID}, why); err != nil {
		return activities.ReleaseOutcome{}, err
	}
	note := "was " + from.State.String()
	if from.TargetWorktreeID != "" {
		note += " (switch to " + from.TargetWorktreeID + ")"
	}
	note += "; " + w.st.Note
	return activities.ReleaseOutcome{Released: true, Outcome: w.st.State.String(), Note: note}, nil
}

// applyUnbind ends the binding: the home worktree is unlocked (its directory and branch
// stay) and the run ends. An unbind of an unbound agent changes nothing. why, when set,
// says that the agent's end released it (applyRelease).
func (w *worktreeRun) applyUnbind(ctx workflow.Context, u WorktreeUnbind, why string) error {
	if w.st.State == worktree.StateUnbound {
		w.unbound = true
		return nil
	}
	details := map[string]any{}
	if worktree.Bound(w.st.State) {
		err := workflow.ExecuteActivity(w.gitCtx(ctx), w.acts.ReleaseWorktree, activities.ReleaseWorktreeInput{AgentID: w.st.AgentID,
			RepoID: w.st.RepoID, WorktreeID: w.st.HomeWorktreeID}).Get(ctx, nil)
		if temporal.IsCanceledError(err) {
			return err
		}
		if err != nil {
			// The binding ends all the same; the lock left behind is the agent's own, so
			// binding it again works, and operators learn of it.
			details["release_error"] = err.Error()
		}
	}
	w.st.Note = fmt.Sprintf("unbound from %s/%s", w.st.RepoID, w.st.HomeWorktreeID)
	if why != "" {
		w.st.Note += " (" + why + ")"
		details["why"] = why
	}
	if _, failed := details["release_error"]; failed {
		w.st.Note += "; unlocking the worktree failed: " + fmt.Sprint(details["release_error"])
	}
	w.clearFailure()
	w.clearSwitch()
	w.st.RepoID, w.st.HomeWorktreeID, w.st.HomeBranch, w.st.HomePath = "", "", "", ""
	w.st.WorktreeID, w.st.Branch, w.st.Path = "", "", ""
	w.unbound = true
	return w.transition(ctx, worktree.EventUnbind, u.By, details)
}

// applyRequest enters SWITCH_PENDING and, when the switch requires it, raises its HITL
// invocation.
func (w *worktreeRun) applyRequest(ctx workflow.Context, r WorktreeSwitchRequest) error {
	w.st.TargetWorktreeID, w.st.RequiresHITL, w.st.PendingSince = r.TargetWorktreeID, r.RequiresHITL, workflow.Now(ctx)
	w.st.Note = fmt.Sprintf("a switch to %s/%s is asked for; operators decide it with ApproveSwitch or RejectSwitch", w.st.RepoID, r.TargetWorktreeID)
	if r.RequiresHITL {
		if err := workflow.SideEffect(ctx, func(workflow.Context) any { return newUUID() }).Get(&w.st.HitlID); err != nil {
			return err
		}
		w.st.Note = fmt.Sprintf("a switch to %s/%s is asked for; HITL invocation %s decides it", w.st.RepoID, r.TargetWorktreeID,
			hitl.WorkflowID(w.st.HitlID))
	}
	if err := w.transition(ctx, worktree.EventSwitchRequest, r.By, map[string]any{"requires_hitl": r.RequiresHITL}); err != nil {
		return err
	}
	if r.RequiresHITL {
		w.askHITL(ctx, r.By)
	}
	return nil
}

// askHITL raises the switch's HITL invocation (reason WORKTREE_OVERRIDE) in the background;
// its outcome reaches the main loop through w.hitl.
func (w *worktreeRun) askHITL(ctx workflow.Context, by string) {
	st := w.st
	inv := hitl.Invocation{
		InvocationID: st.HitlID, ReasonType: commonpb.HitlReasonType_WORKTREE_OVERRIDE.String(),
		CorrelationID: activities.WorktreeCorrelation(st.AgentID), RequestedBy: WorktreeWorkflowID(st.AgentID),
		Subject: hitl.Subject{RepoID: st.RepoID, WorktreeID: st.TargetWorktreeID, AgentID: st.AgentID},
		Context: hitl.Context{Facts: []string{
			fmt.Sprintf("agent %s asks to work in worktree %s of repository %s, outside its home worktree %s (§16)", st.AgentID, st.TargetWorktreeID, st.RepoID, st.HomeWorktreeID),
			fmt.Sprintf("asked by %s", orScheduler(by)),
			fmt.Sprintf("an approval binds it there for %s (a modify decision may patch {\"ttl_ms\": n}, at most %s); then it returns home", DefaultSwitchTTL, MaxSwitchTTL),
		}},
		ProposedActions: []string{"approve: switch " + st.AgentID + " to " + st.TargetWorktreeID + " for " + DefaultSwitchTTL.String(),
			"modify: approve with the TTL of a {\"ttl_ms\": n} patch", "deny: keep it at home"},
		Fallback: hitl.Fallback{Policy: hitl.DenyByDefault},
	}
	workflow.Go(ctx, func(gctx workflow.Context) {
		out, err := RequestHITL(gctx, inv)
		w.hitl = &hitlResult{out: out, err: err}
	})
}

// applyHITL applies the switch's HITL outcome: approve (or modify with a TTL patch) binds
// the target, anything else — a denial, a deferral, the fallback — rejects the switch.
func (w *worktreeRun) applyHITL(ctx workflow.Context) error {
	h := *w.hitl
	w.hitl = nil
	by := hitl.WorkflowID(w.st.HitlID)
	if h.err != nil {
		if temporal.IsCanceledError(h.err) {
			return h.err
		}
		return w.rejectPending(ctx, "the switch was rejected: its HITL invocation failed: "+h.err.Error(), by)
	}
	decider := h.out.DecidedBy
	if h.out.Fallback {
		decider = "fallback " + h.out.FallbackPolicy
	}
	switch h.out.Decision {
	case hitl.Approve, hitl.Modify:
		ttl := DefaultSwitchTTL
		if h.out.Decision == hitl.Modify {
			p, err := switchPatchOf(h.out.Patch)
			if err != nil || p.TTLMs == 0 || time.Duration(p.TTLMs)*time.Millisecond > MaxSwitchTTL {
				return w.rejectPending(ctx, fmt.Sprintf("the switch was rejected: the HITL decision of %s modified it with a patch that is not {\"ttl_ms\": n} with 0 < n ≤ %d",
					decider, MaxSwitchTTL.Milliseconds()), by)
			}
			ttl = time.Duration(p.TTLMs) * time.Millisecond
		}
		refusal, err := w.applyApprove(ctx, ttl, by, "approved by HITL decision of "+decider)
		if err != nil || refusal == nil {
			return err
		}
		// The target could not be made: nobody waits for an answer, so the switch ends.
		return w.rejectPending(ctx, "the switch was approved but could not be made: "+refusal.Error(), by)
	}
	note := fmt.Sprintf("the switch to %s was rejected by HITL decision of %s (%s)", w.st.TargetWorktreeID, decider, h.out.Decision)
	if h.out.Rationale != "" {
		note += ": " + h.out.Rationale
	}
	return w.rejectPending(ctx, note, by)
}

// applyApprove binds the pending switch's target for ttl (zero: DefaultSwitchTTL):
// EnsureWorktree makes or reuses it without taking its lock — the approval is what lets the
// agent in. If the target cannot be made the switch stays pending and the approval is
// answered with refusal, whose type is the §16.3 reason.
func (w *worktreeRun) applyApprove(ctx workflow.Context, ttl time.Duration, by, why string) (refusal, err error) {
	if ttl == 0 {
		ttl = DefaultSwitchTTL
	}
	var got activities.EnsuredWorktree
	err = workflow.ExecuteActivity(w.gitCtx(ctx), w.acts.EnsureWorktree, activities.EnsureWorktreeInput{AgentID: w.st.AgentID,
		RepoID: w.st.RepoID, WorktreeID: w.st.TargetWorktreeID}).Get(ctx, &got)
	if temporal.IsCanceledError(err) {
		return nil, err
	}
	if err != nil {
		reason, msg := activities.ReasonOfActivityError(err)
		details := map[string]any{"switch_target": w.st.TargetWorktreeID, "reason": string(reason), "note": msg}
		if rerr := w.record(ctx, activities.WorktreeEventBindFailed, "", "", by, details); rerr != nil {
			return nil, rerr
		}
		return temporal.NewApplicationError(fmt.Sprintf("%s: worktree %s could not be bound: %s", reason, w.st.TargetWorktreeID, msg), string(reason)), nil
	}
	now := workflow.Now(ctx)
	w.st.WorktreeID, w.st.Branch, w.st.Path = w.st.TargetWorktreeID, got.Branch, got.Path
	w.st.TTL, w.st.ExpiresAt = ttl, now.Add(ttl)
	if why == "" {
		why = "approved by " + orScheduler(by)
	}
	w.st.Note = fmt.Sprintf("switched to %s/%s until %s (%s)", w.st.RepoID, w.st.TargetWorktreeID, w.st.ExpiresAt.UTC().Format(time.RFC3339), why)
	return nil, w.transition(ctx, worktree.EventSwitchApprove, by, map[string]any{"ttl": ttl.String(), "created": got.Created})
}

// applyReject rejects the pending switch, or revokes the approved one at once.
func (w *worktreeRun) applyReject(ctx workflow.Context, r WorktreeSwitchRejection) error {
	reason := r.Reason
	if reason == "" {
		reason = "no reason given"
	}
	if w.st.State == worktree.StateBoundNonHome {
		return w.returnHome(ctx, worktree.EventSwitchRevoke, fmt.Sprintf("the switch to %s was revoked by %s: %s", w.st.TargetWorktreeID, orScheduler(r.By), reason), r.By)
	}
	return w.rejectPending(ctx, fmt.Sprintf("the switch to %s was rejected by %s: %s", w.st.TargetWorktreeID, orScheduler(r.By), reason), r.By)
}

// rejectPending ends a pending switch: the agent stays home (SWITCH_REJECT).
func (w *worktreeRun) rejectPending(ctx workflow.Context, note, by string) error {
	w.st.Note = note
	w.clearSwitch()
	return w.transition(ctx, worktree.EventSwitchReject, by, nil)
}

// returnHome ends a non-home binding (TTL expired or SWITCH_REVOKE): the agent works in its
// home worktree again.
func (w *worktreeRun) returnHome(ctx workflow.Context, ev worktree.Event, note, by string) error {
	w.st.Note = note
	w.clearSwitch()
	w.st.WorktreeID, w.st.Branch, w.st.Path = w.st.HomeWorktreeID, w.st.HomeBranch, w.st.HomePath
	return w.transition(ctx, ev, by, nil)
}

// clearSwitch forgets a switch.
func (w *worktreeRun) clearSwitch() {
	w.st.TargetWorktreeID, w.st.RequiresHITL, w.st.HitlID, w.st.PendingSince = "", false, "", time.Time{}
	w.st.TTL, w.st.ExpiresAt = 0, time.Time{}
}

// transition moves the binding by ev — through worktree.Transition only, so nothing but
// §16.2's table ever moves it — and records it.
func (w *worktreeRun) transition(ctx workflow.Context, ev worktree.Event, by string, details map[string]any) error {
	from := w.st.State
	to, err := worktree.Transition(from, ev)
	if err != nil {
		// The checks before every call make this unreachable; failing the workflow task
		// would retry it forever, so the run fails loudly instead.
		return temporal.NewNonRetryableApplicationError(err.Error(), WorktreeUpdateRefused, err)
	}
	w.st.State = to
	return w.record(ctx, activities.WorktreeEventState, string(from), string(ev), by, details)
}

// record upserts SW4RMWorktreeState when it changed and records the binding and the audit
// event (RecordWorktree).
func (w *worktreeRun) record(ctx workflow.Context, typ, from, ev, by string, details map[string]any) error {
	now := workflow.Now(ctx)
	w.st.UpdatedAt = now
	if w.st.State != w.stateSet {
		if err := workflow.UpsertTypedSearchAttributes(ctx, WorktreeStateKey.ValueSet(w.st.State.String())); err != nil {
			return err
		}
		w.stateSet = w.st.State
	}
	st := w.st
	b := store.WorktreeBinding{AgentID: st.AgentID, State: st.State.String(), RepoID: st.RepoID, HomeWorktreeID: st.HomeWorktreeID,
		WorktreeID: st.WorktreeID, Branch: st.Branch, Path: st.Path, TargetWorktreeID: st.TargetWorktreeID, Reason: string(st.Reason),
		Note: st.Note, ExpiresAt: st.ExpiresAt, UpdatedAt: now}
	return workflow.ExecuteLocalActivity(w.localCtx(ctx), w.acts.RecordWorktree, activities.RecordWorktreeInput{Binding: b, Type: typ,
		From: from, Event: ev, Actor: by, Details: details}).Get(ctx, nil)
}

// gitCtx runs the git activities on the task queue's workers, which hold the repositories:
// a stuck git is cut off after a minute, and a lost worker's attempt is retried; a failed
// bind is not (EnsureWorktree's errors are non-retryable), since its retries are §16.3's.
func (w *worktreeRun) gitCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, MaximumAttempts: 3},
	})
}

// localCtx runs the store and audit writes as local activities, like the handoff's: short
// writes in the worker's own process, retried until the store takes them.
func (w *worktreeRun) localCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
	})
}

// switchPatchOf decodes a HITL decision's patch. Decoding into a struct is deterministic;
// workflowcheck flags encoding/json only because its reflection reaches runtime internals.
func switchPatchOf(patch []byte) (WorktreeSwitchPatch, error) {
	var p WorktreeSwitchPatch
	//workflowcheck:ignore
	err := json.Unmarshal(patch, &p)
	return p, err
}

// orScheduler names a caller, or the scheduler when there is none (authentication off).
func orScheduler(by string) string {
	if by == "" {
		return "the scheduler"
	}
	return by
}
