package workflows_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// handoffHarness runs HandoffWorkflow with its activities mocked: routing picks the first of
// candidates not excluded, redirects are checked against fenced, and every offer,
// notification, record and fence is remembered.
type handoffHarness struct {
	t   *testing.T
	env *testsuite.TestWorkflowEnvironment

	mu         sync.Mutex
	candidates []string
	fenced     []string
	// incapable are agents a redirect check with capabilities refuses as lacking them.
	incapable []string
	routes    []activities.RouteHandoffInput
	offers    []activities.OfferHandoffInput
	notes     []activities.NotifyHandoffInput
	records   []activities.RecordHandoffInput
	fences    []activities.FenceHandoffInput
	timers    []time.Duration
}

func newHandoffHarness(t *testing.T, candidates ...string) *handoffHarness {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	h := &handoffHarness{t: t, env: suite.NewTestWorkflowEnvironment(), candidates: candidates}
	var acts *activities.Activities
	h.env.OnActivity(acts.RouteHandoff, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.RouteHandoffInput) (activities.HandoffRoute, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.routes = append(h.routes, in)
		if in.Only != "" {
			if slices.Contains(h.fenced, in.Only) {
				return activities.HandoffRoute{Reason: "redirect to " + in.Only + " refused: fenced"}, nil
			}
			if len(in.Capabilities) > 0 && slices.Contains(h.incapable, in.Only) {
				return activities.HandoffRoute{Reason: "redirect to " + in.Only + " refused: it lacks capabilities_required"}, nil
			}
			return activities.HandoffRoute{Agent: in.Only, Reason: "redirect"}, nil
		}
		for _, c := range h.candidates {
			if !slices.Contains(in.Exclude, c) {
				return activities.HandoffRoute{Agent: c, Reason: "least loaded of 1 capable: load 0"}, nil
			}
		}
		return activities.HandoffRoute{Reason: "no capable agent left among 3 registered"}, nil
	})
	h.env.OnActivity(acts.OfferHandoff, mock.Anything, mock.Anything).Return(recorder(&h.mu, &h.offers))
	h.env.OnActivity(acts.NotifyHandoff, mock.Anything, mock.Anything).Return(recorder(&h.mu, &h.notes))
	h.env.OnActivity(acts.RecordHandoff, mock.Anything, mock.Anything).Return(recorder(&h.mu, &h.records))
	h.env.OnActivity(acts.FenceHandoff, mock.Anything, mock.Anything).Return(recorder(&h.mu, &h.fences))
	h.env.SetOnTimerScheduledListener(func(_ string, d time.Duration) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.timers = append(h.timers, d)
	})
	return h
}

// handoffInput hands corr-1 from a to "to" (empty: route on "billing"), with a 10-minute
// timeout from the workflow's start.
func handoffInput(to string) workflows.HandoffInput {
	return workflows.HandoffInput{RequestID: "h-1", Correlation: "corr-1", From: "a", To: to, Reason: "needs billing",
		Capabilities: []string{"billing"}, Timeout: 10 * time.Minute, ContextContentType: "application/json", ContextSize: 12}
}

// updateResult is one handoff update's outcome and the state it answered.
type updateResult struct {
	updateOutcome
	state workflows.HandoffState
}

// update sends an update at a moment of workflow time and records the outcome.
func (h *handoffHarness) update(after time.Duration, name string, arg any) *updateResult {
	res := &updateResult{}
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(name, "", res.callback(func(v any) {
			if s, ok := v.(workflows.HandoffState); ok {
				res.state = s
			}
		}), arg)
	}, after)
	return res
}

func (h *handoffHarness) accept(after time.Duration, agent string) *updateResult {
	return h.update(after, workflows.HandoffAcceptUpdate, workflows.HandoffAnswer{Agent: agent})
}

func (h *handoffHarness) reject(after time.Duration, a workflows.HandoffAnswer) *updateResult {
	return h.update(after, workflows.HandoffRejectUpdate, a)
}

func (h *handoffHarness) complete(after time.Duration, agent string) *updateResult {
	return h.update(after, workflows.HandoffCompleteUpdate, workflows.HandoffCompletion{Agent: agent, Status: handoffpb.HandoffStatus_COMPLETED})
}

func (h *handoffHarness) cancel(after time.Duration, c workflows.HandoffCancel) {
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(workflows.HandoffCancelSignal, c) }, after)
}

func (h *handoffHarness) run(in workflows.HandoffInput) workflows.HandoffResult {
	h.t.Helper()
	h.env.ExecuteWorkflow(workflows.HandoffWorkflow, in)
	require.True(h.t, h.env.IsWorkflowCompleted())
	require.NoError(h.t, h.env.GetWorkflowError())
	var res workflows.HandoffResult
	require.NoError(h.t, h.env.GetWorkflowResult(&res))
	return res
}

func (h *handoffHarness) offered() []string {
	var out []string
	for _, o := range h.offers {
		out = append(out, o.Target)
	}
	return out
}

// told lists "agent:event" for every notification, in order.
func (h *handoffHarness) told() []string {
	var out []string
	for _, n := range h.notes {
		out = append(out, n.To+":"+n.Event)
	}
	return out
}

