package workflows

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
)

// DefaultHITLTimeout is how long a HITL wait lasts when the invocation names no timeout.
const DefaultHITLTimeout = time.Hour

// HitlWaitInput starts a HITL wait.
type HitlWaitInput struct {
	// Invocation is what is asked.
	Invocation hitl.Invocation
}

// RequestHITL is the one way a workflow asks a human (architecture: every HITL wait uses one
// helper). It raises the invocation as the child workflow hitl/<invocation_id>, marks the
// caller as pending HITL in the Temporal UI while it waits, and returns the outcome: a
// human's decision, or the configured fallback when nobody decides in time (§15.1, §15.3).
// An empty InvocationID gets a fresh UUID.
func RequestHITL(ctx workflow.Context, inv hitl.Invocation) (hitl.Outcome, error) {
	if inv.InvocationID == "" {
		if err := workflow.SideEffect(ctx, func(workflow.Context) any { return newUUID() }).Get(&inv.InvocationID); err != nil {
			return hitl.Outcome{}, err
		}
	}
	if inv.RequestedBy == "" {
		inv.RequestedBy = workflow.GetInfo(ctx).WorkflowExecution.ID
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, HitlPendingKey.ValueSet(true)); err != nil {
		return hitl.Outcome{}, err
	}
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            hitl.WorkflowID(inv.InvocationID),
		TypedSearchAttributes: temporal.NewSearchAttributes(KindKey.ValueSet(KindHITL), HitlPendingKey.ValueSet(true)),
		StaticSummary:         summary("HITL %s: %s (§15)", inv.ReasonType, inv.InvocationID),
	})
	var out hitl.Outcome
	err := workflow.ExecuteChildWorkflow(cctx, HitlWait, HitlWaitInput{Invocation: inv}).Get(ctx, &out)
	if uerr := workflow.UpsertTypedSearchAttributes(ctx, HitlPendingKey.ValueSet(false)); uerr != nil && err == nil {
		err = uerr
	}
	return out, err
}

// HitlWait is one durable HITL wait (§15): it records the invocation, then waits for a valid
// decision on hitl.DecisionSignal — or for an external HITL component's answer — with
// the deadline as a durable timer that a decision cancels. On the deadline, or when no HITL
// component exists or the external one is unavailable, it applies the invocation's fallback
// and records that it did, which one, why and when (§15.1, §15.3, §15.4). A decision must
// carry a valid attestation (hitl.Attest): signed by the deployment's decision key or
// by the operator's own key, unexpired, for this invocation. Decisions without one — a
// plaintext token included — for another invocation, or malformed, are refused and audited;
// the first valid decision wins. When the policy names a HITL agent, the wait also sends it
// the invocation as a HITL_INVOCATION envelope (§15); the agent's reply reaches the same
// signal, attested by the frontend that took it (Via hitl.ViaMessage).
func HitlWait(ctx workflow.Context, in HitlWaitInput) (hitl.Outcome, error) {
	w := &hitlWait{inv: in.Invocation}
	return w.run(ctx)
}

// Change IDs of HitlWait (workflow.GetVersion), so that runs recorded by earlier code replay.
const (
	// hitlAttestedDecisions: runs started since refuse decisions carrying a token and accept
	// attested ones only; runs recorded before keep accepting the token they were started
	// with (issue 15: no operator secret in history).
	hitlAttestedDecisions = "hitl-attested-decisions"
	// hitlPolicyReload: each attested decision reloads the operator policy first
	// (activities.LoadHitlPolicy), so that a decision key or an operator's key added, rotated
	// or revoked while the wait lasts counts — and so that runs started before attested
	// decisions, whose recorded policy has no keys, can still be decided.
	hitlPolicyReload = "hitl-policy-reload"
	// hitlDeploymentFallback: an invocation that sets no fallback policy gets the
	// deployment's (hitl.Policy.Fallback, which RecordHitlInvocation returns and records)
	// instead of DENY_BY_DEFAULT, and the stored invocation shows the one applied (§15.3,
	// §15.4). Runs recorded before keep DENY_BY_DEFAULT.
	hitlDeploymentFallback = "hitl-deployment-fallback"
	// hitlAgentInvocation: when the policy names a HITL agent, the wait sends it the
	// invocation as a HITL_INVOCATION envelope (activities.SendHitlInvocation, §15) and
	// counts it as a HITL component (§15.3). Runs recorded before never sent one; their
	// policies name no agent.
	hitlAgentInvocation = "hitl-agent-invocation"
)

