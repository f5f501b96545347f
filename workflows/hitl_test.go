package workflows_test

import (
	"context"
	"crypto/ed25519"
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
	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
	"github.com/sw4rm/sw4rm-temporal/worker"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// decisionKey is the deployment's decision key of the tests; aliceKey is alice's own key.
var (
	decisionKey = keyOf(1)
	aliceKey    = keyOf(2)
	otherKey    = keyOf(9)
)

var operators = []hitl.Operator{
	{Name: "alice", TokenSHA256: hitl.HashToken("alice-token"), PublicKeys: []ed25519.PublicKey{pubOf(aliceKey)}},
	{Name: "carol", TokenSHA256: hitl.HashToken("carol-token"), Reasons: []string{"CONFLICT"}},
}

// policy is the operator policy of the tests: operators and the decision key.
var policy = hitl.Policy{Operators: operators, DecisionKeys: []ed25519.PublicKey{pubOf(decisionKey)}}

func keyOf(b byte) ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = b
	}
	return ed25519.NewKeyFromSeed(seed)
}

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

func hitlEnv(t *testing.T, policy hitl.Policy) (*testsuite.TestWorkflowEnvironment, store.Store) {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	st := memory.New()
	t.Cleanup(st.Close)
	sink := audit.New(nil, st.Audit())
	worker.Register(env, &activities.Activities{Store: st, Router: router.New(st, router.Config{}, sink), Sink: sink, HITL: policy})
	return env, st
}

func invocation(id string) hitl.Invocation {
	return hitl.Invocation{
		InvocationID: id, ReasonType: "SECURITY_APPROVAL", CorrelationID: "corr-" + id,
		Subject:         hitl.Subject{TaskID: "t1", RepoID: "r1"},
		Context:         hitl.Context{Facts: []string{"touches prod"}, RiskNotes: []string{"irreversible"}},
		ProposedActions: []string{"approve", "deny"}, Timeout: 10 * time.Minute,
	}
}

// decide signals d after a delay, attested by the decision key as a frontend would, valid
// for ten minutes from the moment it is sent.
func decide(env *testsuite.TestWorkflowEnvironment, after time.Duration, d hitl.Decision) {
	signed(env, after, d, decisionKey)
}

// signed signals d after a delay, attested by key (unless d carries a token: then as is).
func signed(env *testsuite.TestWorkflowEnvironment, after time.Duration, d hitl.Decision, key ed25519.PrivateKey) {
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(hitl.DecisionSignal, attestAt(env, d, key)) }, after)
}

// attestAt attests d with key at the environment's time, unless it carries a token.
func attestAt(env *testsuite.TestWorkflowEnvironment, d hitl.Decision, key ed25519.PrivateKey) hitl.Decision {
	if d.Token != "" {
		return d
	}
	a, err := hitl.Attest(d, key, env.Now().Add(hitl.DefaultAttestationTTL))
	if err != nil {
		panic(err)
	}
	return a
}

func outcomeOf(t *testing.T, env *testsuite.TestWorkflowEnvironment) hitl.Outcome {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var o hitl.Outcome
	require.NoError(t, env.GetWorkflowResult(&o))
	return o
}

func TestHitlApprovedInTime(t *testing.T) {
	env, st := hitlEnv(t, policy)
	env.RegisterDelayedCallback(func() {
		rec, err := st.HITL().GetInvocation(context.Background(), "h1")
		require.NoError(t, err)
		assert.Equal(t, store.HITLPending, rec.Status, "listed as pending while waiting")
		assert.Equal(t, "SECURITY_APPROVAL", rec.ReasonType)
	}, time.Minute)
	decide(env, 2*time.Minute, hitl.Decision{InvocationID: "h1", Decision: "APPROVE", Rationale: "low risk", Operator: "alice", Via: "cli"})
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: invocation("h1")})
	o := outcomeOf(t, env)
	assert.Equal(t, hitl.Approve, o.Decision)
	assert.Equal(t, "alice", o.DecidedBy)
	assert.Equal(t, "cli", o.Via)
	assert.Equal(t, "low risk", o.Rationale)
	assert.False(t, o.Fallback)

	rec, err := st.HITL().GetInvocation(context.Background(), "h1")
	require.NoError(t, err)
	assert.Equal(t, store.HITLDecided, rec.Status)
	var stored hitl.Outcome
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
	env, _ := hitlEnv(t, policy)
	decide(env, time.Minute, hitl.Decision{InvocationID: "h2", Decision: "deny", Rationale: "too risky", Operator: "alice"})
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: invocation("h2")})
	o := outcomeOf(t, env)
	assert.Equal(t, hitl.Deny, o.Decision)
	assert.Equal(t, "signal", o.Via, "a raw signal without via is recorded as such")
}