func (h *handoffHarness) recorded() []handoffpb.HandoffStatus {
	var out []handoffpb.HandoffStatus
	for _, r := range h.records {
		out = append(out, r.Status)
	}
	return out
}

func TestHandoffAcceptThenComplete(t *testing.T) {
	h := newHandoffHarness(t)
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	h.env.SetStartTime(t0)
	acc := h.accept(time.Second, "b")
	done := h.complete(2*time.Second, "b")
	res := h.run(handoffInput("b"))

	requireAccepted(t, acc)
	assert.Equal(t, handoffpb.HandoffStatus_ACCEPTED, acc.state.Status, "accept answers with the state it produced")
	assert.Equal(t, "b", acc.state.AcceptedBy)
	requireAccepted(t, done)
	assert.Equal(t, handoffpb.HandoffStatus_COMPLETED, done.state.Status)

	assert.Equal(t, handoffpb.HandoffStatus_COMPLETED, res.Status)
	assert.Equal(t, "b", res.AcceptedBy)
	assert.Empty(t, res.EndReason)
	assert.Equal(t, []string{"b"}, h.offered())
	assert.Empty(t, h.routes, "a named target is not routed")
	assert.Equal(t, []activities.FenceHandoffInput{{Correlation: "corr-1", AgentID: "a", RequestID: "h-1", NewOwner: "b"}}, h.fences)
	assert.Equal(t, []string{"a:handoff_accepted", "a:handoff_completed"}, h.told())
	assert.Equal(t, []handoffpb.HandoffStatus{handoffpb.HandoffStatus_ACCEPTED, handoffpb.HandoffStatus_COMPLETED}, h.recorded())
	// Offer: the deadline is the request's time plus its timeout; the message ids derive from numbers.
	require.Len(t, h.offers, 1)
	assert.Equal(t, 1, h.offers[0].Offer)
	assert.Equal(t, t0.Add(10*time.Minute), h.offers[0].ExpiresAt.UTC())
	assert.Equal(t, []int{1, 2}, []int{h.notes[0].N, h.notes[1].N})
}

func TestHandoffRoutedRejectGoesToNextCandidate(t *testing.T) {
	h := newHandoffHarness(t, "b", "c")
	rej := h.reject(time.Second, workflows.HandoffAnswer{Agent: "b", Reason: "not my queue"})
	h.accept(2*time.Second, "c")
	h.complete(3*time.Second, "c")
	res := h.run(handoffInput(""))

	requireAccepted(t, rej)
	assert.Equal(t, []string{"b"}, rej.state.Refused)
	assert.Equal(t, handoffpb.HandoffStatus_COMPLETED, res.Status)
	assert.Equal(t, []string{"b", "c"}, h.offered())
	assert.Equal(t, []string{"b"}, res.Refused)
	require.Len(t, h.routes, 2)
	assert.Equal(t, []string{"a"}, h.routes[0].Exclude, "the originator is never chosen")
	assert.Equal(t, []string{"a", "b"}, h.routes[1].Exclude, "nor an agent that refused")
	assert.Equal(t, []string{"billing"}, h.routes[0].Capabilities)
	require.Len(t, res.Offers, 2)
	assert.Equal(t, "least loaded of 1 capable: load 0", res.Offers[1].Reason, "the choice's reason is kept")
	assert.Equal(t, "c", h.fences[0].NewOwner)
}

func TestHandoffNamedTargetSpillsOverWhenAllowed(t *testing.T) {
	h := newHandoffHarness(t, "b", "c")
	h.reject(time.Second, workflows.HandoffAnswer{Agent: "b", Reason: "no"})
	h.accept(2*time.Second, "c")
	h.complete(3*time.Second, "c")
	in := handoffInput("b")
	in.Policy.AllowSpillover = true
	res := h.run(in)
	assert.Equal(t, handoffpb.HandoffStatus_COMPLETED, res.Status)
	assert.Equal(t, []string{"b", "c"}, h.offered())
}

func TestHandoffRejectWithoutSpilloverEndsRejected(t *testing.T) {
	h := newHandoffHarness(t, "c")
	rej := h.reject(time.Second, workflows.HandoffAnswer{Agent: "b", Reason: "busy with audits"})
	res := h.run(handoffInput("b"))

	requireAccepted(t, rej)
	assert.Equal(t, handoffpb.HandoffStatus_REJECTED, rej.state.Status)
	assert.Equal(t, handoffpb.HandoffStatus_REJECTED, res.Status)
	assert.Equal(t, "rejected by b: busy with audits", res.EndReason)
	assert.Empty(t, h.routes, "no spillover: nobody else is asked")
	assert.Empty(t, h.fences)
	assert.Equal(t, []string{"a:handoff_rejected"}, h.told())
	assert.Equal(t, "rejected by b: busy with audits", h.notes[0].Reason, "the originator is told why")
	assert.Equal(t, []handoffpb.HandoffStatus{handoffpb.HandoffStatus_REJECTED}, h.recorded())
}