type hitlWait struct {
	inv    hitl.Invocation
	policy hitl.Policy
	// legacyTokens: the run was recorded before attested decisions and still accepts a
	// decision's plaintext token.
	legacyTokens bool
	deadline     time.Time
	extensions   int
	refused      int
	outcome      *hitl.Outcome
	// unavailable is set once the external HITL component, or the HITL agent when it is the
	// only component, was found unavailable.
	unavailable bool
	// agentAsked is set once the HITL agent has the invocation in its buffer.
	agentAsked bool

	// What the wait keeps between the steps of its loop (see run).
	actx           workflow.Context // activity options for the audit and the records
	timer          workflow.Future  // the deadline
	cancelTimer    workflow.CancelFunc
	external       workflow.Future // the external HITL component's answer, while asked
	cancelExternal workflow.CancelFunc
}

func (w *hitlWait) run(ctx workflow.Context) (hitl.Outcome, error) {
	if err := w.inv.Validate(); err != nil {
		return hitl.Outcome{}, temporal.NewNonRetryableApplicationError("invalid HITL invocation: "+err.Error(), "validation_error", nil)
	}
	if w.inv.Timeout <= 0 {
		w.inv.Timeout = DefaultHITLTimeout
	}
	w.legacyTokens = workflow.GetVersion(ctx, hitlAttestedDecisions, workflow.DefaultVersion, 1) == workflow.DefaultVersion
	ownFallback := w.inv.Fallback.Policy != ""
	deployedFallback := workflow.GetVersion(ctx, hitlDeploymentFallback, workflow.DefaultVersion, 1) != workflow.DefaultVersion
	if !ownFallback && !deployedFallback {
		w.inv.Fallback.Policy = hitl.DenyByDefault
	}
	created := workflow.Now(ctx)
	w.deadline = created.Add(w.inv.Timeout)
	if err := workflow.SetQueryHandler(ctx, hitl.StatusQuery, func() (hitl.Status, error) {
		return hitl.Status{Invocation: w.inv, Deadline: w.deadline, Extensions: w.extensions, Outcome: w.outcome, Refused: w.refused}, nil
	}); err != nil {
		return hitl.Outcome{}, err
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
	})
	var acts *activities.Activities
	if err := workflow.ExecuteActivity(actx, acts.RecordHitlInvocation, activities.HitlInvocationInput{
		Invocation: w.inv, WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, Deadline: w.deadline, CreatedAt: created,
		OmitTokenHashes: !w.legacyTokens,
	}).Get(ctx, &w.policy); err != nil {
		return hitl.Outcome{}, err
	}
	if !ownFallback && deployedFallback {
		// The deployment's fallback, as RecordHitlInvocation recorded it: the policy it
		// returned is in the history, so a replay applies the same one even if the
		// configuration changed since.
		w.inv.Fallback = w.policy.FallbackFor(w.inv.Fallback)
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, KindKey.ValueSet(KindHITL), HitlPendingKey.ValueSet(true)); err != nil {
		return hitl.Outcome{}, err
	}

	w.actx = actx
	if len(w.policy.Operators) == 0 && w.policy.External == "" && w.policy.Agent == "" {
		// §15.3: without a HITL component nothing may block; the fallback applies now.
		// (Policies recorded before HITL agents existed name none: the same test as before.)
		w.fallback(ctx, "no_hitl_component")
	}

	decisions := workflow.GetSignalChannel(ctx, hitl.DecisionSignal)
	var timerCtx workflow.Context
	timerCtx, w.cancelTimer = workflow.WithCancel(ctx)
	w.timer = workflow.NewTimerWithOptions(timerCtx, w.deadline.Sub(workflow.Now(ctx)), w.deadlineTimer())
	w.cancelExternal = func() {}
	w.askExternal(ctx)
	if w.outcome == nil && !w.askAgent(ctx) && w.onlyAgent() {
		// §15.4: the one HITL component is unavailable, as an external one can be.
		w.unavailable = true
		w.extendOrFallback(ctx, "hitl_unavailable")
	}

	for w.outcome == nil {
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(decisions, func(c workflow.ReceiveChannel, _ bool) { w.onDecision(ctx, c) })
		sel.AddFuture(w.timer, func(f workflow.Future) { w.onDeadline(ctx, f) })
		if w.external != nil {
			sel.AddFuture(w.external, func(f workflow.Future) { w.onExternal(ctx, f) })
		}
		sel.Select(ctx)
	}
	w.cancelTimer()
	w.cancelExternal()

	if err := workflow.ExecuteActivity(actx, acts.RecordHitlOutcome, activities.HitlOutcomeInput{Invocation: w.inv, Outcome: *w.outcome}).Get(ctx, nil); err != nil {
		return hitl.Outcome{}, err
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, HitlPendingKey.ValueSet(false)); err != nil {
		return hitl.Outcome{}, err
	}
	return *w.outcome, nil
}

