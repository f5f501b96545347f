package workflows

import (
	"crypto/sha256"
	"encoding/hex"
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
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// KindHandoff is the SW4RMKind search-attribute value of handoff runs.
const KindHandoff = "handoff"

// OutboxHandoffStart is the outbox entry kind that starts workflow handoff/<request_id> after
// RequestHandoff stored the handoff (payload HandoffStartPayload). The frontend's handler
// starts it with HandoffStartOptions; a run already started counts as delivered.
const OutboxHandoffStart = "handoff.start"

// Names of the handoff workflow's messages (§17.6).
const (
	// HandoffAcceptUpdate carries a HandoffAnswer from AcceptHandoff; it returns the
	// HandoffState once the acceptance is recorded.
	HandoffAcceptUpdate = "accept"
	// HandoffRejectUpdate carries a HandoffAnswer from RejectHandoff; it returns the
	// HandoffState once the rejection is taken into account.
	HandoffRejectUpdate = "reject"
	// HandoffCompleteUpdate carries a HandoffCompletion from CompleteHandoff; it returns the
	// HandoffState once the completion and the originator's fence are recorded.
	HandoffCompleteUpdate = "complete"
	// HandoffCancelSignal carries a HandoffCancel from CancelDelegation.
	HandoffCancelSignal = "cancel"
	// HandoffStateQuery returns the HandoffState.
	HandoffStateQuery = "state"
	// HandoffReleaseUpdate carries an activities.AgentRelease: the agent stopped (§8.4). A
	// pending offer to it is withdrawn as if it had rejected it (agent_unavailable: the next
	// candidate when routing or spillover allows, else REJECTED); a handoff it accepted ends
	// EXPIRED, the context staying with the originator, as at the completion deadline. It
	// answers an activities.ReleaseOutcome once that is applied.
	HandoffReleaseUpdate = "release"
)

// versionHandoffRedirectEdges is the workflow.GetVersion change ID of the REDIRECT edges,
// asked when a run first handles a REDIRECT: runs that take it check the target first (a
// blank one or a loop ends the handoff at once, validation_error), follow only with spillover
// routing on (protocol.FollowsRedirects; otherwise the REDIRECT goes back to the
// originator), bound the chain by protocol.DefaultHandoffMaxRedirects, and follow only to an
// agent with the capabilities_required. Runs recorded before keep the old rules.
const versionHandoffRedirectEdges = "handoff-redirect-edges"

// legacyHandoffMaxRedirects is the default redirect bound of runs recorded before
// versionHandoffRedirectEdges.
const legacyHandoffMaxRedirects = 3

// versionHandoffCompletionDeadline is the workflow.GetVersion change ID of the completion
// deadline, asked when a run accepts: runs that take it wait for CompleteHandoff only until
// protocol.HandoffCompletionDeadline and then end EXPIRED, telling the accepting agent and
// the originator. Runs recorded before wait without a deadline, as they did.
const versionHandoffCompletionDeadline = "handoff-completion-deadline"

// HandoffUpdateRefused is the error type of a refused accept, reject or complete update: the
// handoff is not in the state the call needs, or the caller is not the agent it needs. The
// frontend answers it with FailedPrecondition; a refused update leaves nothing in history.
const HandoffUpdateRefused = "handoff_update_refused"

// HandoffWorkflowID is the workflow ID of a handoff: "handoff/<request_id>".
func HandoffWorkflowID(requestID string) string { return "handoff/" + requestID }

// HandoffStartOptions are the start options of workflow handoff/<requestID> on taskQueue: a
// request_id is never reused, even after its handoff ended (§17.6: a reuse answers with the
// existing handoff), and starting a running one joins it. agents (the originator, then the
// named target if any) seed SW4RMHandoffAgents; the run keeps it up to date.
func HandoffStartOptions(requestID, taskQueue string, agents ...string) client.StartWorkflowOptions {
	attrs := []temporal.SearchAttributeUpdate{KindKey.ValueSet(KindHandoff), HandoffStateKey.ValueSet(handoffpb.HandoffStatus_PENDING.String())}
	if agents = slices.DeleteFunc(slices.Clone(agents), func(a string) bool { return a == "" }); len(agents) > 0 {
		attrs = append(attrs, HandoffAgentsKey.ValueSet(agents))
	}
	return client.StartWorkflowOptions{
		ID: HandoffWorkflowID(requestID), TaskQueue: taskQueue,
		WorkflowIDReusePolicy:    enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes:    temporal.NewSearchAttributes(attrs...),
		StaticSummary:            summary("handoff %s: %s (§17.6)", requestID, strings.Join(agents, " → ")),
	}
}

// HandoffBudget is the BudgetEnvelope passed down a delegation chain.
type HandoffBudget struct {
	// CurrentDepth and MaxDepth are the delegation depth and its limit (0 = none).
	CurrentDepth, MaxDepth uint32
	// TokenBudget, WallTimeMs and DeadlineEpochMs are the remaining budget.
	TokenBudget, WallTimeMs, DeadlineEpochMs uint64
}

// HandoffInput starts a handoff workflow. The context snapshot is not in it: it stays in the
// store's handoff record, so no context bytes ever enter workflow history.
type HandoffInput struct {
	// RequestID names the handoff; Correlation is the correlation whose context moves.
	RequestID, Correlation string
	// From is the originator; To the named target, empty to route on Capabilities.
	From, To string
	// Reason is the originator's reason.
	Reason string
	// Capabilities are the capabilities_required.
	Capabilities []string `json:",omitempty"`
	// Priority is -19 (highest) .. 20 (§7.1).
	Priority int32
	// Timeout bounds the wait for acceptance (§17.6), from RequestedAt.
	Timeout time.Duration
	// Budget is the delegation budget.
	Budget HandoffBudget
	// Policy is the SwarmDelegationPolicy.
	Policy protocol.HandoffPolicy
	// ContextContentType, ContextSize and ContextSHA256 describe the snapshot (004 item 8).
	ContextContentType string
	ContextSize        int
	ContextSHA256      string `json:",omitempty"`
	// RequestedAt is when RequestHandoff accepted the request; zero means the run's start.
	RequestedAt time.Time
	// CompletionTimeout is how long an ACCEPTED handoff whose budget sets no deadline waits
	// for completion (the server's SW4RM_HANDOFF_COMPLETION_TIMEOUT when it was requested);
	// zero means protocol.DefaultHandoffCompletionTimeout.
	CompletionTimeout time.Duration `json:",omitempty"`
}

// HandoffInputFrom is the workflow input of a validated HandoffRequest: correlation is the
// correlation handed over, contentType the snapshot's declared content type (empty means
// application/json), requestedAt the time it was accepted.
func HandoffInputFrom(req *handoffpb.HandoffRequest, correlation, contentType string, requestedAt time.Time) HandoffInput {
	sum := sha256.Sum256(req.GetContextSnapshot())
	b := req.GetBudget()
	return HandoffInput{
		RequestID: req.GetRequestId(), Correlation: correlation, From: req.GetFromAgent(), To: req.GetToAgent(), Reason: req.GetReason(),
		Capabilities: slices.Clone(req.GetCapabilitiesRequired()), Priority: req.GetPriority(), Timeout: req.GetTimeout().AsDuration(),
		Budget: HandoffBudget{CurrentDepth: b.GetCurrentDepth(), MaxDepth: b.GetMaxDelegationDepth(), TokenBudget: b.GetTokenBudgetRemaining(),
			WallTimeMs: b.GetWallTimeRemainingMs(), DeadlineEpochMs: b.GetDeadlineEpochMs()},
		Policy:             protocol.HandoffPolicyFromProto(req.GetDelegationPolicy()),
		ContextContentType: protocol.HandoffContentType(contentType), ContextSize: len(req.GetContextSnapshot()),
		ContextSHA256: hex.EncodeToString(sum[:]), RequestedAt: requestedAt,
	}
}

// HandoffStartPayload is the payload of an OutboxHandoffStart outbox entry.
type HandoffStartPayload struct {
	// Input starts the workflow.
	Input HandoffInput
}

// HandoffAnswer is the payload of HandoffAcceptUpdate and HandoffRejectUpdate.
type HandoffAnswer struct {
	// Agent is the answering agent, the proven caller (§17.6: only the offered agent answers).
	Agent string
	// Reason is a rejection's rejection_reason.
	Reason string `json:",omitempty"`
	// Code is a rejection's rejection_code: OVERLOADED retries the same target after a
	// backoff, REDIRECT follows RedirectTo.
	Code commonpb.ErrorCode `json:",omitempty"`
	// RetryAfterMs is an OVERLOADED target's hint of when to retry.
	RetryAfterMs uint64 `json:",omitempty"`
	// RedirectTo is a REDIRECT's redirect_to_agent_id.
	RedirectTo string `json:",omitempty"`
}

// HandoffCompletion is the payload of HandoffCompleteUpdate.
type HandoffCompletion struct {
	// Agent is the proven caller; "" when authentication is off (then anyone may complete).
	Agent string `json:",omitempty"`
	// Status is the terminal status asked for; only COMPLETED is accepted for now.
	Status handoffpb.HandoffStatus
}

// HandoffCancel is the payload of HandoffCancelSignal.
type HandoffCancel struct {
	// Reason is CancelDelegation's reason.
	Reason string
	// GracePeriod is how long an accepted handoff's target has to stop (a completion within
	// it still counts).
	GracePeriod time.Duration `json:",omitempty"`
	// By is the caller who cancelled.
	By string `json:",omitempty"`
}

// HandoffOffer is one offer of a handoff.
type HandoffOffer struct {
	// Agent is the agent offered the handoff.
	Agent string
	// Reason says why it was chosen (named, routed, redirected, retried).
	Reason string
	// At is when the offer was made.
	At time.Time
}

// HandoffState is the answer of HandoffStateQuery and of the updates.
type HandoffState struct {
	// RequestID, Correlation and From name the handoff.
	RequestID, Correlation, From string
	// Target is the agent currently offered the handoff, or that accepted it.
	Target string
	// Status is the handoff's state.
	Status handoffpb.HandoffStatus
	// EndReason says why a handoff ended other than COMPLETED.
	EndReason string `json:",omitempty"`
	// EndCode is the error_code a REJECTED handoff returns to the originator: REDIRECT when
	// the last answer was a REDIRECT not followed, VALIDATION_ERROR for a redirect loop or a
	// blank redirect target.
	EndCode commonpb.ErrorCode `json:",omitempty"`
	// RedirectTo is the agent named by a REDIRECT that was not followed.
	RedirectTo string `json:",omitempty"`
	// Offers are the offers made, in order.
	Offers []HandoffOffer `json:",omitempty"`
	// Refused are the agents that rejected the handoff (or could not be redirected to).
	Refused []string `json:",omitempty"`
	// Redirects counts the REDIRECTs followed.
	Redirects int
	// OverloadRetries counts the offers repeated after an OVERLOADED rejection.
	OverloadRetries int
	// AcceptedBy is the agent that accepted.
	AcceptedBy string `json:",omitempty"`
	// CompleteBy is when an ACCEPTED handoff expires unless completed
	// (protocol.HandoffCompletionDeadline); zero before acceptance, and in runs recorded
	// before versionHandoffCompletionDeadline, which have no such deadline.
	CompleteBy time.Time `json:",omitzero"`
	// UpdatedAt is the time of the last change.
	UpdatedAt time.Time
}

// HandoffResult is the handoff workflow's result: its final state.
type HandoffResult = HandoffState

// HandoffWorkflow is the durable handoff of §17.6 (000 §3.11.2): it offers the work to the
// named target, or to the least loaded capable agent (RouteHandoff), and waits for an answer
// until the request's timeout. Acceptance waits for completion, which fences the originator
// off the correlation (§17.6: it MUST NOT continue work on the transferred context). An
// OVERLOADED rejection is retried after a durable backoff; a REDIRECT to a blank target or
// back along the chain ends the handoff at once (validation_error), one with spillover
// routing off is returned to the originator, and one to a capable agent is followed up to
// max_redirects; other rejections (and redirects not followed) go to the next candidate when
// routing or spillover allows and end the handoff REJECTED otherwise; the timeout or running
// out of candidates ends it EXPIRED, and so does CancelDelegation, and so does an accepted
// handoff not completed by its completion deadline. The originator is told every outcome. Every transition updates the search attributes and is recorded in the store
// and the audit log.
func HandoffWorkflow(ctx workflow.Context, in HandoffInput) (HandoffResult, error) {
	w := &handoffRun{in: in, policy: in.Policy}
	res, err := w.run(ctx)
	// An update being applied finishes, and its caller gets the answer, before the run ends.
	if aerr := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); aerr != nil && err == nil {
		err = aerr
	}
	return res, err
}