func TestHandoffOverloadedWaitsThenReoffers(t *testing.T) {
	h := newHandoffHarness(t)
	in := handoffInput("b")
	in.Policy = protocol.HandoffPolicy{MaxRetriesOnOverloaded: 2, InitialBackoff: 3 * time.Second, Multiplier: 2}
	// Offered at 0; OVERLOADED at 1 s → 3 s backoff → offered again at 4 s; OVERLOADED with
	// retry_after 10 s at 5 s (the policy's 6 s is shorter) → offered again at 15 s.
	h.reject(time.Second, workflows.HandoffAnswer{Agent: "b", Code: commonpb.ErrorCode_OVERLOADED, Reason: "queue full"})
	h.reject(5*time.Second, workflows.HandoffAnswer{Agent: "b", Code: commonpb.ErrorCode_OVERLOADED, RetryAfterMs: 10_000})
	early := h.accept(14*time.Second, "b") // during the backoff the target may still take it
	h.complete(20*time.Second, "b")
	res := h.run(in)

	assert.Contains(t, h.timers, 3*time.Second, "first backoff: the policy's initial")
	assert.Contains(t, h.timers, 10*time.Second, "second backoff: retry_after_ms, longer than 6 s")
	assert.Equal(t, []string{"b", "b"}, h.offered()[:2])
	require.Len(t, h.offers, 2, "accepted during the second backoff: no third offer")
	assert.Equal(t, h.offers[0].ExpiresAt, h.offers[1].ExpiresAt, "a retry does not move the deadline")
	requireAccepted(t, early)
	assert.Equal(t, handoffpb.HandoffStatus_COMPLETED, res.Status)
	assert.Equal(t, 2, res.OverloadRetries)
}

func TestHandoffOverloadedRetryOffersAgainAfterBackoff(t *testing.T) {
	h := newHandoffHarness(t)
	in := handoffInput("b")
	in.Policy = protocol.HandoffPolicy{MaxRetriesOnOverloaded: 1, InitialBackoff: 4 * time.Second}
	h.reject(time.Second, workflows.HandoffAnswer{Agent: "b", Code: commonpb.ErrorCode_OVERLOADED})
	early := h.accept(3*time.Second, "c")
	late := h.accept(6*time.Second, "b")
	h.complete(7*time.Second, "b")
	res := h.run(in)

	requireRefused(t, early, "not offered to c")
	requireAccepted(t, late)
	assert.Equal(t, handoffpb.HandoffStatus_COMPLETED, res.Status)
	assert.Equal(t, []string{"b", "b"}, h.offered())
	assert.Equal(t, 2, h.offers[1].Offer, "the re-offer is a new message")
	assert.Equal(t, 1, res.OverloadRetries)
	assert.Contains(t, h.timers, 4*time.Second)
}

func TestHandoffOverloadRetriesExhausted(t *testing.T) {
	t.Run("named target ends REJECTED", func(t *testing.T) {
		h := newHandoffHarness(t, "c")
		in := handoffInput("b")
		in.Policy = protocol.HandoffPolicy{MaxRetriesOnOverloaded: 1, InitialBackoff: 5 * time.Second}
		h.reject(time.Second, workflows.HandoffAnswer{Agent: "b", Code: commonpb.ErrorCode_OVERLOADED})
		h.reject(7*time.Second, workflows.HandoffAnswer{Agent: "b", Code: commonpb.ErrorCode_OVERLOADED, Reason: "still full"})
		res := h.run(in)
		assert.Equal(t, handoffpb.HandoffStatus_REJECTED, res.Status)
		assert.Equal(t, "rejected by b: overloaded: still full; 1 retries on OVERLOADED used", res.EndReason)
		assert.Equal(t, []string{"b", "b"}, h.offered())
	})
	t.Run("routed goes to the next candidate", func(t *testing.T) {
		h := newHandoffHarness(t, "b", "c")
		in := handoffInput("")
		in.Policy = protocol.HandoffPolicy{MaxRetriesOnOverloaded: 1, InitialBackoff: 5 * time.Second}
		h.reject(time.Second, workflows.HandoffAnswer{Agent: "b", Code: commonpb.ErrorCode_OVERLOADED})
		h.reject(7*time.Second, workflows.HandoffAnswer{Agent: "b", Code: commonpb.ErrorCode_OVERLOADED})
		h.accept(8*time.Second, "c")
		h.complete(9*time.Second, "c")
		res := h.run(in)
		assert.Equal(t, handoffpb.HandoffStatus_COMPLETED, res.Status)
		assert.Equal(t, []string{"b", "b", "c"}, h.offered())
	})
}

func TestHandoffRedirectFollowed(t *testing.T) {
	h := newHandoffHarness(t)
	h.reject(time.Second, workflows.HandoffAnswer{Agent: "b", Code: commonpb.ErrorCode_REDIRECT, RedirectTo: "c", Reason: "c handles refunds"})
	h.accept(2*time.Second, "c")
	h.complete(3*time.Second, "c")
	res := h.run(handoffInput("b"))

	assert.Equal(t, handoffpb.HandoffStatus_COMPLETED, res.Status)
	assert.Equal(t, []string{"b", "c"}, h.offered())
	assert.Equal(t, 1, res.Redirects)
	assert.Equal(t, []string{"b"}, res.Refused)
	require.Len(t, h.routes, 1)
	assert.Equal(t, "c", h.routes[0].Only, "the redirect's target is checked (registered, not fenced)")
	assert.Contains(t, res.Offers[1].Reason, "redirected by b")
	assert.Equal(t, "c", h.fences[0].NewOwner)
}