// audit records an event of the invocation (§19). Auditing must not lose the decision: a
// failure here is logged, the wait goes on.
func (w *hitlWait) audit(ctx workflow.Context, typ, actor string, details map[string]any) {
	var acts *activities.Activities
	if err := workflow.ExecuteActivity(w.actx, acts.RecordHitlEvent, activities.HitlEventInput{
		InvocationID: w.inv.InvocationID, CorrelationID: w.inv.CorrelationID, Type: typ, Actor: actor, Details: details,
	}).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Error("HITL audit failed", "type", typ, "error", err)
	}
}

// askExternal asks the external HITL component, if there is one, for the decision.
func (w *hitlWait) askExternal(ctx workflow.Context) {
	if w.policy.External == "" {
		return
	}
	var acts *activities.Activities
	var ectx workflow.Context
	ectx, w.cancelExternal = workflow.WithCancel(ctx)
	ectx = workflow.WithActivityOptions(ectx, workflow.ActivityOptions{
		StartToCloseTimeout: w.deadline.Sub(workflow.Now(ctx)) + 10*time.Second,
		HeartbeatTimeout:    30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:             summary("ask the external HITL component about %s %s", w.inv.ReasonType, w.inv.InvocationID),
	})
	w.external = workflow.ExecuteActivity(ectx, acts.AskExternalHitl, w.inv)
}

// askAgent sends the HITL agent, if the policy names one, the invocation as a
// HITL_INVOCATION envelope (§15), unless it has it already. It reports false when there is
// an agent and it could not be sent the invocation — not registered, or the send failed —
// which is audited as hitl.unavailable.
func (w *hitlWait) askAgent(ctx workflow.Context) bool {
	if w.policy.Agent == "" || w.agentAsked {
		return true
	}
	if workflow.GetVersion(ctx, hitlAgentInvocation, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return true
	}
	var acts *activities.Activities
	// A few quick attempts: the send is one store write, and the wait must not stall on it.
	sctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3},
		Summary:             summary("send %s %s to HITL agent %s", w.inv.ReasonType, w.inv.InvocationID, w.policy.Agent),
	})
	var sent activities.HitlAgentDelivery
	err := workflow.ExecuteActivity(sctx, acts.SendHitlInvocation, activities.HitlAgentInput{
		Invocation: w.inv, Agent: w.policy.Agent, Deadline: w.deadline,
	}).Get(ctx, &sent)
	if err == nil && sent.Delivered {
		w.agentAsked = true
		return true
	}
	reason := sent.Reason
	if err != nil {
		reason = err.Error()
	}
	workflow.GetLogger(ctx).Warn("HITL agent unavailable", "invocation_id", w.inv.InvocationID, "agent", w.policy.Agent, "reason", reason)
	w.audit(ctx, "hitl.unavailable", "scheduler", map[string]any{"agent": w.policy.Agent, "error": reason, "policy": w.inv.Fallback.Policy})
	return false
}

// onlyAgent reports whether the HITL agent is the deployment's only HITL component: no
// operators, no external component.
func (w *hitlWait) onlyAgent() bool {
	return w.policy.Agent != "" && len(w.policy.Operators) == 0 && w.policy.External == ""
}

