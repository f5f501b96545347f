package test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// hitlAgentClient is a HITL agent written against the canonical RPCs alone: registered with
// a given agent_id, reading its stream into a channel and confirming every delivery.
type hitlAgentClient struct {
	*rawAgent
	in chan *commonpb.Envelope
}

func newHITLAgentClient(t *testing.T, sys *system, id string) *hitlAgentClient {
	t.Helper()
	conn, err := grpc.NewClient(sys.app.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	a := &hitlAgentClient{rawAgent: &rawAgent{id: id, conn: conn, router: routerpb.NewRouterServiceClient(conn)}, in: make(chan *commonpb.Envelope, 64)}
	resp, err := registrypb.NewRegistryServiceClient(conn).RegisterAgent(context.Background(), &registrypb.RegisterAgentRequest{Agent: &registrypb.AgentDescriptor{
		AgentId: id, Name: "approvals", Description: "decides HITL invocations", ModalitiesSupported: []string{"application/json"}}})
	require.NoError(t, err)
	require.True(t, resp.GetAccepted(), resp.GetReason())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := a.router.StreamIncoming(ctx, &routerpb.StreamRequest{AgentId: id})
	require.NoError(t, err)
	go func() {
		for {
			item, err := s.Recv()
			if err != nil {
				return
			}
			_, _ = a.router.AckDelivery(context.Background(), &routerpb.DeliveryAckRequest{AgentId: id, Seq: item.GetSeq(), MessageId: item.GetMsg().GetMessageId()})
			a.in <- item.GetMsg()
		}
	}()
	return a
}

// next returns the next envelope of the given type on the agent's stream, skipping others.
func (a *hitlAgentClient) next(t *testing.T, mt commonpb.MessageType, within time.Duration) *commonpb.Envelope {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case env := <-a.in:
			if env.GetMessageType() == mt {
				return env
			}
		case <-deadline:
			return nil
		}
	}
}

// decide sends the scheduler the §15.2 HITL_DECISION as documented: a HITL_INVOCATION
// envelope, recipient metadata "scheduler", content_type application/json with the
// invocation envelope named in sw4rm-in-response-to. It returns the answer and the
// sw4rm-error-code trailer.
func (a *hitlAgentClient) decide(t *testing.T, invocationMessageID, payload string) (*routerpb.SendMessageResponse, string) {
	t.Helper()
	ct := "application/json"
	if invocationMessageID != "" {
		ct += "; " + wire.InResponseToParam + "=" + invocationMessageID
	}
	resp, code, err := a.send(t, &commonpb.Envelope{
		MessageId: uuid.NewString(), ProducerId: a.id, CorrelationId: uuid.NewString(), MessageType: commonpb.MessageType_HITL_INVOCATION,
		ContentType: ct, Payload: []byte(payload), ContentLength: uint64(len(payload)),
	}, protocol.SchedulerID)
	require.NoError(t, err)
	return resp, code
}

// privilegedCall makes a PRIVILEGED tool call (§18.5: it waits for HITL with reason
// TOOL_PRIVILEGE_ESCALATION) in the background and returns its call id and result.
func privilegedCall(t *testing.T, sys *system) (string, chan error) {
	t.Helper()
	id := uniq(t, "call")
	done := make(chan error, 1)
	tc := toolpb.NewToolServiceClient(dialRaw(t, sys))
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, err := tc.Call(ctx, &toolpb.ToolCall{CallId: id, ProviderId: "fake", ToolName: "echo", Args: []byte(`{}`),
			Policy: &toolpb.ExecutionPolicy{PrivilegeLevel: "PRIVILEGED"}})
		done <- err
	}()
	return id, done
}