// handoffRun is one handoff's state machine. Updates do not change the state themselves:
// they hand their answer to the main loop (answer, completion) and wait until it was applied
// (applied), so every transition happens in one place and in one order.
type handoffRun struct {
	in     HandoffInput
	policy protocol.HandoffPolicy
	st     HandoffState

	// requested is when the handoff was requested; deadline is when its offer lapses.
	requested, deadline time.Time
	// open is set while the current target may answer the offer.
	open bool
	// answer is the accept (accepted) or reject the main loop has not taken yet.
	answer   *HandoffAnswer
	accepted bool
	// completion is the completion the main loop has not applied yet.
	completion *HandoffCompletion
	cancel     *HandoffCancel
	// lost is the release of the accepting agent, which stopped before completing.
	lost *activities.AgentRelease
	// taken counts the updates handed to the main loop, applied those it applied; done is set
	// when the run ends, which releases any update still waiting.
	taken, applied int
	done           bool
	// notes numbers the notifications sent (message ids).
	notes int
	// agentsSet is the last value of SW4RMHandoffAgents upserted.
	agentsSet []string
	// redirectEdges is whether this run takes versionHandoffRedirectEdges, decided at its
	// first REDIRECT.
	redirectEdges tristate
	// completionDeadline is whether this run takes versionHandoffCompletionDeadline, decided
	// at its acceptance.
	completionDeadline tristate
	// acts is nil: its method values name the activities, checked at compile time.
	acts *activities.Activities
}