func TestHitlModifyWithPatch(t *testing.T) {
	env, _ := hitlEnv(t, policy)
	// modify without a patch is refused, the one with a patch wins.
	decide(env, time.Minute, hitl.Decision{InvocationID: "h3", Decision: "modify", Rationale: "narrow it", Operator: "alice"})
	decide(env, 2*time.Minute, hitl.Decision{InvocationID: "h3", Decision: "modify", Rationale: "narrow it", Patch: []byte(`{"scope":"src/ui"}`), Operator: "alice"})
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: invocation("h3")})
	o := outcomeOf(t, env)
	assert.Equal(t, hitl.Modify, o.Decision)
	assert.JSONEq(t, `{"scope":"src/ui"}`, string(o.Patch))
}

func TestHitlRefusesBadDecisionsAndFirstValidWins(t *testing.T) {
	env, st := hitlEnv(t, policy)
	type attempt struct {
		d   hitl.Decision
		key ed25519.PrivateKey // nil: sent without attestation
	}
	approve := func(op string) hitl.Decision {
		return hitl.Decision{InvocationID: "h4", Decision: "approve", Rationale: "x", Operator: op}
	}
	wrongInvocation := approve("alice")
	wrongInvocation.InvocationID = "other"
	badAction, noRationale := approve("alice"), approve("alice")
	badAction.Decision, noRationale.Rationale = "maybe", " "
	withToken := approve("alice")
	withToken.Token = "alice-token"
	attempts := []attempt{
		{approve("alice"), nil},           // no attestation
		{withToken, nil},                  // a valid token, refused on a new run
		{approve("alice"), otherKey},      // a key nobody configured
		{approve("mallory"), decisionKey}, // unknown operator
		{approve("carol"), decisionKey},   // not authorized for SECURITY_APPROVAL
		{wrongInvocation, decisionKey},    // wrong invocation
		{badAction, decisionKey},          // bad action
		{noRationale, decisionKey},        // no rationale
	}
	for i, a := range attempts {
		env.RegisterDelayedCallback(func() {
			d := a.d
			if a.key != nil {
				d = attestAt(env, d, a.key)
			}
			env.SignalWorkflow(hitl.DecisionSignal, d)
		}, time.Duration(i+1)*time.Second)
	}
	// Signed at once, arriving after its ten minutes: expired.
	env.RegisterDelayedCallback(func() {
		late := attestAt(env, approve("alice"), decisionKey)
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(hitl.DecisionSignal, late) }, 11*time.Minute-10*time.Second)
	}, 10*time.Second)
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(hitl.StatusQuery)
		require.NoError(t, err)
		var s hitl.Status
		require.NoError(t, v.Get(&s))
		assert.Equal(t, len(attempts)+1, s.Refused)
		assert.Nil(t, s.Outcome, "nothing changed")
	}, 11*time.Minute+30*time.Second)
	inv := invocation("h4")
	inv.Timeout = time.Hour
	decide(env, 12*time.Minute, hitl.Decision{InvocationID: "h4", Decision: "deny", Rationale: "first", Operator: "alice"})
	decide(env, 12*time.Minute, hitl.Decision{InvocationID: "h4", Decision: "approve", Rationale: "second", Operator: "alice"})
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: inv})
	o := outcomeOf(t, env)
	assert.Equal(t, hitl.Deny, o.Decision, "the first valid decision wins")
	assert.Equal(t, "first", o.Rationale)
	assert.Equal(t, auth.KeyID(auth.AlgorithmEd25519, pubOf(decisionKey)), o.AttestedBy)
	refusals, err := st.Audit().List(context.Background(), store.AuditFilter{TypePrefix: "hitl.decision_refused"})
	require.NoError(t, err)
	require.Len(t, refusals, len(attempts)+1)
	for i, want := range []string{"no attestation", "carrying a token is refused", "neither the deployment's decision key", `unknown operator \"mallory\"`,
		"may not decide SECURITY_APPROVAL", "names invocation", "not one of approve", "rationale is required", "expired"} {
		assert.Contains(t, string(refusals[i].Details), want, "refusal %d", i)
		assert.NotContains(t, string(refusals[i].Details), "alice-token", "tokens are never audited")
	}
	assert.Contains(t, string(refusals[1].Details), "permission_denied: a decision carrying a token")
}