// TestHitlAgentOnMessagePlane (§15: "The Scheduler MUST issue HITL_INVOCATION messages";
// §15.2's shapes) on both stores, over the canonical RPCs alone: with SW4RM_HITL_AGENT set,
// a PRIVILEGED tool call raises a TOOL_PRIVILEGE_ESCALATION invocation, and the HITL agent
// receives it on its stream as a HITL_INVOCATION envelope from the scheduler. A decision sent
// by another agent is refused permission_denied, an invalid one validation_error; the HITL
// agent's approve is applied — attested by the decision key, through the door "message" —
// and the call runs. A repeat is taken and changes nothing; an operator's later decision
// finds the invocation decided.
func TestHitlAgentOnMessagePlane(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := hitlConfig(t, kind)
			cfg.HITLAgent = uniq(t, "approvals")
			cfg.ToolExecutors = map[string]tools.Executor{"fake": &fakeProvider{}}
			sys := start(t, cfg)
			h := newHITLAgentClient(t, sys, cfg.HITLAgent)
			other := newRawAgent(t, sys, "other")

			callID, done := privilegedCall(t, sys)
			id := pendingInvocation(t, sys, commonpb.HitlReasonType_TOOL_PRIVILEGE_ESCALATION, callID)
			env := h.next(t, commonpb.MessageType_HITL_INVOCATION, 20*time.Second)
			require.NotNil(t, env, "the HITL agent receives the invocation")
			assert.Equal(t, protocol.SchedulerID, env.GetProducerId())
			assert.Equal(t, hitl.InvocationMessageID(id), env.GetMessageId())
			assert.Equal(t, callID, env.GetCorrelationId())
			assert.Equal(t, "application/json", env.GetContentType())
			var p map[string]any
			require.NoError(t, json.Unmarshal(env.GetPayload(), &p))
			assert.Equal(t, id, p["invocation_id"])
			assert.Equal(t, "TOOL_PRIVILEGE_ESCALATION", p["reason_type"])
			assert.Equal(t, callID, p["correlation_id"])
			assert.Contains(t, p, "subject")
			assert.NotEmpty(t, p["context"].(map[string]any)["facts"])
			if actions, ok := p["proposed_actions"].([]any); assert.True(t, ok) && assert.Len(t, actions, 2) {
				assert.Contains(t, actions[0], "approve")
				assert.Contains(t, actions[1], "deny")
			}
			deadline, err := time.Parse(time.RFC3339, p["deadline_ts"].(string))
			require.NoError(t, err)
			assert.True(t, deadline.After(time.Now()))

			approve := `{"invocation_id":"` + id + `","decision":"approve","rationale":"one-off maintenance","patch_b64":null}`
			resp, code := other.decideAs(t, approve)
			assert.False(t, resp.GetAccepted())
			assert.Equal(t, "PERMISSION_DENIED", code, resp.GetReason())
			resp, code = h.decide(t, env.GetMessageId(), `{"invocation_id":"`+id+`","decision":"perhaps","rationale":"hmm"}`)
			assert.False(t, resp.GetAccepted())
			assert.Equal(t, "VALIDATION_ERROR", code, resp.GetReason())
			nack := h.next(t, commonpb.MessageType_ACKNOWLEDGEMENT, 10*time.Second)
			require.NotNil(t, nack, "the refusal is NACKed")
			assert.Contains(t, string(nack.GetPayload()), "VALIDATION_ERROR")
			select {
			case err := <-done:
				t.Fatalf("the privileged call ran before any valid decision: %v", err)
			case <-time.After(200 * time.Millisecond):
			}

			resp, code = h.decide(t, env.GetMessageId(), approve)
			require.True(t, resp.GetAccepted(), "%s %s", code, resp.GetReason())
			select {
			case err := <-done:
				require.NoError(t, err, "the approved call runs")
			case <-time.After(60 * time.Second):
				t.Fatal("the approved call did not run")
			}
			rec, err := sys.app.Store().HITL().GetInvocation(context.Background(), id)
			require.NoError(t, err)
			require.Equal(t, store.HITLDecided, rec.Status)
			var o hitl.Outcome
			require.NoError(t, json.Unmarshal(rec.Outcome, &o))
			assert.Equal(t, hitl.Approve, o.Decision)
			assert.Equal(t, cfg.HITLAgent, o.DecidedBy)
			assert.Equal(t, hitl.ViaMessage, o.Via)
			assert.Equal(t, auth.KeyID(auth.AlgorithmEd25519, ed25519.NewKeyFromSeed(decisionKeySeed).Public().(ed25519.PublicKey)), o.AttestedBy)
			recordHistory(t, sys.app.Temporal(), hitl.WorkflowID(id), "hitl_wait_agent_"+kind)

			resp, _ = h.decide(t, "", approve)
			assert.True(t, resp.GetAccepted(), "a repeat of the applied decision: %s", resp.GetReason())
			_, err = hitladminpb.NewHitlAdminServiceClient(dialRaw(t, sys)).Decide(
				metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer alice-token"),
				&hitladminpb.DecideRequest{InvocationId: id, Decision: "deny", Rationale: "too late"})
			require.Error(t, err)
			assert.Contains(t, err.Error(), "already decided")

			evs, err := sys.app.Store().Audit().List(context.Background(), store.AuditFilter{TypePrefix: "hitl."})
			require.NoError(t, err)
			seen := map[string]int{}
			for _, e := range evs {
				if string(e.Details) != "" && json.Valid(e.Details) {
					var d struct {
						InvocationID string `json:"invocation_id"`
					}
					_ = json.Unmarshal(e.Details, &d)
					if d.InvocationID == id {
						seen[e.Type]++
					}
				}
			}
			assert.Equal(t, 1, seen["hitl.sent"])
			assert.Equal(t, 2, seen["hitl.decision_refused"], "both refusals are in the invocation's history")
			assert.Equal(t, 1, seen["hitl.decided"])
		})
	}
}