// extendOrFallback handles the deadline and external unavailability alike (§15.4).
func (w *hitlWait) extendOrFallback(ctx workflow.Context, reason string) {
	if w.inv.Fallback.Policy != hitl.ExtendTimeout {
		w.fallback(ctx, reason)
		return
	}
	maxExt := w.inv.Fallback.MaxExtensions
	if maxExt == 0 {
		maxExt = hitl.DefaultMaxExtensions
	}
	if w.extensions >= maxExt {
		w.fallback(ctx, "extensions_exhausted")
		return
	}
	extendBy := w.inv.Fallback.ExtendBy
	if extendBy == 0 {
		extendBy = w.inv.Timeout
	}
	w.extensions++
	w.deadline = workflow.Now(ctx).Add(extendBy)
	w.cancelTimer()
	var timerCtx workflow.Context
	timerCtx, w.cancelTimer = workflow.WithCancel(ctx)
	w.timer = workflow.NewTimerWithOptions(timerCtx, extendBy, w.deadlineTimer())
	w.audit(ctx, "hitl.deadline_extended", "fallback", map[string]any{"reason": reason, "extension": w.extensions, "max_extensions": maxExt, "deadline": w.deadline.UTC().Format(time.RFC3339)})
	if reason == "hitl_unavailable" {
		w.askExternal(ctx)
	} else {
		// The deadline passed: a HITL agent that could not be sent the invocation is asked
		// again for the extension (§15.4 "retry HITL escalation").
		w.askAgent(ctx)
	}
}

// onDecision takes a decision signal: the first valid one wins, others are refused and
// audited.
func (w *hitlWait) onDecision(ctx workflow.Context, c workflow.ReceiveChannel) {
	var d hitl.Decision
	c.Receive(ctx, &d)
	// The time the decision arrived judges its attestation's expiry, not the time after the
	// policy reload below.
	received := workflow.Now(ctx)
	if err := w.accept(ctx, d, received); err != nil {
		w.refused++
		details := map[string]any{"reason": err.Error(), "decision": string(d.Decision), "via": via(d.Via)}
		if d.Attestation != nil {
			details["key_id"] = d.Attestation.KeyID
		}
		w.audit(ctx, "hitl.decision_refused", d.Operator, details)
	}
}

// onDeadline extends the deadline or applies the fallback (§15.4).
func (w *hitlWait) onDeadline(ctx workflow.Context, f workflow.Future) {
	if f.Get(ctx, nil) != nil {
		return // cancelled by an extension
	}
	w.extendOrFallback(ctx, "deadline")
}

// onExternal takes the external component's answer, or its unavailability (§15.4).
func (w *hitlWait) onExternal(ctx workflow.Context, f workflow.Future) {
	w.external = nil
	var o hitl.Outcome
	err := f.Get(ctx, &o)
	if err == nil {
		o.InvocationID, o.DecidedAt = w.inv.InvocationID, workflow.Now(ctx)
		w.outcome = &o
		return
	}
	var canceled *temporal.CanceledError
	if errors.As(err, &canceled) {
		return
	}
	w.unavailable = true
	workflow.GetLogger(ctx).Warn("external HITL component unavailable", "invocation_id", w.inv.InvocationID, "error", err)
	w.audit(ctx, "hitl.unavailable", "scheduler", map[string]any{"external": w.policy.External, "error": err.Error(), "policy": w.inv.Fallback.Policy})
	w.extendOrFallback(ctx, "hitl_unavailable")
}

// accept validates a decision received at now and, if it is valid, makes it the outcome.
func (w *hitlWait) accept(ctx workflow.Context, d hitl.Decision, now time.Time) error {
	if d.InvocationID != w.inv.InvocationID {
		return fmt.Errorf("validation_error: decision names invocation %q, this is %q", d.InvocationID, w.inv.InvocationID)
	}
	// The attestation covers the decision exactly as it was signed, before ParseAction
	// normalises its case.
	signed := d
	action, err := hitl.ParseAction(string(d.Decision))
	if err != nil {
		return fmt.Errorf("validation_error: %v", err)
	}
	d.Decision = action
	if err := d.Check(); err != nil {
		return err
	}
	var keyID string
	if w.legacyTokens && d.Token != "" {
		// A run recorded before attested decisions accepts the token it was started with.
		if err := w.policy.AuthorizeToken(d, w.inv.ReasonType); err != nil {
			return err
		}
	} else {
		if d.Attestation != nil && d.Token == "" {
			w.reloadPolicy(ctx)
		}
		if keyID, err = w.policy.Authorize(signed, w.inv.ReasonType, now); err != nil {
			return err
		}
	}
	w.outcome = &hitl.Outcome{
		InvocationID: w.inv.InvocationID, Decision: action, Rationale: d.Rationale, Patch: d.Patch,
		DecidedBy: d.Operator, AttestedBy: keyID, Via: via(d.Via), DecidedAt: workflow.Now(ctx), Extensions: w.extensions,
	}
	return nil
}