// TestHitlLegacyRunAcceptsToken: a run recorded before attested decisions (GetVersion answers
// the default version, as when its history has no marker) still accepts the token it was
// started with, and refuses a wrong one — even after an attested decision made it reload the
// policy, which comes without token hashes.
func TestHitlLegacyRunAcceptsToken(t *testing.T) {
	env, _ := hitlEnv(t, policy)
	env.OnGetVersion("hitl-attested-decisions", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	reloads := 0
	var acts *activities.Activities
	env.OnActivity(acts.LoadHitlPolicy, mock.Anything).Return(func(context.Context) (hitl.Policy, error) {
		reloads++
		return policy.WithoutTokens(), nil
	})
	signed(env, 30*time.Second, hitl.Decision{InvocationID: "h13", Decision: "approve", Rationale: "x", Operator: "alice"}, otherKey)
	decide(env, time.Minute, hitl.Decision{InvocationID: "h13", Decision: "approve", Rationale: "x", Operator: "alice", Token: "wrong"})
	decide(env, 2*time.Minute, hitl.Decision{InvocationID: "h13", Decision: "approve", Rationale: "legacy", Operator: "alice", Token: "alice-token"})
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: invocation("h13")})
	o := outcomeOf(t, env)
	assert.Equal(t, hitl.Approve, o.Decision)
	assert.Equal(t, "legacy", o.Rationale)
	assert.Empty(t, o.AttestedBy)
	assert.Equal(t, 1, reloads)
}

// TestHitlOperatorKeySignedDecision: a decision alice signed with her own key, sent through
// the raw signal door, is accepted and names her key; her key cannot vouch for the CLI door.
func TestHitlOperatorKeySignedDecision(t *testing.T) {
	env, st := hitlEnv(t, policy)
	signed(env, time.Minute, hitl.Decision{InvocationID: "h14", Decision: "approve", Rationale: "x", Operator: "alice", Via: "cli"}, aliceKey)
	signed(env, 2*time.Minute, hitl.Decision{InvocationID: "h14", Decision: "approve", Rationale: "signed myself", Operator: "alice", Via: "signal"}, aliceKey)
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: invocation("h14")})
	o := outcomeOf(t, env)
	assert.Equal(t, "signed myself", o.Rationale)
	assert.Equal(t, "signal", o.Via)
	assert.Equal(t, auth.KeyID(auth.AlgorithmEd25519, pubOf(aliceKey)), o.AttestedBy)
	refusals, err := st.Audit().List(context.Background(), store.AuditFilter{TypePrefix: "hitl.decision_refused"})
	require.NoError(t, err)
	require.Len(t, refusals, 1)
	assert.Contains(t, string(refusals[0].Details), "signal door only")
}

// TestHitlReloadsPolicyForEachDecision: the policy a run loaded at start is not the last word
// — a decision key configured later is accepted (a run started before decision keys existed
// can be decided), and a key revoked while the run waits is refused (§23).
func TestHitlReloadsPolicyForEachDecision(t *testing.T) {
	t.Run("key added", func(t *testing.T) {
		env, _ := hitlEnv(t, hitl.Policy{Operators: operators}) // loaded at start: no decision key
		var acts *activities.Activities
		env.OnActivity(acts.LoadHitlPolicy, mock.Anything).Return(policy, nil)
		decide(env, time.Minute, hitl.Decision{InvocationID: "h15", Decision: "approve", Rationale: "key arrived", Operator: "alice"})
		env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: invocation("h15")})
		assert.Equal(t, "key arrived", outcomeOf(t, env).Rationale)
	})
	t.Run("key revoked", func(t *testing.T) {
		env, st := hitlEnv(t, policy)
		var acts *activities.Activities
		env.OnActivity(acts.LoadHitlPolicy, mock.Anything).Return(hitl.Policy{Operators: operators}, nil)
		decide(env, time.Minute, hitl.Decision{InvocationID: "h16", Decision: "approve", Rationale: "revoked", Operator: "alice"})
		env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: invocation("h16")})
		o := outcomeOf(t, env)
		assert.True(t, o.Fallback, "the revoked key decided nothing")
		refusals, err := st.Audit().List(context.Background(), store.AuditFilter{TypePrefix: "hitl.decision_refused"})
		require.NoError(t, err)
		require.Len(t, refusals, 1)
		assert.Contains(t, string(refusals[0].Details), "neither the deployment's decision key")
	})
}

func TestHitlDeadlineFallbacks(t *testing.T) {
	cases := []struct {
		name     string
		fallback hitl.Fallback
		want     hitl.Action
	}{
		{"deny by default", hitl.Fallback{}, hitl.Deny},
		{"auto approve above threshold", hitl.Fallback{Policy: hitl.AutoDecideThreshold, Score: 0.92, Threshold: 0.9}, hitl.Approve},
		{"auto deny below threshold", hitl.Fallback{Policy: hitl.AutoDecideThreshold, Score: 0.5, Threshold: 0.9}, hitl.Deny},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env, st := hitlEnv(t, policy)
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
				assert.Equal(t, hitl.DenyByDefault, o.FallbackPolicy)
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
	env, st := hitlEnv(t, policy)
	inv := invocation("h6")
	inv.Fallback = hitl.Fallback{Policy: hitl.ExtendTimeout}
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: inv})
	o := outcomeOf(t, env)
	assert.Equal(t, hitl.Deny, o.Decision)
	assert.Equal(t, "extensions_exhausted", o.FallbackReason)
	assert.Equal(t, 3, o.Extensions)
	evs, err := st.Audit().List(context.Background(), store.AuditFilter{TypePrefix: "hitl.deadline_extended"})
	require.NoError(t, err)
	assert.Len(t, evs, 3)
}