func (w *handoffRun) run(ctx workflow.Context) (HandoffResult, error) {
	in := w.in
	start := workflow.Now(ctx)
	w.st = HandoffState{RequestID: in.RequestID, Correlation: in.Correlation, From: in.From, Status: handoffpb.HandoffStatus_PENDING, UpdatedAt: start}
	w.requested = in.RequestedAt
	if w.requested.IsZero() {
		w.requested = workflow.GetInfo(ctx).WorkflowStartTime
	}
	timeout := in.Timeout
	if timeout <= 0 || timeout > protocol.MaxHandoffTimeout {
		timeout = protocol.MaxHandoffTimeout
	}
	w.deadline = w.requested.Add(timeout)
	if err := w.setHandlers(ctx); err != nil {
		return w.st, err
	}
	if err := w.upsert(ctx); err != nil {
		return w.st, err
	}
	defer func() { w.done = true }()

	target, why := in.To, "named by the originator"
	for {
		if w.cancel != nil {
			return w.cancelled(ctx)
		}
		if target == "" {
			var route activities.HandoffRoute
			if err := w.exec(ctx, w.acts.RouteHandoff, activities.RouteHandoffInput{RequestID: in.RequestID, Correlation: in.Correlation,
				Capabilities: in.Capabilities, ContentType: in.ContextContentType, Exclude: w.excluded()}, &route); err != nil {
				return w.st, err
			}
			if w.cancel != nil {
				return w.cancelled(ctx)
			}
			if route.Agent == "" {
				return w.end(ctx, handoffpb.HandoffStatus_EXPIRED, route.Reason, "")
			}
			target, why = route.Agent, route.Reason
		}
		// A start delivered late by the outbox, or a long redirect chain, may find the
		// deadline passed: an offer nobody can accept is not made.
		if !workflow.Now(ctx).Before(w.deadline) {
			return w.end(ctx, handoffpb.HandoffStatus_EXPIRED, fmt.Sprintf("timeout: %s passed since the request before %s was offered it (§17.6)", timeout, target), "")
		}
		if err := w.offer(ctx, target, why); err != nil {
			return w.st, err
		}
		answered, err := w.awaitAnswer(ctx, w.deadline.Sub(workflow.Now(ctx)))
		if err != nil {
			return w.st, err
		}
		switch {
		case w.cancel != nil && !answered:
			return w.cancelled(ctx)
		case !answered:
			return w.end(ctx, handoffpb.HandoffStatus_EXPIRED, fmt.Sprintf("timeout: %s did not answer within %s of the request (§17.6)", target, timeout), target)
		}
		a := w.take()
		if w.accepted {
			return w.accept(ctx, a)
		}
		var done bool
		target, why, done, err = w.rejected(ctx, a)
		if done || err != nil {
			return w.st, err
		}
	}
}

