package hitl

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/signing"
)

// TestInvocationEnvelope: the HITL_INVOCATION envelope of an invocation carries §15.2's
// object — invocation_id, reason_type, correlation_id, subject, the context inline, the
// suggested and proposed actions, deadline_ts — under a message_id that is a UUID derived
// from the invocation id alone, so every send of one invocation is one message.
func TestInvocationEnvelope(t *testing.T) {
	inv := Invocation{
		InvocationID: "inv-7", ReasonType: "TOOL_PRIVILEGE_ESCALATION", CorrelationID: "call-1", RequestedBy: "tool/call-1",
		Subject:         Subject{AgentID: "coder", RepoID: "shop"},
		Context:         Context{Facts: []string{"wants PRIVILEGED"}, RiskNotes: []string{"root"}, Inference: map[string]string{"model": "m"}},
		ProposedActions: []string{"approve", "deny"}, SuggestedAction: "deny", Priority: -3, Timeout: time.Hour,
		Fallback: Fallback{Policy: DenyByDefault},
	}
	deadline := time.Date(2026, 11, 24, 13, 0, 0, 0, time.FixedZone("CET", 3600))
	env, err := InvocationEnvelope(inv, deadline)
	require.NoError(t, err)
	assert.Equal(t, commonpb.MessageType_HITL_INVOCATION, env.GetMessageType())
	assert.Equal(t, "call-1", env.GetCorrelationId())
	assert.Equal(t, "application/json", env.GetContentType())
	assert.Equal(t, uint64(len(env.GetPayload())), env.GetContentLength())
	id, err := uuid.Parse(env.GetMessageId())
	require.NoError(t, err, "a message_id is a UUID (§11)")
	assert.Equal(t, uuid.Version(5), id.Version())
	assert.Equal(t, InvocationMessageID("inv-7"), env.GetMessageId())
	assert.NotEqual(t, InvocationMessageID("inv-8"), env.GetMessageId())

	var got map[string]any
	require.NoError(t, json.Unmarshal(env.GetPayload(), &got))
	assert.Equal(t, map[string]any{
		"invocation_id": "inv-7", "reason_type": "TOOL_PRIVILEGE_ESCALATION", "correlation_id": "call-1", "requested_by": "tool/call-1",
		"subject":          map[string]any{"agent_id": "coder", "repo_id": "shop"},
		"context":          map[string]any{"facts": []any{"wants PRIVILEGED"}, "risk_notes": []any{"root"}, "inference": map[string]any{"model": "m"}},
		"proposed_actions": []any{"approve", "deny"}, "suggested_action": "deny", "priority": float64(-3),
		"deadline_ts": "2026-11-24T12:00:00Z",
	}, got, "§15.2's fields; no timeout, fallback or anything else of the workflow's")

	// Without a correlation, the invocation's workflow id stands in (§11 requires one).
	inv.CorrelationID = ""
	env, err = InvocationEnvelope(inv, deadline)
	require.NoError(t, err)
	assert.Equal(t, "hitl/inv-7", env.GetCorrelationId())
}

// reply is a HITL agent's reply envelope with the payload and content type given.
func reply(contentType, payload string) *commonpb.Envelope {
	return &commonpb.Envelope{MessageId: uuid.NewString(), ProducerId: "hitl-bot", CorrelationId: "call-1",
		MessageType: commonpb.MessageType_HITL_INVOCATION, ContentType: contentType, Payload: []byte(payload), ContentLength: uint64(len(payload))}
}