func TestHandoffRedirectLoopCapped(t *testing.T) {
	t.Run("max_redirects, then the next candidate", func(t *testing.T) {
		h := newHandoffHarness(t, "z")
		in := handoffInput("b")
		in.Policy = protocol.HandoffPolicy{AllowSpillover: true, MaxRedirects: 2}
		h.reject(time.Second, workflows.HandoffAnswer{Agent: "b", Code: commonpb.ErrorCode_REDIRECT, RedirectTo: "c"})
		h.reject(2*time.Second, workflows.HandoffAnswer{Agent: "c", Code: commonpb.ErrorCode_REDIRECT, RedirectTo: "d"})
		h.reject(3*time.Second, workflows.HandoffAnswer{Agent: "d", Code: commonpb.ErrorCode_REDIRECT, RedirectTo: "e"})
		h.accept(4*time.Second, "z")
		h.complete(5*time.Second, "z")
		res := h.run(in)
		assert.Equal(t, handoffpb.HandoffStatus_COMPLETED, res.Status)
		assert.Equal(t, []string{"b", "c", "d", "z"}, h.offered(), "past the bound the redirect is a rejection: spillover routes on")
		assert.Equal(t, 2, res.Redirects)
		assert.Contains(t, h.records[2].Note, "the 2 redirects allowed are used")
	})
	t.Run("default of 2, the REDIRECT returned", func(t *testing.T) {
		h := newHandoffHarness(t, "z")
		for i, to := range []string{"c", "d", "e"} {
			from := string(rune('b' + i))
			h.reject(time.Duration(i+1)*time.Second, workflows.HandoffAnswer{Agent: from, Code: commonpb.ErrorCode_REDIRECT, RedirectTo: to})
		}
		res := h.run(handoffInput("b"))
		assert.Equal(t, []string{"b", "c", "d"}, h.offered())
		assert.Equal(t, 2, res.Redirects)
		assert.Equal(t, handoffpb.HandoffStatus_REJECTED, res.Status)
		assert.Contains(t, res.EndReason, "the 2 redirects allowed are used")
		assert.Equal(t, commonpb.ErrorCode_REDIRECT, res.EndCode, "the last REDIRECT goes back to the originator")
		assert.Equal(t, "e", res.RedirectTo)
		require.Equal(t, []string{"a:handoff_rejected"}, h.told())
		assert.Equal(t, commonpb.ErrorCode_REDIRECT, h.notes[0].Code)
		assert.Equal(t, "e", h.notes[0].RedirectTo)
	})
}

// TestHandoffRedirectLoopEndsAtOnce: a REDIRECT back along the chain is refused
// validation_error and ends the handoff at once, even when spillover routing could go on
// to another candidate (it went on, and could run out the timeout, before).
func TestHandoffRedirectLoopEndsAtOnce(t *testing.T) {
	h := newHandoffHarness(t, "z")
	in := handoffInput("b")
	in.Policy = protocol.HandoffPolicy{AllowSpillover: true, MaxRedirects: 4}
	h.reject(time.Second, workflows.HandoffAnswer{Agent: "b", Code: commonpb.ErrorCode_REDIRECT, RedirectTo: "c"})
	last := h.reject(2*time.Second, workflows.HandoffAnswer{Agent: "c", Code: commonpb.ErrorCode_REDIRECT, RedirectTo: "b"})
	res := h.run(in)

	requireAccepted(t, last)
	assert.Equal(t, handoffpb.HandoffStatus_REJECTED, last.state.Status, "the rejecting target learns the handoff ended")
	assert.Equal(t, handoffpb.HandoffStatus_REJECTED, res.Status)
	assert.Equal(t, []string{"b", "c"}, h.offered(), "nobody else is asked")
	assert.Contains(t, res.EndReason, "validation_error: redirect loop b → c → b")
	assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, res.EndCode)
	assert.Empty(t, res.RedirectTo)
	assert.Equal(t, 1, res.Redirects)
	require.Len(t, h.routes, 1, "only the first redirect's target was checked")
	assert.Equal(t, []string{"a:handoff_rejected"}, h.told())
	assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, h.notes[0].Code)
}

func TestHandoffRedirectToOriginatorRefused(t *testing.T) {
	h := newHandoffHarness(t)
	h.reject(time.Second, workflows.HandoffAnswer{Agent: "b", Code: commonpb.ErrorCode_REDIRECT, RedirectTo: "a"})
	res := h.run(handoffInput("b"))
	assert.Equal(t, handoffpb.HandoffStatus_REJECTED, res.Status)
	assert.Contains(t, res.EndReason, "redirect loop a → b → a: it is the originator")
	assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, res.EndCode)
	assert.Equal(t, []string{"b"}, h.offered())
	assert.Empty(t, h.routes)
	assert.Zero(t, res.Redirects)
}