func TestHitlExtendedThenDecided(t *testing.T) {
	env, _ := hitlEnv(t, policy)
	inv := invocation("h7")
	inv.Fallback = hitl.Fallback{Policy: hitl.ExtendTimeout, ExtendBy: 5 * time.Minute}
	decide(env, 12*time.Minute, hitl.Decision{InvocationID: "h7", Decision: "approve", Rationale: "back from lunch", Operator: "alice"})
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: inv})
	o := outcomeOf(t, env)
	assert.Equal(t, hitl.Approve, o.Decision)
	assert.Equal(t, 1, o.Extensions, "one extension happened before the human decided")
}

func TestHitlWithoutComponentNeverBlocks(t *testing.T) {
	env, _ := hitlEnv(t, hitl.Policy{})
	inv := invocation("h8")
	inv.Fallback = hitl.Fallback{Policy: hitl.AutoDecideThreshold, Score: 0.95, Threshold: 0.9}
	var start time.Time
	env.RegisterDelayedCallback(func() { start = env.Now() }, 0)
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: inv})
	o := outcomeOf(t, env)
	assert.Equal(t, hitl.Approve, o.Decision)
	assert.Equal(t, "no_hitl_component", o.FallbackReason)
	assert.WithinDuration(t, start, o.DecidedAt, time.Second, "§15.3: applied at once, not after the deadline")
}

func TestHitlExternalUnavailable(t *testing.T) {
	for _, policy := range []string{hitl.DenyByDefault, hitl.ExtendTimeout} {
		t.Run(policy, func(t *testing.T) {
			env, _ := hitlEnv(t, hitl.Policy{External: "127.0.0.1:1"})
			calls := 0
			var acts *activities.Activities
			env.OnActivity(acts.AskExternalHitl, mock.Anything, mock.Anything).Return(func(context.Context, hitl.Invocation) (hitl.Outcome, error) {
				calls++
				return hitl.Outcome{}, temporal.NewNonRetryableApplicationError("hitl_unavailable: down", "hitl_unavailable", errors.New("down"))
			})
			inv := invocation("h9")
			inv.Fallback = hitl.Fallback{Policy: policy}
			env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: inv})
			o := outcomeOf(t, env)
			assert.Equal(t, hitl.Deny, o.Decision)
			assert.True(t, o.Fallback)
			if policy == hitl.DenyByDefault {
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
	env, _ := hitlEnv(t, hitl.Policy{External: "127.0.0.1:1"})
	var acts *activities.Activities
	env.OnActivity(acts.AskExternalHitl, mock.Anything, mock.Anything).Return(hitl.Outcome{Decision: hitl.Approve, Rationale: "ok", DecidedBy: "external:x", Via: "external"}, nil)
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: invocation("h10")})
	o := outcomeOf(t, env)
	assert.Equal(t, hitl.Approve, o.Decision)
	assert.Equal(t, "external", o.Via)
	assert.Equal(t, "h10", o.InvocationID)
}

// requester stands for any SW4RM workflow that needs a human.
func requester(ctx workflow.Context, inv hitl.Invocation) (hitl.Outcome, error) {
	return workflows.RequestHITL(ctx, inv)
}

func TestRequestHITLFromAnotherWorkflow(t *testing.T) {
	env, _ := hitlEnv(t, policy)
	env.RegisterWorkflow(requester)
	inv := invocation("h11")
	env.RegisterDelayedCallback(func() {
		require.NoError(t, env.SignalWorkflowByID(hitl.WorkflowID("h11"), hitl.DecisionSignal,
			attestAt(env, hitl.Decision{InvocationID: "h11", Decision: "approve", Rationale: "fine", Operator: "alice"}, decisionKey)))
	}, time.Minute)
	env.ExecuteWorkflow(requester, inv)
	o := outcomeOf(t, env)
	assert.Equal(t, hitl.Approve, o.Decision)
	assert.Equal(t, "alice", o.DecidedBy)
}

func TestHitlRejectsInvalidInvocation(t *testing.T) {
	env, _ := hitlEnv(t, policy)
	inv := invocation("h12")
	inv.ReasonType = "HITL_REASON_UNSPECIFIED"
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: inv})
	require.True(t, env.IsWorkflowCompleted())
	require.Error(t, env.GetWorkflowError())
	assert.Contains(t, env.GetWorkflowError().Error(), "reason_type")
}
