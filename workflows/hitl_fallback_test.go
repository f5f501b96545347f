package workflows_test

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// downComponent is an external HITL component that is reachable but unhealthy: its health
// check answers NOT_SERVING, so the real AskExternalHitl declares it unavailable at once
// (§15.4) and HitlWait applies its fallback — nothing of the policy logic is mocked.
func downComponent(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// storedFallback is the fallback the invocation's stored record shows.
func storedFallback(t *testing.T, st store.Store, id string) hitl.Fallback {
	t.Helper()
	rec, err := st.HITL().GetInvocation(context.Background(), id)
	require.NoError(t, err)
	var inv hitl.Invocation
	require.NoError(t, json.Unmarshal(rec.Invocation, &inv))
	return inv.Fallback
}

func auditCount(t *testing.T, st store.Store, typ string) int {
	t.Helper()
	evs, err := st.Audit().List(context.Background(), store.AuditFilter{TypePrefix: typ})
	require.NoError(t, err)
	return len(evs)
}

// TestHitlDeploymentFallbackWhenComponentDown: with the external HITL component down, an
// invocation that sets no fallback of its own gets the deployment's (hitl.Policy.Fallback,
// SW4RM_HITL_UNAVAILABLE_POLICY): DENY_BY_DEFAULT when none is configured, AUTO_DECIDE_THRESHOLD
// approving or denying by the invocation's score, EXTEND_TIMEOUT extending up to its cap —
// each extension audited and the component asked again — then denying. An invocation's own
// fallback wins over the deployment's. The stored invocation shows the fallback applied, and
// the outcome says it was due to HITL unavailability (§15.4).
func TestHitlDeploymentFallbackWhenComponentDown(t *testing.T) {
	cases := []struct {
		name       string
		deployed   *hitl.Fallback
		own        hitl.Fallback
		decision   hitl.Action
		reason     string
		extensions int
		applied    hitl.Fallback
	}{
		{name: "none configured", decision: hitl.Deny, reason: "hitl_unavailable",
			own: hitl.Fallback{Score: 0.9}, applied: hitl.Fallback{Policy: hitl.DenyByDefault, Score: 0.9}},
		{name: "deny", deployed: &hitl.Fallback{Policy: hitl.DenyByDefault}, decision: hitl.Deny, reason: "hitl_unavailable",
			applied: hitl.Fallback{Policy: hitl.DenyByDefault}},
		{name: "auto approves", deployed: &hitl.Fallback{Policy: hitl.AutoDecideThreshold, Threshold: 0.6}, own: hitl.Fallback{Score: 0.75},
			decision: hitl.Approve, reason: "hitl_unavailable", applied: hitl.Fallback{Policy: hitl.AutoDecideThreshold, Threshold: 0.6, Score: 0.75}},
		{name: "auto denies", deployed: &hitl.Fallback{Policy: hitl.AutoDecideThreshold, Threshold: 0.6}, own: hitl.Fallback{Score: 0.4},
			decision: hitl.Deny, reason: "hitl_unavailable", applied: hitl.Fallback{Policy: hitl.AutoDecideThreshold, Threshold: 0.6, Score: 0.4}},
		{name: "extend", deployed: &hitl.Fallback{Policy: hitl.ExtendTimeout, MaxExtensions: 2, ExtendBy: time.Minute},
			decision: hitl.Deny, reason: "extensions_exhausted", extensions: 2,
			applied: hitl.Fallback{Policy: hitl.ExtendTimeout, MaxExtensions: 2, ExtendBy: time.Minute}},
		{name: "own wins", deployed: &hitl.Fallback{Policy: hitl.ExtendTimeout}, own: hitl.Fallback{Policy: hitl.DenyByDefault},
			decision: hitl.Deny, reason: "hitl_unavailable", applied: hitl.Fallback{Policy: hitl.DenyByDefault}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env, st := hitlEnv(t, hitl.Policy{Operators: operators, External: downComponent(t), Fallback: c.deployed})
			inv := invocation("hd")
			inv.Fallback = c.own
			env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: inv})
			o := outcomeOf(t, env)
			assert.Equal(t, c.decision, o.Decision)
			assert.True(t, o.Fallback)
			assert.True(t, o.HitlUnavailable, "the record says the fallback was due to HITL unavailability")
			assert.Equal(t, c.applied.Policy, o.FallbackPolicy)
			assert.Equal(t, c.reason, o.FallbackReason)
			assert.Equal(t, c.extensions, o.Extensions)
			assert.Equal(t, c.applied, storedFallback(t, st, "hd"), "the stored invocation shows the fallback applied")
			assert.Equal(t, c.extensions, auditCount(t, st, "hitl.deadline_extended"))
			assert.Equal(t, c.extensions+1, auditCount(t, st, "hitl.unavailable"), "asked once, and again after each extension")
		})
	}
}