// TestHandoffBlankRedirectEndsAtOnce: a REDIRECT naming nobody ends the handoff at once with
// validation_error, before the bound is looked at — not a rejection that waits for the next
// candidate or the timeout.
func TestHandoffBlankRedirectEndsAtOnce(t *testing.T) {
	h := newHandoffHarness(t, "z")
	in := handoffInput("b")
	in.Policy = protocol.HandoffPolicy{AllowSpillover: true, MaxRedirects: 1}
	h.reject(time.Second, workflows.HandoffAnswer{Agent: "b", Code: commonpb.ErrorCode_REDIRECT, RedirectTo: "c"})
	h.reject(2*time.Second, workflows.HandoffAnswer{Agent: "c", Code: commonpb.ErrorCode_REDIRECT, RedirectTo: "  ", Reason: "ask a peer"})
	res := h.run(in)

	assert.Equal(t, handoffpb.HandoffStatus_REJECTED, res.Status)
	assert.Equal(t, []string{"b", "c"}, h.offered())
	assert.Contains(t, res.EndReason, "validation_error: REDIRECT needs a non-empty redirect_to_agent_id")
	assert.NotContains(t, res.EndReason, "redirects allowed", "the target is checked before the bound")
	assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, res.EndCode)
	assert.Equal(t, []string{"a:handoff_rejected"}, h.told())
}

// TestHandoffRedirectWithoutSpilloverReturnsToOriginator: with allow_spillover_routing off,
// a REDIRECT is not followed: the handoff ends REJECTED and the originator is told the
// REDIRECT and its target, to ask that agent itself or not.
func TestHandoffRedirectWithoutSpilloverReturnsToOriginator(t *testing.T) {
	for name, to := range map[string]string{"named": "b", "routed": ""} {
		t.Run(name, func(t *testing.T) {
			h := newHandoffHarness(t, "b", "z")
			in := handoffInput(to)
			in.Policy = protocol.HandoffPolicy{MaxRedirects: 5}
			rej := h.reject(time.Second, workflows.HandoffAnswer{Agent: "b", Code: commonpb.ErrorCode_REDIRECT, RedirectTo: "c", Reason: "c owns refunds"})
			res := h.run(in)

			requireAccepted(t, rej)
			assert.Equal(t, handoffpb.HandoffStatus_REJECTED, res.Status)
			assert.Equal(t, []string{"b"}, h.offered(), "c is not offered it, nor the next candidate")
			assert.Contains(t, res.EndReason, "redirect to c not followed: spillover routing is off")
			assert.Equal(t, commonpb.ErrorCode_REDIRECT, res.EndCode)
			assert.Equal(t, "c", res.RedirectTo)
			assert.Zero(t, res.Redirects)
			for _, r := range h.routes {
				assert.Empty(t, r.Only, "the redirect's target is not even checked")
			}
			require.Equal(t, []string{"a:handoff_rejected"}, h.told())
			assert.Equal(t, commonpb.ErrorCode_REDIRECT, h.notes[0].Code)
			assert.Equal(t, "c", h.notes[0].RedirectTo)
		})
	}
}

// TestHandoffRedirectToIncapableAgent: a REDIRECT's target must have the
// capabilities_required (§17.6); one without them is not offered the work — the handoff goes
// to the next capable agent when routing allows, and ends REJECTED with the reason otherwise.
func TestHandoffRedirectToIncapableAgent(t *testing.T) {
	t.Run("rerouted by capability", func(t *testing.T) {
		h := newHandoffHarness(t, "z")
		h.incapable = []string{"x"}
		in := handoffInput("b")
		in.Policy = protocol.HandoffPolicy{AllowSpillover: true}
		h.reject(time.Second, workflows.HandoffAnswer{Agent: "b", Code: commonpb.ErrorCode_REDIRECT, RedirectTo: "x"})
		h.accept(2*time.Second, "z")
		h.complete(3*time.Second, "z")
		res := h.run(in)
		assert.Equal(t, handoffpb.HandoffStatus_COMPLETED, res.Status)
		assert.Equal(t, []string{"b", "z"}, h.offered())
		require.Len(t, h.routes, 2)
		assert.Equal(t, "x", h.routes[0].Only)
		assert.Equal(t, []string{"billing"}, h.routes[0].Capabilities, "the redirect's target is checked for the capabilities")
		assert.Equal(t, []string{"billing"}, h.routes[1].Capabilities, "and the next candidate chosen by them")
		assert.Zero(t, res.Redirects)
	})
	t.Run("ends REJECTED without routing", func(t *testing.T) {
		h := newHandoffHarness(t, "z")
		h.incapable = []string{"x"}
		h.reject(time.Second, workflows.HandoffAnswer{Agent: "b", Code: commonpb.ErrorCode_REDIRECT, RedirectTo: "x"})
		res := h.run(handoffInput("b"))
		assert.Equal(t, handoffpb.HandoffStatus_REJECTED, res.Status)
		assert.Equal(t, []string{"b"}, h.offered())
		assert.Contains(t, res.EndReason, "redirect to x refused: it lacks capabilities_required")
	})
}