// setHandlers installs the query, the updates with their validators and the cancel signal.
func (w *handoffRun) setHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, HandoffStateQuery, func() (HandoffState, error) { return w.snapshot(), nil }); err != nil {
		return err
	}
	answer := func(accept bool) func(workflow.Context, HandoffAnswer) (HandoffState, error) {
		return func(ctx workflow.Context, a HandoffAnswer) (HandoffState, error) {
			w.answer, w.accepted = &a, accept
			return w.wait(ctx)
		}
	}
	validAnswer := func(_ workflow.Context, a HandoffAnswer) error {
		if w.st.Status != handoffpb.HandoffStatus_PENDING || !w.open || w.answer != nil || w.cancel != nil || a.Agent != w.st.Target {
			return temporal.NewApplicationError(fmt.Sprintf("handoff %s is not offered to %s (state %s)", w.in.RequestID, a.Agent, w.st.Status), HandoffUpdateRefused)
		}
		return nil
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, HandoffAcceptUpdate, answer(true), workflow.UpdateHandlerOptions{Validator: validAnswer}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, HandoffRejectUpdate, answer(false), workflow.UpdateHandlerOptions{Validator: validAnswer}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, HandoffCompleteUpdate,
		func(ctx workflow.Context, c HandoffCompletion) (HandoffState, error) {
			w.completion = &c
			return w.wait(ctx)
		},
		workflow.UpdateHandlerOptions{Validator: func(_ workflow.Context, c HandoffCompletion) error {
			switch {
			case w.st.Status != handoffpb.HandoffStatus_ACCEPTED || w.completion != nil:
				return temporal.NewApplicationError(fmt.Sprintf("handoff %s is not accepted (state %s): only an accepted handoff completes", w.in.RequestID, w.st.Status), HandoffUpdateRefused)
			case c.Agent != "" && c.Agent != w.st.AcceptedBy:
				return temporal.NewApplicationError(fmt.Sprintf("handoff %s was accepted by %s, not %s: only the accepting agent completes it", w.in.RequestID, w.st.AcceptedBy, c.Agent), HandoffUpdateRefused)
			case c.Status != handoffpb.HandoffStatus_COMPLETED:
				return temporal.NewApplicationError(fmt.Sprintf("handoff %s: status %s cannot be set by CompleteHandoff, only COMPLETED", w.in.RequestID, c.Status), HandoffUpdateRefused)
			}
			return nil
		}},
	); err != nil {
		return err
	}
	// Registering a handler adds no command: runs recorded before it replay unchanged.
	if err := workflow.SetUpdateHandler(ctx, HandoffReleaseUpdate, w.release); err != nil {
		return err
	}
	ch := workflow.GetSignalChannel(ctx, HandoffCancelSignal)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var c HandoffCancel
			ch.Receive(ctx, &c)
			if w.cancel == nil { // the first cancellation decides; later ones change nothing
				w.cancel = &c
			}
		}
	})
	return nil
}

// release is HandoffReleaseUpdate's handler (§8.4): the agent rel names stopped. An answer
// still waiting for the main loop is taken first (the agent may have accepted just before it
// stopped), then an offer open to the agent is rejected on its behalf, or an acceptance of
// its is lost; anything else holds nothing for it.
func (w *handoffRun) release(ctx workflow.Context, rel activities.AgentRelease) (activities.ReleaseOutcome, error) {
	if err := workflow.Await(ctx, func() bool { return w.answer == nil || w.done }); err != nil {
		return activities.ReleaseOutcome{}, err
	}
	why := fmt.Sprintf("agent %s stopped: %s", rel.AgentID, rel.Why)
	var st HandoffState
	var err error
	switch {
	case w.done || w.cancel != nil || w.completion != nil || w.lost != nil:
		return activities.ReleaseOutcome{Outcome: "not held: " + w.st.Status.String()}, nil
	case w.st.Status == handoffpb.HandoffStatus_PENDING && w.open && w.st.Target == rel.AgentID:
		w.answer, w.accepted = &HandoffAnswer{Agent: rel.AgentID, Reason: why, Code: commonpb.ErrorCode_AGENT_UNAVAILABLE}, false
		st, err = w.wait(ctx)
	case w.st.Status == handoffpb.HandoffStatus_ACCEPTED && w.st.AcceptedBy == rel.AgentID:
		w.lost = &rel
		st, err = w.wait(ctx)
	default:
		return activities.ReleaseOutcome{Outcome: "not held: " + w.st.Status.String()}, nil
	}
	if err != nil {
		return activities.ReleaseOutcome{}, err
	}
	note := st.EndReason
	if st.Status == handoffpb.HandoffStatus_PENDING {
		note = "the offer is withdrawn; the handoff goes to the next candidate"
	}
	return activities.ReleaseOutcome{Released: true, Outcome: st.Status.String(), Note: note}, nil
}