// decideAs sends the HITL_DECISION from a plain agent, addressed as the HITL agent would.
func (a *rawAgent) decideAs(t *testing.T, payload string) (*routerpb.SendMessageResponse, string) {
	t.Helper()
	return (&hitlAgentClient{rawAgent: a}).decide(t, "", payload)
}

// TestHitlWithoutAgentSendsNothing: on both stores, without SW4RM_HITL_AGENT no agent is sent
// an invocation and none may decide one on the message plane (permission_denied); an
// operator still decides it.
func TestHitlWithoutAgentSendsNothing(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := hitlConfig(t, kind)
			cfg.ToolExecutors = map[string]tools.Executor{"fake": &fakeProvider{}}
			sys := start(t, cfg)
			h := newHITLAgentClient(t, sys, uniq(t, "approvals"))

			callID, done := privilegedCall(t, sys)
			id := pendingInvocation(t, sys, commonpb.HitlReasonType_TOOL_PRIVILEGE_ESCALATION, callID)
			resp, code := h.decide(t, hitl.InvocationMessageID(id), `{"invocation_id":"`+id+`","decision":"approve","rationale":"x"}`)
			assert.False(t, resp.GetAccepted())
			assert.Equal(t, "PERMISSION_DENIED", code, resp.GetReason())
			assert.Contains(t, resp.GetReason(), "no HITL agent")

			_, err := hitladminpb.NewHitlAdminServiceClient(dialRaw(t, sys)).Decide(
				metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer alice-token"),
				&hitladminpb.DecideRequest{InvocationId: id, Decision: "approve", Rationale: "operator approves"})
			require.NoError(t, err)
			select {
			case err := <-done:
				require.NoError(t, err, "the approved call runs")
			case <-time.After(60 * time.Second):
				t.Fatal("the approved call did not run")
			}
			assert.Nil(t, h.next(t, commonpb.MessageType_HITL_INVOCATION, 2*time.Second), "no agent is sent the invocation")
		})
	}
}