// TestHandoffRedirectLegacyRules: a run recorded before the redirect edges (GetVersion
// answers DefaultVersion) keeps its rules on replay: a REDIRECT is followed without
// spillover, up to 3 by default, and a loop is a plain rejection.
func TestHandoffRedirectLegacyRules(t *testing.T) {
	h := newHandoffHarness(t, "z")
	h.env.OnGetVersion("handoff-redirect-edges", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	h.incapable = []string{"c"}
	for i, to := range []string{"c", "d", "e", "f"} {
		from := string(rune('b' + i))
		h.reject(time.Duration(i+1)*time.Second, workflows.HandoffAnswer{Agent: from, Code: commonpb.ErrorCode_REDIRECT, RedirectTo: to})
	}
	res := h.run(handoffInput("b"))
	assert.Equal(t, []string{"b", "c", "d", "e"}, h.offered())
	assert.Equal(t, 3, res.Redirects)
	assert.Equal(t, handoffpb.HandoffStatus_REJECTED, res.Status)
	assert.Contains(t, res.EndReason, "the 3 redirects allowed are used")
	assert.Zero(t, res.EndCode)
	for _, r := range h.routes {
		assert.Empty(t, r.Capabilities)
	}
}

func TestHandoffRedirectToFencedAgentIsARejection(t *testing.T) {
	h := newHandoffHarness(t, "b", "c")
	h.fenced = []string{"f"}
	h.reject(time.Second, workflows.HandoffAnswer{Agent: "b", Code: commonpb.ErrorCode_REDIRECT, RedirectTo: "f"})
	h.accept(2*time.Second, "c")
	h.complete(3*time.Second, "c")
	res := h.run(handoffInput(""))
	assert.Equal(t, handoffpb.HandoffStatus_COMPLETED, res.Status)
	assert.Equal(t, []string{"b", "c"}, h.offered(), "routed: the refused redirect is a rejection, the next candidate follows")
	assert.Equal(t, []string{"b"}, res.Refused)
	assert.Zero(t, res.Redirects)
}

func TestHandoffTimeoutExpires(t *testing.T) {
	h := newHandoffHarness(t)
	in := handoffInput("b")
	in.Timeout = 5 * time.Minute
	res := h.run(in)

	assert.Equal(t, handoffpb.HandoffStatus_EXPIRED, res.Status)
	assert.Contains(t, res.EndReason, "timeout: b did not answer within 5m0s")
	assert.Equal(t, []string{"b:handoff_expired", "a:handoff_expired"}, h.told(), "the target drops the offer, the originator learns why")
	assert.Contains(t, h.timers, 5*time.Minute)
	assert.Equal(t, []handoffpb.HandoffStatus{handoffpb.HandoffStatus_EXPIRED}, h.recorded())
}

func TestHandoffTimeoutCountsFromTheRequest(t *testing.T) {
	h := newHandoffHarness(t)
	in := handoffInput("b")
	in.Timeout = 5 * time.Minute
	h.env.SetStartTime(time.Date(2030, 1, 1, 12, 2, 0, 0, time.UTC))
	in.RequestedAt = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC) // the frontend accepted it 2 minutes before the start
	res := h.run(in)
	assert.Equal(t, handoffpb.HandoffStatus_EXPIRED, res.Status)
	assert.Contains(t, h.timers, 3*time.Minute)
}

func TestHandoffCancelledWhilePending(t *testing.T) {
	h := newHandoffHarness(t)
	h.cancel(time.Second, workflows.HandoffCancel{Reason: "customer withdrew", By: "a"})
	res := h.run(handoffInput("b"))

	assert.Equal(t, handoffpb.HandoffStatus_EXPIRED, res.Status)
	assert.Equal(t, "cancelled: customer withdrew (by a)", res.EndReason)
	assert.Equal(t, []string{"b:handoff_cancelled", "a:handoff_cancelled"}, h.told())
	assert.Equal(t, []handoffpb.HandoffStatus{handoffpb.HandoffStatus_EXPIRED}, h.recorded())
}

func TestHandoffCancelledAfterAcceptance(t *testing.T) {
	t.Run("grace runs out", func(t *testing.T) {
		h := newHandoffHarness(t)
		h.accept(time.Second, "b")
		h.cancel(time.Minute, workflows.HandoffCancel{Reason: "superseded", GracePeriod: 30 * time.Second})
		res := h.run(handoffInput("b"))
		assert.Equal(t, handoffpb.HandoffStatus_EXPIRED, res.Status)
		assert.Equal(t, "cancelled: superseded", res.EndReason)
		assert.Equal(t, []string{"a:handoff_accepted", "b:handoff_cancelled", "a:handoff_cancelled"}, h.told())
		assert.Equal(t, 30*time.Second, h.notes[1].GracePeriod, "the target learns its grace period")
		assert.Contains(t, h.timers, 30*time.Second)
		assert.Empty(t, h.fences)
	})
	t.Run("completion within the grace counts", func(t *testing.T) {
		h := newHandoffHarness(t)
		h.accept(time.Second, "b")
		h.cancel(time.Minute, workflows.HandoffCancel{Reason: "superseded", GracePeriod: 30 * time.Second})
		h.complete(time.Minute+10*time.Second, "b")
		res := h.run(handoffInput("b"))
		assert.Equal(t, handoffpb.HandoffStatus_COMPLETED, res.Status)
		assert.Len(t, h.fences, 1)
	})
}