// wait blocks an update until the main loop applied it (or the run ended) and returns the
// state as it then is.
func (w *handoffRun) wait(ctx workflow.Context) (HandoffState, error) {
	w.taken++
	n := w.taken
	if err := workflow.Await(ctx, func() bool { return w.applied >= n || w.done }); err != nil {
		return HandoffState{}, err
	}
	return w.snapshot(), nil
}

// take hands the pending answer to the main loop.
func (w *handoffRun) take() HandoffAnswer {
	a := *w.answer
	w.answer = nil
	w.open = false
	return a
}

// markApplied releases the updates waiting for the transitions made so far.
func (w *handoffRun) markApplied() { w.applied = w.taken }

// snapshot copies the state, so an answer is not changed by later transitions.
func (w *handoffRun) snapshot() HandoffState {
	s := w.st
	s.Offers, s.Refused = slices.Clone(w.st.Offers), slices.Clone(w.st.Refused)
	return s
}

// awaitAnswer waits up to d for an answer or a cancellation; it reports whether an answer
// came (a cancellation then waits its turn).
func (w *handoffRun) awaitAnswer(ctx workflow.Context, d time.Duration) (bool, error) {
	if d <= 0 {
		return w.answer != nil, nil
	}
	if _, err := workflow.AwaitWithTimeout(ctx, d, func() bool { return w.answer != nil || w.cancel != nil }); err != nil {
		return false, err
	}
	return w.answer != nil, nil
}

// excluded are the agents routing never chooses: the originator and those that refused.
func (w *handoffRun) excluded() []string { return append([]string{w.in.From}, w.st.Refused...) }

// offer offers the handoff to target (a new offer each time, with its own message_id).
func (w *handoffRun) offer(ctx workflow.Context, target, why string) error {
	now := workflow.Now(ctx)
	w.st.Target, w.st.UpdatedAt = target, now
	w.st.Offers = append(w.st.Offers, HandoffOffer{Agent: target, Reason: why, At: now})
	w.open = true
	if err := w.upsert(ctx); err != nil {
		return err
	}
	in := w.in
	return w.exec(ctx, w.acts.OfferHandoff, activities.OfferHandoffInput{RequestID: in.RequestID, Correlation: in.Correlation,
		From: in.From, Target: target, Reason: in.Reason, ChoiceReason: why, Capabilities: in.Capabilities, Priority: in.Priority,
		ContextContentType: in.ContextContentType, ContextSize: in.ContextSize, ExpiresAt: w.deadline, Offer: len(w.st.Offers)}, nil)
}

// accept applies an acceptance, tells the originator, and waits for completion or a
// cancellation. The request's timeout bounds acceptance only (§17.6); completion is bounded
// by the completion deadline (protocol.HandoffCompletionDeadline), after which the handoff
// ends EXPIRED: an accepting agent that crashed and never came back does not leave the
// originator — never fenced, since only completion fences it — waiting for ever. Runs
// recorded before versionHandoffCompletionDeadline wait without a deadline.
func (w *handoffRun) accept(ctx workflow.Context, a HandoffAnswer) (HandoffResult, error) {
	now := workflow.Now(ctx)
	w.st.Status, w.st.AcceptedBy, w.st.UpdatedAt = handoffpb.HandoffStatus_ACCEPTED, a.Agent, now
	// source says what set the deadline, for the audit log and the expiry's reason.
	var note, source string
	if w.completionDeadline.decide(ctx, versionHandoffCompletionDeadline) {
		b := w.in.Budget
		w.st.CompleteBy, source = protocol.HandoffCompletionDeadline(w.requested, now, b.WallTimeMs, b.DeadlineEpochMs, w.in.CompletionTimeout)
		note = fmt.Sprintf("complete by %s: %s", w.st.CompleteBy.UTC().Format(time.RFC3339), source)
	}
	if err := w.record(ctx, note); err != nil {
		return w.st, err
	}
	w.markApplied()
	if err := w.notify(ctx, w.in.From, activities.HandoffEventAccepted, "", 0); err != nil {
		return w.st, err
	}
	settled := func() bool { return w.completion != nil || w.cancel != nil || w.lost != nil }
	if w.st.CompleteBy.IsZero() {
		if err := workflow.Await(ctx, settled); err != nil {
			return w.st, err
		}
	} else if left := w.st.CompleteBy.Sub(workflow.Now(ctx)); left > 0 {
		if _, err := workflow.AwaitWithTimeout(ctx, left, settled); err != nil {
			return w.st, err
		}
	}
	// A completion that arrived with the deadline still counts: it was validated while the
	// handoff was ACCEPTED.
	switch {
	case w.completion != nil:
		return w.complete(ctx)
	case w.cancel != nil:
		return w.cancelled(ctx)
	case w.lost != nil:
		// §8.4: the accepting agent stopped (HandoffReleaseUpdate). As at the completion
		// deadline, the work goes back to its originator rather than to another agent.
		return w.end(ctx, handoffpb.HandoffStatus_EXPIRED, fmt.Sprintf("accepting agent stopped: %s accepted it at %s and stopped before completing (%s); the context stays with %s",
			w.st.AcceptedBy, now.UTC().Format(time.RFC3339), w.lost.Why, w.in.From), w.st.AcceptedBy)
	}
	return w.end(ctx, handoffpb.HandoffStatus_EXPIRED, fmt.Sprintf("completion deadline: accepted by %s at %s and not completed by %s (%s); the context stays with %s",
		w.st.AcceptedBy, now.UTC().Format(time.RFC3339), w.st.CompleteBy.UTC().Format(time.RFC3339), source, w.in.From), w.st.AcceptedBy)
}

