package workflows_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/hitlsignals"
	"github.com/sw4rm/sw4rm-temporal/observe"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
	"github.com/sw4rm/sw4rm-temporal/worker"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

var operators = []hitlsignals.Operator{
	{Name: "alice", TokenSHA256: hitlsignals.HashToken("alice-token")},
	{Name: "carol", TokenSHA256: hitlsignals.HashToken("carol-token"), Reasons: []string{"CONFLICT"}},
}

func hitlEnv(t *testing.T, policy hitlsignals.Policy) (*testsuite.TestWorkflowEnvironment, store.Store) {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	st := memory.New()
	t.Cleanup(st.Close)
	sink := observe.New(nil, st.Audit())
	worker.Register(env, &activities.Activities{Store: st, Router: router.New(st, router.Config{}, sink), Sink: sink, HITL: policy})
	return env, st
}

func invocation(id string) hitlsignals.Invocation {
	return hitlsignals.Invocation{
		InvocationID: id, ReasonType: "SECURITY_APPROVAL", CorrelationID: "corr-" + id,
		Subject:         hitlsignals.Subject{TaskID: "t1", RepoID: "r1"},
		Context:         hitlsignals.Context{Facts: []string{"touches prod"}, RiskNotes: []string{"irreversible"}},
		ProposedActions: []string{"approve", "deny"}, Timeout: 10 * time.Minute,
	}
}

func decide(env *testsuite.TestWorkflowEnvironment, after time.Duration, d hitlsignals.Decision) {
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(hitlsignals.DecisionSignal, d) }, after)
}

func outcomeOf(t *testing.T, env *testsuite.TestWorkflowEnvironment) hitlsignals.Outcome {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var o hitlsignals.Outcome
	require.NoError(t, env.GetWorkflowResult(&o))
	return o
}

func TestHitlApprovedInTime(t *testing.T) {
	env, st := hitlEnv(t, hitlsignals.Policy{Operators: operators})
	env.RegisterDelayedCallback(func() {
		rec, err := st.HITL().GetInvocation(context.Background(), "h1")
		require.NoError(t, err)
		assert.Equal(t, store.HITLPending, rec.Status, "listed as pending while waiting")
		assert.Equal(t, "SECURITY_APPROVAL", rec.ReasonType)
	}, time.Minute)
	decide(env, 2*time.Minute, hitlsignals.Decision{InvocationID: "h1", Decision: "APPROVE", Rationale: "low risk", Operator: "alice", Token: "alice-token", Via: "cli"})
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: invocation("h1")})
	o := outcomeOf(t, env)
	assert.Equal(t, hitlsignals.Approve, o.Decision)
	assert.Equal(t, "alice", o.DecidedBy)
	assert.Equal(t, "cli", o.Via)
	assert.Equal(t, "low risk", o.Rationale)
	assert.False(t, o.Fallback)

	rec, err := st.HITL().GetInvocation(context.Background(), "h1")
	require.NoError(t, err)
	assert.Equal(t, store.HITLDecided, rec.Status)
	var stored hitlsignals.Outcome
	require.NoError(t, json.Unmarshal(rec.Outcome, &stored))
	assert.Equal(t, o.Decision, stored.Decision)
	evs, err := st.Audit().List(context.Background(), store.AuditFilter{CorrelationID: "corr-h1"})
	require.NoError(t, err)
	require.Len(t, evs, 2)
	assert.Equal(t, "hitl.invoked", evs[0].Type)
	assert.Equal(t, "hitl.decided", evs[1].Type)
	assert.Equal(t, "alice", evs[1].Actor, "who decided is audited")
}

func TestHitlDenied(t *testing.T) {
	env, _ := hitlEnv(t, hitlsignals.Policy{Operators: operators})
	decide(env, time.Minute, hitlsignals.Decision{InvocationID: "h2", Decision: "deny", Rationale: "too risky", Operator: "alice", Token: "alice-token"})
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: invocation("h2")})
	o := outcomeOf(t, env)
	assert.Equal(t, hitlsignals.Deny, o.Decision)
	assert.Equal(t, "signal", o.Via, "a raw signal without via is recorded as such")
}

func TestHitlModifyWithPatch(t *testing.T) {
	env, _ := hitlEnv(t, hitlsignals.Policy{Operators: operators})
	// modify without a patch is refused, the one with a patch wins.
	decide(env, time.Minute, hitlsignals.Decision{InvocationID: "h3", Decision: "modify", Rationale: "narrow it", Operator: "alice", Token: "alice-token"})
	decide(env, 2*time.Minute, hitlsignals.Decision{InvocationID: "h3", Decision: "modify", Rationale: "narrow it", Patch: []byte(`{"scope":"src/ui"}`), Operator: "alice", Token: "alice-token"})
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: invocation("h3")})
	o := outcomeOf(t, env)
	assert.Equal(t, hitlsignals.Modify, o.Decision)
	assert.JSONEq(t, `{"scope":"src/ui"}`, string(o.Patch))
}