func TestHandoffNoCandidateExpires(t *testing.T) {
	h := newHandoffHarness(t)
	res := h.run(handoffInput(""))
	assert.Equal(t, handoffpb.HandoffStatus_EXPIRED, res.Status)
	assert.Equal(t, "no capable agent left among 3 registered", res.EndReason)
	assert.Empty(t, h.offers)
	assert.Equal(t, []string{"a:handoff_expired"}, h.told())
}

func TestHandoffCandidatesRunOut(t *testing.T) {
	h := newHandoffHarness(t, "b")
	h.reject(time.Second, workflows.HandoffAnswer{Agent: "b", Reason: "no"})
	res := h.run(handoffInput(""))
	assert.Equal(t, handoffpb.HandoffStatus_EXPIRED, res.Status)
	assert.Contains(t, res.EndReason, "no capable agent left")
	assert.Equal(t, []string{"a:handoff_expired"}, h.told(), "b refused: it holds no offer to withdraw")
}

func TestHandoffUpdateValidators(t *testing.T) {
	h := newHandoffHarness(t)
	wrongAgent := h.accept(time.Second, "c")
	wrongRejecter := h.reject(2*time.Second, workflows.HandoffAnswer{Agent: "a", Reason: "mine"})
	tooEarly := h.complete(3*time.Second, "b")
	acc := h.accept(4*time.Second, "b")
	twice := h.accept(5*time.Second, "b")
	rejectAfter := h.reject(6*time.Second, workflows.HandoffAnswer{Agent: "b"})
	byOther := h.complete(7*time.Second, "c")
	wrongStatus := h.update(8*time.Second, workflows.HandoffCompleteUpdate, workflows.HandoffCompletion{Agent: "b", Status: handoffpb.HandoffStatus_REJECTED})
	var mid workflows.HandoffState
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(workflows.HandoffStateQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&mid))
	}, 9*time.Second)
	anonymous := h.complete(10*time.Second, "") // authentication off: the frontend has no caller to name
	res := h.run(handoffInput("b"))

	requireRefused(t, wrongAgent, "handoff h-1 is not offered to c (state PENDING)")
	requireRefused(t, wrongRejecter, "not offered to a")
	requireRefused(t, tooEarly, "is not accepted (state PENDING)")
	requireAccepted(t, acc)
	requireRefused(t, twice, "not offered to b (state ACCEPTED)")
	requireRefused(t, rejectAfter, "state ACCEPTED")
	requireRefused(t, byOther, "accepted by b, not c")
	requireRefused(t, wrongStatus, "only COMPLETED")
	assert.Equal(t, handoffpb.HandoffStatus_ACCEPTED, mid.Status, "refused updates changed nothing")
	assert.Equal(t, "b", mid.AcceptedBy)
	assert.Empty(t, mid.Refused)
	requireAccepted(t, anonymous)
	assert.Equal(t, handoffpb.HandoffStatus_COMPLETED, res.Status)
	assert.Equal(t, []handoffpb.HandoffStatus{handoffpb.HandoffStatus_ACCEPTED, handoffpb.HandoffStatus_COMPLETED}, h.recorded())
}

func TestHandoffStartOptions(t *testing.T) {
	o := workflows.HandoffStartOptions("h-1", "q", "a", "")
	assert.Equal(t, "handoff/h-1", o.ID)
	assert.Equal(t, "q", o.TaskQueue)
	kind, _ := o.TypedSearchAttributes.GetKeyword(workflows.KindKey)
	state, _ := o.TypedSearchAttributes.GetKeyword(workflows.HandoffStateKey)
	agents, _ := o.TypedSearchAttributes.GetKeywordList(workflows.HandoffAgentsKey)
	assert.Equal(t, workflows.KindHandoff, kind)
	assert.Equal(t, "PENDING", state)
	assert.Equal(t, []string{"a"}, agents, "an empty to_agent is not an agent")
	assert.Contains(t, workflows.SearchAttributeFlags(), "SW4RMHandoffAgents=KeywordList")
	assert.Contains(t, workflows.SearchAttributeFlags(), "SW4RMHandoffState=Keyword")
}