// complete applies a completion: the originator is fenced off the correlation before the
// state is recorded and anyone is told, so no one sees COMPLETED while it could still act.
func (w *handoffRun) complete(ctx workflow.Context) (HandoffResult, error) {
	w.completion = nil
	w.st.Status, w.st.UpdatedAt = handoffpb.HandoffStatus_COMPLETED, workflow.Now(ctx)
	in := w.in
	if err := w.exec(ctx, w.acts.FenceHandoff, activities.FenceHandoffInput{Correlation: in.Correlation, AgentID: in.From,
		RequestID: in.RequestID, NewOwner: w.st.AcceptedBy}, nil); err != nil {
		return w.st, err
	}
	if err := w.record(ctx, ""); err != nil {
		return w.st, err
	}
	w.markApplied()
	return w.st, w.notify(ctx, in.From, activities.HandoffEventCompleted, "", 0)
}

// rejected decides what follows a rejection: the same target after a backoff (OVERLOADED),
// the redirect (REDIRECT), the next candidate, or the end (REJECTED, or EXPIRED when the
// deadline or a cancellation came first). It returns the next target ("" to route) and why,
// or done.
func (w *handoffRun) rejected(ctx workflow.Context, a HandoffAnswer) (next, why string, done bool, err error) {
	target := w.st.Target
	w.st.UpdatedAt = workflow.Now(ctx)
	reason := fmt.Sprintf("rejected by %s: %s", target, rejection(a))
	// returned is the REDIRECT handed back to the originator if the handoff ends here.
	var returned string
	switch {
	case a.Code == commonpb.ErrorCode_OVERLOADED && w.st.OverloadRetries < protocol.OverloadRetries(w.policy):
		return w.overloaded(ctx, a, reason)
	case a.Code == commonpb.ErrorCode_REDIRECT && w.redirectEdges.decide(ctx, versionHandoffRedirectEdges):
		to, refusal, code, err := w.checkRedirect(ctx, a)
		switch {
		case err != nil:
			return "", "", true, err
		case to != "":
			return w.follow(ctx, a, to, reason)
		case code != commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED:
			// A blank target, a loop or spillover routing off: nothing is left to try.
			w.st.Refused = append(w.st.Refused, target)
			w.st.EndCode = code
			if code == commonpb.ErrorCode_REDIRECT {
				w.st.RedirectTo = strings.TrimSpace(a.RedirectTo)
			}
			_, err := w.end(ctx, handoffpb.HandoffStatus_REJECTED, reason+"; "+refusal, "")
			return "", "", true, err
		}
		reason += "; " + refusal
		returned = strings.TrimSpace(a.RedirectTo)
	case a.Code == commonpb.ErrorCode_REDIRECT && a.RedirectTo != "":
		to, refusal, err := w.redirect(ctx, a)
		if err != nil {
			return "", "", true, err
		}
		if to != "" {
			return w.follow(ctx, a, to, reason)
		}
		reason += "; " + refusal
	case a.Code == commonpb.ErrorCode_OVERLOADED:
		reason += fmt.Sprintf("; %d retries on OVERLOADED used", w.st.OverloadRetries)
	}
	w.st.Refused = append(w.st.Refused, target)
	if w.in.To != "" && !w.policy.AllowSpillover {
		if returned != "" {
			w.st.EndCode, w.st.RedirectTo = commonpb.ErrorCode_REDIRECT, returned
		}
		_, err := w.end(ctx, handoffpb.HandoffStatus_REJECTED, reason, "")
		return "", "", true, err
	}
	// §17.6: "The Scheduler MAY route pending handoffs to alternative agents if the primary
	// target rejects": a routed handoff, or one whose policy allows spillover, does.
	if err := w.record(ctx, reason+"; routing to the next candidate"); err != nil {
		return "", "", true, err
	}
	w.markApplied()
	return "", "", false, nil
}