func TestHitlRefusesBadDecisionsAndFirstValidWins(t *testing.T) {
	env, st := hitlEnv(t, hitlsignals.Policy{Operators: operators})
	for i, d := range []hitlsignals.Decision{
		{InvocationID: "h4", Decision: "approve", Rationale: "x"},                                             // no credential
		{InvocationID: "h4", Decision: "approve", Rationale: "x", Operator: "alice", Token: "wrong"},          // bad token
		{InvocationID: "h4", Decision: "approve", Rationale: "x", Operator: "mallory", Token: "alice-token"},  // unknown operator
		{InvocationID: "h4", Decision: "approve", Rationale: "x", Operator: "carol", Token: "carol-token"},    // not authorized for SECURITY_APPROVAL
		{InvocationID: "other", Decision: "approve", Rationale: "x", Operator: "alice", Token: "alice-token"}, // wrong invocation
		{InvocationID: "h4", Decision: "maybe", Rationale: "x", Operator: "alice", Token: "alice-token"},      // bad action
		{InvocationID: "h4", Decision: "approve", Rationale: " ", Operator: "alice", Token: "alice-token"},    // no rationale
	} {
		decide(env, time.Duration(i+1)*time.Second, d)
	}
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(hitlsignals.StatusQuery)
		require.NoError(t, err)
		var s hitlsignals.Status
		require.NoError(t, v.Get(&s))
		assert.Equal(t, 7, s.Refused)
		assert.Nil(t, s.Outcome, "nothing changed")
	}, 30*time.Second)
	decide(env, time.Minute, hitlsignals.Decision{InvocationID: "h4", Decision: "deny", Rationale: "first", Operator: "alice", Token: "alice-token"})
	decide(env, time.Minute, hitlsignals.Decision{InvocationID: "h4", Decision: "approve", Rationale: "second", Operator: "alice", Token: "alice-token"})
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: invocation("h4")})
	o := outcomeOf(t, env)
	assert.Equal(t, hitlsignals.Deny, o.Decision, "the first valid decision wins")
	assert.Equal(t, "first", o.Rationale)
	refusals, err := st.Audit().List(context.Background(), store.AuditFilter{TypePrefix: "hitl.decision_refused"})
	require.NoError(t, err)
	require.Len(t, refusals, 7)
	assert.Contains(t, string(refusals[1].Details), "invalid token")
	assert.NotContains(t, string(refusals[1].Details), "wrong", "tokens are never audited")
}

func TestHitlDeadlineFallbacks(t *testing.T) {
	cases := []struct {
		name     string
		fallback hitlsignals.Fallback
		want     hitlsignals.Action
	}{
		{"deny by default", hitlsignals.Fallback{}, hitlsignals.Deny},
		{"auto approve above threshold", hitlsignals.Fallback{Policy: hitlsignals.AutoDecideThreshold, Score: 0.92, Threshold: 0.9}, hitlsignals.Approve},
		{"auto deny below threshold", hitlsignals.Fallback{Policy: hitlsignals.AutoDecideThreshold, Score: 0.5, Threshold: 0.9}, hitlsignals.Deny},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env, st := hitlEnv(t, hitlsignals.Policy{Operators: operators})
			inv := invocation("h5")
			inv.Fallback = c.fallback
			var start time.Time
			env.RegisterDelayedCallback(func() { start = env.Now() }, 0)
			env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: inv})
			o := outcomeOf(t, env)
			assert.Equal(t, c.want, o.Decision)
			assert.True(t, o.Fallback)
			assert.Equal(t, "deadline", o.FallbackReason)
			assert.Equal(t, "fallback", o.DecidedBy)
			assert.WithinDuration(t, start.Add(10*time.Minute), o.DecidedAt, time.Second, "decided at the deadline")
			if c.fallback.Policy == "" {
				assert.Equal(t, hitlsignals.DenyByDefault, o.FallbackPolicy)
			} else {
				assert.Equal(t, c.fallback.Policy, o.FallbackPolicy)
			}
			rec, err := st.HITL().GetInvocation(context.Background(), "h5")
			require.NoError(t, err)
			assert.Equal(t, store.HITLDecided, rec.Status)
		})
	}
}

func TestHitlExtendTimeoutCappedAtThree(t *testing.T) {
	env, st := hitlEnv(t, hitlsignals.Policy{Operators: operators})
	inv := invocation("h6")
	inv.Fallback = hitlsignals.Fallback{Policy: hitlsignals.ExtendTimeout}
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: inv})
	o := outcomeOf(t, env)
	assert.Equal(t, hitlsignals.Deny, o.Decision)
	assert.Equal(t, "extensions_exhausted", o.FallbackReason)
	assert.Equal(t, 3, o.Extensions)
	evs, err := st.Audit().List(context.Background(), store.AuditFilter{TypePrefix: "hitl.deadline_extended"})
	require.NoError(t, err)
	assert.Len(t, evs, 3)
}