// TestHitlDeploymentFallbackAtDeadline: the deployment's fallback also applies when nobody
// decides in time (§15.1) — EXTEND_TIMEOUT extends the deadline by its extend_by, then denies.
func TestHitlDeploymentFallbackAtDeadline(t *testing.T) {
	env, st := hitlEnv(t, hitl.Policy{Operators: operators, Fallback: &hitl.Fallback{Policy: hitl.ExtendTimeout, MaxExtensions: 1, ExtendBy: 5 * time.Minute}})
	var start time.Time
	env.RegisterDelayedCallback(func() { start = env.Now() }, 0)
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: invocation("hx")})
	o := outcomeOf(t, env)
	assert.Equal(t, hitl.Deny, o.Decision)
	assert.Equal(t, "extensions_exhausted", o.FallbackReason)
	assert.Equal(t, 1, o.Extensions)
	assert.False(t, o.HitlUnavailable)
	assert.WithinDuration(t, start.Add(15*time.Minute), o.DecidedAt, time.Second, "the 10 min timeout, then one 5 min extension")
	assert.Equal(t, 1, auditCount(t, st, "hitl.deadline_extended"))
}

// TestRoomEscalationFallbackWhenComponentDown: a room's escalation with the HITL component
// down is decided by the proposal's own AUTO_DECIDE_THRESHOLD, which judges the votes'
// weighted mean on the 0–1 scale (8.33/10 here), or else by the deployment's policy.
func TestRoomEscalationFallbackWhenComponentDown(t *testing.T) {
	cases := []struct {
		name     string
		deployed *hitl.Fallback
		own      *hitl.Fallback
		outcome  negotiationroompb.DecisionOutcome
	}{
		{name: "own auto approves", own: &hitl.Fallback{Policy: hitl.AutoDecideThreshold, Threshold: 0.8}, outcome: negotiationroompb.DecisionOutcome_APPROVED},
		{name: "own auto denies", own: &hitl.Fallback{Policy: hitl.AutoDecideThreshold, Threshold: 0.9}, outcome: negotiationroompb.DecisionOutcome_REVISION_REQUESTED},
		{name: "deployment's auto", deployed: &hitl.Fallback{Policy: hitl.AutoDecideThreshold, Threshold: 0.8}, outcome: negotiationroompb.DecisionOutcome_APPROVED},
		{name: "own deny over deployment's auto", deployed: &hitl.Fallback{Policy: hitl.AutoDecideThreshold, Threshold: 0.1},
			own: &hitl.Fallback{Policy: hitl.DenyByDefault}, outcome: negotiationroompb.DecisionOutcome_REVISION_REQUESTED},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env, _ := roomEnv(t, hitl.Policy{Operators: operators, External: downComponent(t), Fallback: c.deployed})
			// An escalation for a critic's request, with a weighted mean of 8.33.
			vote(env, time.Second, v("c1", 8, 0.9, true, "Escalate to HITL: licence question"), &voteResult{})
			vote(env, 2*time.Second, v("c2", 8.5, 0.9, true), &voteResult{})
			vote(env, 3*time.Second, v("c3", 8.5, 0.9, true), &voteResult{})
			env.ExecuteWorkflow(workflows.RoomCoordinator, workflows.RoomInput{Proposal: proposal(), Version: 1, HITLFallback: c.own})
			d := decisionOf(t, env)
			assert.Equal(t, c.outcome, d.GetOutcome(), d.GetReason())
			assert.Contains(t, d.GetReason(), "fallback")
		})
	}
}

// deadlockOf runs a negotiation whose only version, evaluated low, times out below the
// threshold: a DEBATE_DEADLOCK escalation that h.hitl answers.
func deadlockOf(h *negHarness, fallback *hitl.Fallback) workflows.NegotiationState {
	h.t.Helper()
	var errs []error
	h.update(time.Second, workflows.NegotiationDraftUpdate, workflows.NegotiationDraft{From: "a", ContentType: "text/plain", Payload: []byte("v1")}, &errs)
	h.update(2*time.Second, workflows.NegotiationEvaluateUpdate, workflows.NegotiationEvaluation{From: "b", Confidence: 0.2}, &errs)
	in := negInput(basePolicy())
	in.HITLFallback = fallback
	h.env.ExecuteWorkflow(workflows.Negotiation, in)
	st := h.result()
	require.Empty(h.t, errs)
	require.Len(h.t, h.invs, 1)
	require.Equal(h.t, "DEBATE_DEADLOCK", h.invs[0].ReasonType)
	return st
}