// overloaded waits durably before offering the same target again (SwarmDelegationPolicy);
// the target may still answer meanwhile, and the deadline or a cancellation ends the wait.
func (w *handoffRun) overloaded(ctx workflow.Context, a HandoffAnswer, reason string) (string, string, bool, error) {
	target := w.st.Target
	wait := protocol.OverloadWait(w.policy, w.st.OverloadRetries, a.RetryAfterMs)
	w.st.OverloadRetries++
	retry := w.st.OverloadRetries
	if err := w.record(ctx, fmt.Sprintf("%s; retry %d of %d in %s", reason, retry, protocol.OverloadRetries(w.policy), wait)); err != nil {
		return "", "", true, err
	}
	w.markApplied()
	w.open = true // the target may take it after all before the retry
	remaining := w.deadline.Sub(workflow.Now(ctx))
	answered, err := w.awaitAnswer(ctx, min(wait, remaining))
	switch {
	case err != nil:
		return "", "", true, err
	case answered:
		a := w.take()
		if w.accepted {
			_, err := w.accept(ctx, a)
			return "", "", true, err
		}
		return w.rejected(ctx, a)
	case w.cancel != nil:
		w.open = false
		_, err := w.cancelled(ctx)
		return "", "", true, err
	case wait >= remaining:
		w.open = false
		_, err := w.end(ctx, handoffpb.HandoffStatus_EXPIRED, fmt.Sprintf("timeout: %s was OVERLOADED and the handoff timed out before retry %d", target, retry), target)
		return "", "", true, err
	}
	w.open = false
	return target, fmt.Sprintf("retry %d after OVERLOADED", retry), false, nil
}

// follow records a REDIRECT being followed to agent to and returns it as the next target.
func (w *handoffRun) follow(ctx workflow.Context, a HandoffAnswer, to, reason string) (string, string, bool, error) {
	target := w.st.Target
	w.st.Refused = append(w.st.Refused, target)
	w.st.Redirects++
	why := fmt.Sprintf("redirected by %s (%d of %d): %s", target, w.st.Redirects, w.maxRedirects(), a.Reason)
	if err := w.record(ctx, reason+"; following the redirect to "+to); err != nil {
		return "", "", true, err
	}
	w.markApplied()
	return to, why, false, nil
}

// maxRedirects is the redirect bound of this run: the policy's max_redirects, else the
// default of the rules it runs under.
func (w *handoffRun) maxRedirects() int {
	if w.policy.MaxRedirects == 0 && w.redirectEdges != yes {
		return legacyHandoffMaxRedirects
	}
	return protocol.MaxRedirectsOf(w.policy)
}

// offeredAgents are the agents offered the handoff so far, each once, in order.
func (w *handoffRun) offeredAgents() []string {
	var out []string
	for _, o := range w.st.Offers {
		if !slices.Contains(out, o.Agent) {
			out = append(out, o.Agent)
		}
	}
	return out
}

// checkRedirect decides a REDIRECT (versionHandoffRedirectEdges), in this order, so that a
// target no one could follow is named as such whatever the bound: a blank target or a loop
// back to the originator or an agent already offered is refused with VALIDATION_ERROR;
// spillover routing off returns the REDIRECT to the originator (code REDIRECT); then the
// bound, and RouteHandoff with Only: registered, not fenced, accepting the content type and
// declaring the capabilities_required (§17.6). It returns the agent to follow; or why not,
// with the code that ends the handoff at once, or no code when the refusal is a rejection
// like any other (the next candidate, if routing allows).
func (w *handoffRun) checkRedirect(ctx workflow.Context, a HandoffAnswer) (string, string, commonpb.ErrorCode, error) {
	to := strings.TrimSpace(a.RedirectTo)
	if perr := protocol.ValidateRedirect(to, w.in.From, w.offeredAgents()); perr != nil {
		return "", perr.Error(), perr.Code, nil
	}
	if !protocol.FollowsRedirects(w.policy) {
		return "", fmt.Sprintf("redirect to %s not followed: spillover routing is off (allow_spillover_routing), so the REDIRECT goes back to the originator", to),
			commonpb.ErrorCode_REDIRECT, nil
	}
	if limit := w.maxRedirects(); w.st.Redirects >= limit {
		return "", fmt.Sprintf("redirect to %s refused: the %d redirects allowed are used", to, limit), 0, nil
	}
	var route activities.HandoffRoute
	if err := w.exec(ctx, w.acts.RouteHandoff, activities.RouteHandoffInput{RequestID: w.in.RequestID, Correlation: w.in.Correlation,
		Capabilities: w.in.Capabilities, ContentType: w.in.ContextContentType, Exclude: append(w.excluded(), w.st.Target), Only: to}, &route); err != nil {
		return "", "", 0, err
	}
	return route.Agent, route.Reason, 0, nil
}

// redirect checks a REDIRECT's target in runs recorded before versionHandoffRedirectEdges:
// within max_redirects, not the originator, not an agent that refused, registered and not
// fenced on the correlation (RouteHandoff with Only). It returns the agent, or why the
// redirect is refused.
func (w *handoffRun) redirect(ctx workflow.Context, a HandoffAnswer) (string, string, error) {
	switch limit := w.maxRedirects(); {
	case w.st.Redirects >= limit:
		return "", fmt.Sprintf("redirect to %s refused: the %d redirects allowed are used", a.RedirectTo, limit), nil
	case a.RedirectTo == w.in.From:
		return "", fmt.Sprintf("redirect to %s refused: it is the originator", a.RedirectTo), nil
	case a.RedirectTo == w.st.Target || slices.Contains(w.st.Refused, a.RedirectTo):
		return "", fmt.Sprintf("redirect to %s refused: it already refused", a.RedirectTo), nil
	}
	var route activities.HandoffRoute
	if err := w.exec(ctx, w.acts.RouteHandoff, activities.RouteHandoffInput{RequestID: w.in.RequestID, Correlation: w.in.Correlation,
		ContentType: w.in.ContextContentType, Exclude: append(w.excluded(), w.st.Target), Only: a.RedirectTo}, &route); err != nil {
		return "", "", err
	}
	return route.Agent, route.Reason, nil
}