func TestHitlExtendedThenDecided(t *testing.T) {
	env, _ := hitlEnv(t, hitlsignals.Policy{Operators: operators})
	inv := invocation("h7")
	inv.Fallback = hitlsignals.Fallback{Policy: hitlsignals.ExtendTimeout, ExtendBy: 5 * time.Minute}
	decide(env, 12*time.Minute, hitlsignals.Decision{InvocationID: "h7", Decision: "approve", Rationale: "back from lunch", Operator: "alice", Token: "alice-token"})
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: inv})
	o := outcomeOf(t, env)
	assert.Equal(t, hitlsignals.Approve, o.Decision)
	assert.Equal(t, 1, o.Extensions, "one extension happened before the human decided")
}

func TestHitlWithoutComponentNeverBlocks(t *testing.T) {
	env, _ := hitlEnv(t, hitlsignals.Policy{})
	inv := invocation("h8")
	inv.Fallback = hitlsignals.Fallback{Policy: hitlsignals.AutoDecideThreshold, Score: 0.95, Threshold: 0.9}
	var start time.Time
	env.RegisterDelayedCallback(func() { start = env.Now() }, 0)
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: inv})
	o := outcomeOf(t, env)
	assert.Equal(t, hitlsignals.Approve, o.Decision)
	assert.Equal(t, "no_hitl_component", o.FallbackReason)
	assert.WithinDuration(t, start, o.DecidedAt, time.Second, "§15.3: applied at once, not after the deadline")
}

func TestHitlExternalUnavailable(t *testing.T) {
	for _, policy := range []string{hitlsignals.DenyByDefault, hitlsignals.ExtendTimeout} {
		t.Run(policy, func(t *testing.T) {
			env, _ := hitlEnv(t, hitlsignals.Policy{External: "127.0.0.1:1"})
			calls := 0
			var acts *activities.Activities
			env.OnActivity(acts.AskExternalHitl, mock.Anything, mock.Anything).Return(func(context.Context, hitlsignals.Invocation) (hitlsignals.Outcome, error) {
				calls++
				return hitlsignals.Outcome{}, temporal.NewNonRetryableApplicationError("hitl_unavailable: down", "hitl_unavailable", errors.New("down"))
			})
			inv := invocation("h9")
			inv.Fallback = hitlsignals.Fallback{Policy: policy}
			env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: inv})
			o := outcomeOf(t, env)
			assert.Equal(t, hitlsignals.Deny, o.Decision)
			assert.True(t, o.Fallback)
			if policy == hitlsignals.DenyByDefault {
				assert.Equal(t, "hitl_unavailable", o.FallbackReason)
				assert.Equal(t, 1, calls)
			} else {
				assert.Equal(t, "extensions_exhausted", o.FallbackReason)
				assert.Equal(t, 3, o.Extensions)
				assert.Equal(t, 4, calls, "asked once, then again after each of the three extensions")
			}
		})
	}
}

func TestHitlExternalDecides(t *testing.T) {
	env, _ := hitlEnv(t, hitlsignals.Policy{External: "127.0.0.1:1"})
	var acts *activities.Activities
	env.OnActivity(acts.AskExternalHitl, mock.Anything, mock.Anything).Return(hitlsignals.Outcome{Decision: hitlsignals.Approve, Rationale: "ok", DecidedBy: "external:x", Via: "external"}, nil)
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: invocation("h10")})
	o := outcomeOf(t, env)
	assert.Equal(t, hitlsignals.Approve, o.Decision)
	assert.Equal(t, "external", o.Via)
	assert.Equal(t, "h10", o.InvocationID)
}

// requester stands for any SW4RM workflow that needs a human.
func requester(ctx workflow.Context, inv hitlsignals.Invocation) (hitlsignals.Outcome, error) {
	return workflows.RequestHITL(ctx, inv)
}

func TestRequestHITLFromAnotherWorkflow(t *testing.T) {
	env, _ := hitlEnv(t, hitlsignals.Policy{Operators: operators})
	env.RegisterWorkflow(requester)
	inv := invocation("h11")
	env.RegisterDelayedCallback(func() {
		require.NoError(t, env.SignalWorkflowByID(hitlsignals.WorkflowID("h11"), hitlsignals.DecisionSignal,
			hitlsignals.Decision{InvocationID: "h11", Decision: "approve", Rationale: "fine", Operator: "alice", Token: "alice-token"}))
	}, time.Minute)
	env.ExecuteWorkflow(requester, inv)
	o := outcomeOf(t, env)
	assert.Equal(t, hitlsignals.Approve, o.Decision)
	assert.Equal(t, "alice", o.DecidedBy)
}

func TestHitlRejectsInvalidInvocation(t *testing.T) {
	env, _ := hitlEnv(t, hitlsignals.Policy{Operators: operators})
	inv := invocation("h12")
	inv.ReasonType = "HITL_REASON_UNSPECIFIED"
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: inv})
	require.True(t, env.IsWorkflowCompleted())
	require.Error(t, env.GetWorkflowError())
	assert.Contains(t, env.GetWorkflowError().Error(), "reason_type")
}