func TestHandoffInputFrom(t *testing.T) {
	req := &handoffpb.HandoffRequest{RequestId: "h-1", FromAgent: "a", CapabilitiesRequired: []string{"billing"}, ContextSnapshot: []byte("abc"),
		Budget: &handoffpb.BudgetEnvelope{CurrentDepth: 1, MaxDelegationDepth: 3}, DelegationPolicy: &handoffpb.SwarmDelegationPolicy{MaxRedirects: 2}}
	in := workflows.HandoffInputFrom(req, "corr-1", "", time.Unix(0, 0))
	assert.Equal(t, "application/json", in.ContextContentType)
	assert.Equal(t, 3, in.ContextSize)
	assert.Equal(t, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", in.ContextSHA256)
	assert.Equal(t, uint32(2), in.Policy.MaxRedirects)
	assert.Equal(t, workflows.HandoffBudget{CurrentDepth: 1, MaxDepth: 3}, in.Budget)
}

func TestHandoffDeadlinePassedBeforeTheOffer(t *testing.T) {
	h := newHandoffHarness(t)
	in := handoffInput("b")
	in.Timeout = time.Minute
	h.env.SetStartTime(time.Date(2030, 1, 1, 12, 2, 0, 0, time.UTC))
	in.RequestedAt = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC) // the start was delivered two minutes late
	res := h.run(in)
	assert.Equal(t, handoffpb.HandoffStatus_EXPIRED, res.Status)
	assert.Contains(t, res.EndReason, "before b was offered it")
	assert.Empty(t, h.offers)
	assert.Equal(t, []string{"a:handoff_expired"}, h.told())
}

// TestHandoffAcceptedExpiresAtCompletionDeadline: an accepted handoff nobody completes ends
// EXPIRED at its completion deadline (the configured timeout from the acceptance): the
// accepting agent and then the originator are told why, the originator is not fenced, and
// the expiry is recorded.
func TestHandoffAcceptedExpiresAtCompletionDeadline(t *testing.T) {
	h := newHandoffHarness(t)
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	h.env.SetStartTime(t0)
	acc := h.accept(time.Second, "b")
	in := handoffInput("b")
	in.CompletionTimeout = 30 * time.Minute
	res := h.run(in)

	requireAccepted(t, acc)
	completeBy := t0.Add(time.Second + 30*time.Minute)
	assert.Equal(t, completeBy, acc.state.CompleteBy.UTC(), "AcceptHandoff learns the deadline")
	assert.Contains(t, h.timers, 30*time.Minute)
	assert.Equal(t, handoffpb.HandoffStatus_EXPIRED, res.Status)
	assert.Equal(t, "completion deadline: accepted by b at 2030-01-01T12:00:01Z and not completed by 2030-01-01T12:30:01Z "+
		"(the completion timeout of 30m0s from the acceptance); the context stays with a", res.EndReason)
	assert.Equal(t, []string{"a:handoff_accepted", "b:handoff_expired", "a:handoff_expired"}, h.told(),
		"the accepting agent stops, the originator learns its work is its own again")
	assert.Equal(t, completeBy, h.notes[0].CompleteBy.UTC(), "the originator knows from the acceptance when it hears back at the latest")
	assert.Equal(t, res.EndReason, h.notes[2].Reason)
	assert.Empty(t, h.fences, "only completion fences the originator")
	assert.Equal(t, []handoffpb.HandoffStatus{handoffpb.HandoffStatus_ACCEPTED, handoffpb.HandoffStatus_EXPIRED}, h.recorded())
	assert.Contains(t, h.records[0].Note, "complete by 2030-01-01T12:30:01Z: the completion timeout of 30m0s", "the deadline is audited with the acceptance")
}

// TestHandoffCompletionDeadlineFromBudget: the request's budget sets the completion deadline
// — wall_time_remaining_ms from the request — and a completion before it completes.
func TestHandoffCompletionDeadlineFromBudget(t *testing.T) {
	t.Run("expires", func(t *testing.T) {
		h := newHandoffHarness(t)
		h.accept(5*time.Minute, "b")
		in := handoffInput("b")
		in.Budget.WallTimeMs = uint64((20 * time.Minute).Milliseconds())
		res := h.run(in)
		assert.Contains(t, h.timers, 15*time.Minute, "20 minutes from the request, 5 of them spent waiting for acceptance")
		assert.Equal(t, handoffpb.HandoffStatus_EXPIRED, res.Status)
		assert.Contains(t, res.EndReason, "the budget's wall_time_remaining_ms 1200000 from the request")
	})
	t.Run("completed in time", func(t *testing.T) {
		h := newHandoffHarness(t)
		t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
		h.env.SetStartTime(t0)
		h.accept(time.Second, "b")
		done := h.complete(2*time.Hour, "b")
		in := handoffInput("b")
		in.Budget.DeadlineEpochMs = uint64(t0.Add(3 * time.Hour).UnixMilli())
		res := h.run(in)
		requireAccepted(t, done)
		assert.Equal(t, handoffpb.HandoffStatus_COMPLETED, res.Status)
		assert.Equal(t, t0.Add(3*time.Hour), res.CompleteBy.UTC())
		assert.Len(t, h.fences, 1)
	})
}

// TestHandoffCompletionDeadlineLegacy: a run recorded before the completion deadline keeps
// waiting without one — a completion two hours after acceptance, past the default hour,
// still completes it.
func TestHandoffCompletionDeadlineLegacy(t *testing.T) {
	h := newHandoffHarness(t)
	h.env.OnGetVersion("handoff-completion-deadline", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	acc := h.accept(time.Second, "b")
	h.complete(2*time.Hour, "b")
	res := h.run(handoffInput("b"))
	requireAccepted(t, acc)
	assert.Zero(t, acc.state.CompleteBy)
	assert.Equal(t, handoffpb.HandoffStatus_COMPLETED, res.Status)
}