// cancelled ends the handoff on CancelDelegation: the target is told (with the grace period;
// an accepted target may still complete within it), then the originator, and the handoff
// ends EXPIRED "cancelled: <reason>".
func (w *handoffRun) cancelled(ctx workflow.Context) (HandoffResult, error) {
	c := *w.cancel
	w.open = false
	reason := "cancelled: " + c.Reason
	if c.By != "" {
		reason += " (by " + c.By + ")"
	}
	if w.st.Target != "" {
		if err := w.notify(ctx, w.st.Target, activities.HandoffEventCancelled, reason, c.GracePeriod); err != nil {
			return w.st, err
		}
	}
	if w.st.Status == handoffpb.HandoffStatus_ACCEPTED && c.GracePeriod > 0 {
		if _, err := workflow.AwaitWithTimeout(ctx, c.GracePeriod, func() bool { return w.completion != nil }); err != nil {
			return w.st, err
		}
		if w.completion != nil {
			return w.complete(ctx)
		}
	}
	if err := w.notify(ctx, w.in.From, activities.HandoffEventCancelled, reason, c.GracePeriod); err != nil {
		return w.st, err
	}
	w.st.Status, w.st.EndReason, w.st.UpdatedAt = handoffpb.HandoffStatus_EXPIRED, reason, workflow.Now(ctx)
	if err := w.record(ctx, ""); err != nil {
		return w.st, err
	}
	w.markApplied()
	return w.st, nil
}

// end ends a handoff REJECTED or EXPIRED with reason and tells the originator, and holder,
// the target whose offer lapses or the accepting agent whose acceptance does, if any.
func (w *handoffRun) end(ctx workflow.Context, status handoffpb.HandoffStatus, reason, holder string) (HandoffResult, error) {
	w.open = false
	w.st.Status, w.st.EndReason, w.st.UpdatedAt = status, reason, workflow.Now(ctx)
	if err := w.record(ctx, ""); err != nil {
		return w.st, err
	}
	w.markApplied()
	event := activities.HandoffEventExpired
	if status == handoffpb.HandoffStatus_REJECTED {
		event = activities.HandoffEventRejected
	}
	if holder != "" {
		if err := w.notify(ctx, holder, event, reason, 0); err != nil {
			return w.st, err
		}
	}
	return w.st, w.notify(ctx, w.in.From, event, reason, 0)
}

// record upserts the search attributes and records the current state (RecordHandoff).
func (w *handoffRun) record(ctx workflow.Context, note string) error {
	if err := w.upsert(ctx); err != nil {
		return err
	}
	return w.exec(ctx, w.acts.RecordHandoff, activities.RecordHandoffInput{RequestID: w.in.RequestID, Correlation: w.in.Correlation,
		From: w.in.From, Status: w.st.Status, Target: w.st.Target, AcceptedBy: w.st.AcceptedBy, EndReason: w.st.EndReason, Note: note}, nil)
}

// notify tells one agent about the handoff (NotifyHandoff).
func (w *handoffRun) notify(ctx workflow.Context, to, event, reason string, grace time.Duration) error {
	w.notes++
	return w.exec(ctx, w.acts.NotifyHandoff, activities.NotifyHandoffInput{RequestID: w.in.RequestID, Correlation: w.in.Correlation,
		To: to, Event: event, N: w.notes, From: w.in.From, Target: w.st.Target, AcceptedBy: w.st.AcceptedBy, State: w.st.Status,
		Reason: reason, Code: w.st.EndCode, RedirectTo: w.st.RedirectTo, CompleteBy: w.st.CompleteBy, GracePeriod: grace}, nil)
}

// upsert sets SW4RMHandoffState and, when it grew, SW4RMHandoffAgents.
func (w *handoffRun) upsert(ctx workflow.Context) error {
	updates := []temporal.SearchAttributeUpdate{HandoffStateKey.ValueSet(w.st.Status.String())}
	agents := []string{w.in.From}
	for _, o := range w.st.Offers {
		if !slices.Contains(agents, o.Agent) {
			agents = append(agents, o.Agent)
		}
	}
	if !slices.Equal(agents, w.agentsSet) {
		updates = append(updates, HandoffAgentsKey.ValueSet(agents))
		w.agentsSet = agents
	}
	return workflow.UpsertTypedSearchAttributes(ctx, updates...)
}

// exec runs one of the handoff's activities. They are short store writes and router
// admissions in the worker's own process, so they run as local activities, like the room's:
// no task-queue round trip per step keeps an offer and its answer close to bare Temporal.
func (w *handoffRun) exec(ctx workflow.Context, activity, arg, result any) error {
	actx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
	})
	f := workflow.ExecuteLocalActivity(actx, activity, arg)
	return f.Get(ctx, result)
}

// rejection renders a rejection's code and reason.
func rejection(a HandoffAnswer) string {
	s := a.Reason
	if a.Code != commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
		s = protocol.CodeName(a.Code) + ": " + s
	}
	if a.Code == commonpb.ErrorCode_REDIRECT && a.RedirectTo != "" {
		s += " (to " + a.RedirectTo + ")"
	}
	return s
}