// reloadPolicy loads the operator policy the workers hold now, for runs whose change
// hitlPolicyReload applies (runs that received an attested decision before it did not).
// A failure keeps the policy the run has.
func (w *hitlWait) reloadPolicy(ctx workflow.Context) {
	if workflow.GetVersion(ctx, hitlPolicyReload, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	var acts *activities.Activities
	var p hitl.Policy
	if err := workflow.ExecuteActivity(w.actx, acts.LoadHitlPolicy).Get(ctx, &p); err != nil {
		workflow.GetLogger(ctx).Error("HITL policy reload failed; keeping the loaded one", "error", err)
		return
	}
	if w.legacyTokens {
		// The reloaded policy has no token hashes; a run that still accepts tokens keeps the
		// ones it loaded at start.
		for i := range p.Operators {
			if old, ok := w.policy.Operator(p.Operators[i].Name); ok {
				p.Operators[i].TokenSHA256 = old.TokenSHA256
			}
		}
	}
	w.policy = p
}

// fallback applies the invocation's fallback policy (§15.1, §15.3, §15.4).
func (w *hitlWait) fallback(ctx workflow.Context, reason string) {
	fb := w.inv.Fallback
	o := &hitl.Outcome{
		InvocationID: w.inv.InvocationID, DecidedBy: "fallback", Via: "fallback", DecidedAt: workflow.Now(ctx),
		Fallback: true, FallbackPolicy: fb.Policy, FallbackReason: reason, Extensions: w.extensions,
		Decision: hitl.Deny, HitlUnavailable: w.unavailable,
	}
	switch {
	case fb.Policy == hitl.AutoDecideThreshold && fb.Score >= fb.Threshold:
		o.Decision = hitl.Approve
		o.Rationale = fmt.Sprintf("no human decision (%s); auto-approved: score %.3f reaches threshold %.3f", reason, fb.Score, fb.Threshold)
	case fb.Policy == hitl.AutoDecideThreshold:
		o.Rationale = fmt.Sprintf("no human decision (%s); auto-denied: score %.3f is below threshold %.3f", reason, fb.Score, fb.Threshold)
	default:
		o.Rationale = fmt.Sprintf("no human decision (%s); denied by default", reason)
	}
	w.outcome = o
}

func via(v string) string {
	if v == "" {
		return "signal"
	}
	return v
}

// KindHITL is the SW4RMKind search-attribute value of HITL waits.
const KindHITL = "hitl"

// HitlStartOptions are the start options of workflow hitl/<invocation_id> raised on its own
// (HitlService.Decide) on taskQueue.
func HitlStartOptions(invocationID, taskQueue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID: hitl.WorkflowID(invocationID), TaskQueue: taskQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(KindKey.ValueSet(KindHITL), HitlPendingKey.ValueSet(true)),
		StaticSummary:         summary("HITL invocation %s (§15)", invocationID),
	}
}

// SignalHITLDecision signals a decision to its invocation's workflow, hitl/<invocation_id> —
// what every door (gRPC, CLI, web) does in the end. It does not wait for the workflow to act
// on it; the workflow's own checks decide whether the decision stands.
func SignalHITLDecision(ctx context.Context, c client.Client, d hitl.Decision) error {
	return c.SignalWorkflow(ctx, hitl.WorkflowID(d.InvocationID), "", hitl.DecisionSignal, d)
}

// deadlineTimer is the options of the timer of the invocation's deadline (§15.3): what the
// Temporal UI shows the timer as.
func (w *hitlWait) deadlineTimer() workflow.TimerOptions {
	return workflow.TimerOptions{Summary: summary("deadline of %s %s: %s", w.inv.ReasonType, w.inv.InvocationID, w.deadline.UTC().Format(time.RFC3339))}
}