// TestDecisionOfEnvelope: §15.2's HITL_DECISION object becomes the producer's decision
// through the message door; a decision that is not one, a missing rationale, a modify
// without a patch, a body that is not JSON or not the object, and a sw4rm-in-response-to
// naming another envelope are refused with validation_error.
func TestDecisionOfEnvelope(t *testing.T) {
	d, perr := DecisionOfEnvelope(reply("application/json", `{"invocation_id":"inv-7","decision":"APPROVE","rationale":"low risk","patch_b64":null}`))
	require.Nil(t, perr)
	assert.Equal(t, Decision{InvocationID: "inv-7", Decision: Approve, Rationale: "low risk", Operator: "hitl-bot", Via: ViaMessage}, d)

	linked := "application/json; sw4rm-in-response-to=" + InvocationMessageID("inv-7")
	d, perr = DecisionOfEnvelope(reply(linked, `{"invocation_id":"inv-7","decision":"modify","rationale":"one tenant","patch_b64":"eyJ0ZW5hbnQiOjEyfQ=="}`))
	require.Nil(t, perr)
	assert.Equal(t, Modify, d.Decision)
	assert.Equal(t, []byte(`{"tenant":12}`), d.Patch)

	for name, tc := range map[string]struct{ contentType, payload, want string }{
		"unknown decision":     {"application/json", `{"invocation_id":"inv-7","decision":"maybe","rationale":"x"}`, `decision "maybe" is not one of`},
		"no rationale":         {"application/json", `{"invocation_id":"inv-7","decision":"deny"}`, "a rationale is required"},
		"modify, no patch":     {"application/json", `{"invocation_id":"inv-7","decision":"modify","rationale":"x"}`, "modify needs a patch"},
		"no invocation":        {"application/json", `{"decision":"deny","rationale":"x"}`, "invocation_id is required"},
		"not JSON":             {"application/json", `approve`, "not §15.2's HITL_DECISION"},
		"not base64":           {"application/json", `{"invocation_id":"inv-7","decision":"modify","rationale":"x","patch_b64":"%%"}`, "not §15.2's HITL_DECISION"},
		"text":                 {"text/plain", `{"invocation_id":"inv-7","decision":"deny","rationale":"x"}`, "is application/json"},
		"another envelope":     {"application/json; sw4rm-in-response-to=" + InvocationMessageID("inv-8"), `{"invocation_id":"inv-7","decision":"deny","rationale":"x"}`, "is not the HITL_INVOCATION of invocation inv-7"},
		"spaces in the id":     {"application/json", `{"invocation_id":"inv 7","decision":"deny","rationale":"x"}`, "is not an invocation id"},
		"response and request": {"application/json; sw4rm-in-response-to=x; sw4rm-response-timeout-ms=10", `{}`, "cannot both require a response and be one"},
	} {
		t.Run(name, func(t *testing.T) {
			_, perr := DecisionOfEnvelope(reply(tc.contentType, tc.payload))
			require.NotNil(t, perr)
			assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, perr.Code)
			assert.Contains(t, perr.Msg, tc.want)
		})
	}
}

// TestAuthorizeHITLAgent: a decision through the message door counts when it names the
// policy's HITL agent and a decision key signed it — for every reason type, though the agent
// is no operator; it is refused when no agent is configured, when it names anyone else (an
// operator included), and when the agent's name is signed through another door or by an
// operator's key.
func TestAuthorizeHITLAgent(t *testing.T) {
	p := testPolicy()
	p.Agent = "hitl-bot"
	d := Decision{InvocationID: "inv-1", Decision: Approve, Rationale: "fine", Operator: "hitl-bot", Via: ViaMessage}
	keyID, err := p.Authorize(attest(t, d, decisionKey, t0.Add(time.Minute)), "WORKTREE_OVERRIDE", t0)
	require.NoError(t, err)
	assert.Equal(t, signing.KeyID(signing.AlgorithmEd25519, pubOf(decisionKey)), keyID)

	_, err = testPolicy().Authorize(attest(t, d, decisionKey, t0.Add(time.Minute)), "CONFLICT", t0)
	assert.ErrorContains(t, err, `permission_denied: "hitl-bot" is not the deployment's HITL agent`)
	alice := d
	alice.Operator = "alice"
	_, err = p.Authorize(attest(t, alice, decisionKey, t0.Add(time.Minute)), "CONFLICT", t0)
	assert.ErrorContains(t, err, `"alice" is not the deployment's HITL agent`)
	cli := d
	cli.Via = "cli"
	_, err = p.Authorize(attest(t, cli, decisionKey, t0.Add(time.Minute)), "CONFLICT", t0)
	assert.ErrorContains(t, err, `unknown operator "hitl-bot"`)
	_, err = p.Authorize(attest(t, d, aliceKey, t0.Add(time.Minute)), "CONFLICT", t0)
	assert.ErrorContains(t, err, "is neither the deployment's decision key")
	_, err = p.Authorize(attest(t, d, decisionKey, t0.Add(-time.Second)), "CONFLICT", t0)
	assert.ErrorContains(t, err, "expired")
}