// TestNegotiationHitlFallbackTravels: a negotiation's own hitl_unavailable_policy (Open's
// sw4rm-hitl-unavailable-policy metadata) travels into its escalation's invocation with the
// best version's score, which AUTO_DECIDE_THRESHOLD judges (§15.4); it is in the policy event,
// the state and a policy artifact. An AUTO_DECIDE_THRESHOLD approval decides the best version.
func TestNegotiationHitlFallbackTravels(t *testing.T) {
	h := newNegHarness(t)
	h.hitl = func(inv hitl.Invocation) hitl.Outcome {
		return hitl.Outcome{InvocationID: inv.InvocationID, Decision: hitl.Approve, DecidedBy: "fallback", Fallback: true,
			FallbackPolicy: hitl.AutoDecideThreshold, FallbackReason: "hitl_unavailable", HitlUnavailable: true, Rationale: "auto-approved"}
	}
	own := &hitl.Fallback{Policy: hitl.AutoDecideThreshold, Threshold: 0.1}
	st := deadlockOf(h, own)
	require.Len(t, st.Versions, 1)
	assert.Equal(t, hitl.Fallback{Policy: hitl.AutoDecideThreshold, Threshold: 0.1, Score: float64(st.Versions[0].Score)}, h.invs[0].Fallback)
	assert.Greater(t, st.Versions[0].Score, float32(0))
	assert.Equal(t, workflows.NegotiationDecided, st.Status)
	assert.Equal(t, []byte("v1"), st.Result)
	assert.Contains(t, st.Decision.GetRationale(), "fallback AUTO_DECIDE_THRESHOLD (hitl_unavailable)")
	assert.Equal(t, own, st.HITLFallback)
	var policyEvent map[string]any
	for _, e := range h.events {
		if e.Kind == "policy" {
			require.NoError(t, json.Unmarshal(e.JSON, &policyEvent))
		}
	}
	assert.Equal(t, map[string]any{"policy": "AUTO_DECIDE_THRESHOLD", "threshold": 0.1}, policyEvent["hitl_unavailable_policy"])
	var stored []string
	for _, a := range h.artifacts {
		if a.Kind == "policy" {
			stored = append(stored, a.Version+" "+string(a.Content))
		}
	}
	assert.Contains(t, stored, `hitl-unavailable {"policy":"AUTO_DECIDE_THRESHOLD","threshold":0.1}`)
}

// TestNegotiationWithoutOwnFallback: without a policy of its own the escalation sets none
// (the deployment's applies in HitlWait) but still carries its score; a deny-by-default
// fallback applied because the HITL component was unavailable aborts the negotiation with
// error_code=hitl_unavailable (§15.4), in the state and the abort event.
func TestNegotiationWithoutOwnFallback(t *testing.T) {
	h := newNegHarness(t)
	h.hitl = func(inv hitl.Invocation) hitl.Outcome {
		return hitl.Outcome{InvocationID: inv.InvocationID, Decision: hitl.Deny, DecidedBy: "fallback", Fallback: true,
			FallbackPolicy: hitl.DenyByDefault, FallbackReason: "hitl_unavailable", HitlUnavailable: true, Rationale: "denied by default"}
	}
	st := deadlockOf(h, nil)
	assert.Empty(t, h.invs[0].Fallback.Policy)
	assert.InDelta(t, float64(st.Versions[0].Score), h.invs[0].Fallback.Score, 1e-9)
	assert.Equal(t, workflows.NegotiationAborted, st.Status)
	assert.Equal(t, hitl.UnavailableCode, st.AbortCode)
	assert.Nil(t, st.HITLFallback)
	var abort map[string]any
	for _, e := range h.events {
		if e.Kind == "abort" {
			require.NoError(t, json.Unmarshal(e.JSON, &abort))
		}
		if e.Kind == "policy" {
			assert.NotContains(t, string(e.JSON), "hitl_unavailable_policy")
		}
	}
	assert.Equal(t, "hitl_unavailable", abort["error_code"])
}
