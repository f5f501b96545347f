package workflows_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

const hitlAgent = "hitl-bot"

// withAgent is the test policy naming a HITL agent.
func withAgent(p hitl.Policy) hitl.Policy {
	p.Agent = hitlAgent
	return p
}

func register(t *testing.T, st store.Store, id string) {
	t.Helper()
	require.NoError(t, st.Registry().PutAgent(context.Background(), store.AgentRecord{
		Descriptor: &registrypb.AgentDescriptor{AgentId: id, Name: id}, RegisteredAt: time.Now(),
	}))
}

// inbox takes what waits in the agent's buffer.
func inbox(t *testing.T, st store.Store, id string) []*commonpb.Envelope {
	t.Helper()
	ds, err := st.Messages().Claim(context.Background(), store.ClaimRequest{AgentID: id, Limit: 10, Lease: time.Minute})
	require.NoError(t, err)
	var out []*commonpb.Envelope
	for _, d := range ds {
		out = append(out, d.Envelope)
	}
	return out
}

// messageDecision is d as the frontend signals a HITL agent's reply: through the message
// door, attested by the decision key.
func messageDecision(d hitl.Decision) hitl.Decision {
	d.Via = hitl.ViaMessage
	return d
}

// TestHitlAgentIsSentTheInvocation (§15: the Scheduler MUST issue HITL_INVOCATION messages):
// with a HITL agent in the policy, the wait puts the invocation into the agent's buffer as a
// HITL_INVOCATION envelope from the scheduler with §15.2's payload, once; the agent's decision,
// attested by the decision key through the message door, is the outcome — a message-door
// decision naming anyone else is refused. Without an agent in the policy nothing is sent.
func TestHitlAgentIsSentTheInvocation(t *testing.T) {
	env, st := hitlEnv(t, withAgent(policy))
	register(t, st, hitlAgent)
	env.RegisterDelayedCallback(func() {
		got := inbox(t, st, hitlAgent)
		require.Len(t, got, 1)
		m := got[0]
		assert.Equal(t, commonpb.MessageType_HITL_INVOCATION, m.GetMessageType())
		assert.Equal(t, protocol.SchedulerID, m.GetProducerId())
		assert.Equal(t, hitl.InvocationMessageID("a1"), m.GetMessageId())
		assert.Equal(t, "corr-a1", m.GetCorrelationId())
		var p hitl.InvocationPayload
		require.NoError(t, json.Unmarshal(m.GetPayload(), &p))
		assert.Equal(t, "a1", p.InvocationID)
		assert.Equal(t, "SECURITY_APPROVAL", p.ReasonType)
		assert.Equal(t, []string{"touches prod"}, p.Context.Facts)
		assert.Equal(t, env.Now().Add(9*time.Minute).UTC().Format(time.RFC3339), p.DeadlineTS)
	}, time.Minute)
	decide(env, 2*time.Minute, messageDecision(hitl.Decision{InvocationID: "a1", Decision: hitl.Approve, Rationale: "not an agent", Operator: "alice"}))
	decide(env, 3*time.Minute, messageDecision(hitl.Decision{InvocationID: "a1", Decision: "APPROVE", Rationale: "policy met", Operator: hitlAgent}))
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: invocation("a1")})
	o := outcomeOf(t, env)
	assert.Equal(t, hitl.Approve, o.Decision)
	assert.Equal(t, hitlAgent, o.DecidedBy)
	assert.Equal(t, hitl.ViaMessage, o.Via)
	assert.Equal(t, auth.KeyID(auth.AlgorithmEd25519, pubOf(decisionKey)), o.AttestedBy)
	assert.False(t, o.Fallback)
	evs, err := st.Audit().List(context.Background(), store.AuditFilter{CorrelationID: "corr-a1"})
	require.NoError(t, err)
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	assert.Equal(t, []string{"hitl.invoked", "hitl.sent", "hitl.decision_refused", "hitl.decided"}, types)
	assert.Empty(t, inbox(t, st, hitlAgent), "sent once")

	// No agent in the policy: nothing is sent, operators decide.
	env, st = hitlEnv(t, policy)
	register(t, st, hitlAgent)
	decide(env, time.Minute, hitl.Decision{InvocationID: "a2", Decision: hitl.Deny, Rationale: "no", Operator: "alice", Via: "cli"})
	env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: invocation("a2")})
	assert.Equal(t, "alice", outcomeOf(t, env).DecidedBy)
	assert.Empty(t, inbox(t, st, hitlAgent))
}

// TestHitlAgentUnavailable (§15.3, §15.4): a HITL agent counts as a HITL component, so an
// invocation with no operator and no external component waits for it; when it is not
// registered it is unavailable (hitl.unavailable) — the fallback applies at once if it is the
// only component, EXTEND_TIMEOUT sends it the invocation again when an extension ends, and
// operators, if there are any, still decide.
func TestHitlAgentUnavailable(t *testing.T) {
	t.Run("only component, deny by default", func(t *testing.T) {
		env, st := hitlEnv(t, withAgent(hitl.Policy{DecisionKeys: policy.DecisionKeys}))
		var start time.Time
		env.RegisterDelayedCallback(func() { start = env.Now() }, 0)
		env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: invocation("u1")})
		o := outcomeOf(t, env)
		assert.Equal(t, hitl.Deny, o.Decision)
		assert.Equal(t, "hitl_unavailable", o.FallbackReason)
		assert.True(t, o.HitlUnavailable)
		assert.WithinDuration(t, start, o.DecidedAt, time.Second, "detected at once")
		evs, err := st.Audit().List(context.Background(), store.AuditFilter{TypePrefix: "hitl.unavailable"})
		require.NoError(t, err)
		require.Len(t, evs, 1)
		assert.Contains(t, string(evs[0].Details), `"agent":"hitl-bot"`)
	})
	t.Run("only component, extended, then registered and decides", func(t *testing.T) {
		env, st := hitlEnv(t, withAgent(hitl.Policy{DecisionKeys: policy.DecisionKeys}))
		inv := invocation("u2")
		inv.Fallback = hitl.Fallback{Policy: hitl.ExtendTimeout}
		env.RegisterDelayedCallback(func() { register(t, st, hitlAgent) }, 5*time.Minute)
		env.RegisterDelayedCallback(func() {
			got := inbox(t, st, hitlAgent)
			require.Len(t, got, 1, "sent again once the first extension ended")
			assert.Equal(t, hitl.InvocationMessageID("u2"), got[0].GetMessageId())
		}, 11*time.Minute)
		decide(env, 12*time.Minute, messageDecision(hitl.Decision{InvocationID: "u2", Decision: hitl.Approve, Rationale: "ok", Operator: hitlAgent}))
		env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: inv})
		o := outcomeOf(t, env)
		assert.Equal(t, hitl.Approve, o.Decision)
		assert.Equal(t, hitlAgent, o.DecidedBy)
		assert.Equal(t, 2, o.Extensions, "one for the unavailable agent, one at the deadline that asked it again")
	})
	t.Run("operators remain", func(t *testing.T) {
		env, _ := hitlEnv(t, withAgent(policy))
		decide(env, 5*time.Minute, hitl.Decision{InvocationID: "u3", Decision: hitl.Approve, Rationale: "ok", Operator: "alice", Via: "cli"})
		env.ExecuteWorkflow(workflows.HitlWait, workflows.HitlWaitInput{Invocation: invocation("u3")})
		o := outcomeOf(t, env)
		assert.Equal(t, "alice", o.DecidedBy)
		assert.False(t, o.Fallback)
	})
}
