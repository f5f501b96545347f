package bridge

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/mocks"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

var replyKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))

// hitlReplyHarness is the scheduler's side over the memory store and a Temporal client that
// plays the HITL wait: it checks each signalled decision as the workflow does, with a policy
// naming the HITL agent and the decision key, and records the outcome in the store.
type hitlReplyHarness struct {
	s       *Scheduler
	st      store.Store
	signals int
	down    bool // the Temporal client fails
}

func newHitlReplyHarness(t *testing.T, agent string) *hitlReplyHarness {
	t.Helper()
	st := memory.New()
	t.Cleanup(st.Close)
	h := &hitlReplyHarness{st: st}
	policy := hitl.Policy{Agent: agent, DecisionKeys: []ed25519.PublicKey{replyKey.Public().(ed25519.PublicKey)}}
	tc := &mocks.Client{}
	tc.On("SignalWorkflow", mock.Anything, mock.Anything, "", hitl.DecisionSignal, mock.Anything).Return(func(ctx context.Context, wfID, _, _ string, arg any) error {
		if h.down {
			return errors.New("temporal unreachable")
		}
		h.signals++
		d, ok := arg.(hitl.Decision)
		require.True(t, ok, "%T", arg)
		require.Equal(t, hitl.WorkflowID(d.InvocationID), wfID)
		keyID, err := policy.Authorize(d, "CONFLICT", time.Now())
		require.NoError(t, err, "the wait accepts what the scheduler signals")
		out, _ := json.Marshal(hitl.Outcome{InvocationID: d.InvocationID, Decision: d.Decision, Rationale: d.Rationale,
			DecidedBy: d.Operator, AttestedBy: keyID, Via: d.Via, DecidedAt: time.Now()})
		return st.HITL().CompleteInvocation(ctx, d.InvocationID, out, time.Now())
	})
	h.s = NewScheduler(tc, nil, st, audit.New(slog.New(slog.DiscardHandler), st.Audit()))
	h.s.SetHITLAgent(agent, replyKey)
	return h
}

func (h *hitlReplyHarness) pending(t *testing.T, id string) {
	t.Helper()
	inv, _ := json.Marshal(hitl.Invocation{InvocationID: id, ReasonType: "CONFLICT"})
	require.NoError(t, h.st.HITL().PutInvocation(t.Context(), store.HITLRecord{InvocationID: id, WorkflowID: hitl.WorkflowID(id),
		ReasonType: "CONFLICT", Status: store.HITLPending, Invocation: inv, Deadline: time.Now().Add(time.Hour), CreatedAt: time.Now()}))
}

// send hands the scheduler a HITL_INVOCATION reply from producer, as the router does.
func (h *hitlReplyHarness) send(t *testing.T, producer, payload string) (*commonpb.ErrorCode, error) {
	t.Helper()
	env := &commonpb.Envelope{MessageId: uuid.NewString(), ProducerId: producer, CorrelationId: "c", MessageType: commonpb.MessageType_HITL_INVOCATION,
		ContentType: "application/json", Payload: []byte(payload), ContentLength: uint64(len(payload))}
	perr, err := h.s.Handlers()[commonpb.MessageType_HITL_INVOCATION](t.Context(), env)
	if perr != nil {
		return &perr.Code, err
	}
	return nil, err
}

// TestHitlReplies: the HITL agent's decision is attested and signalled to the invocation's
// wait, which accepts it; a repeat changes nothing, a different decision afterwards is
// refused validation_error; a reply from another agent, or to a deployment without a HITL
// agent, is refused permission_denied; a malformed one validation_error; one for an unknown
// invocation no_route; each refusal is audited as hitl.decision_refused. A Temporal failure is
// the handler's failure, not a refusal, so the agent retries.
func TestHitlReplies(t *testing.T) {
	h := newHitlReplyHarness(t, "hitl-bot")
	h.pending(t, "inv-1")
	approve := `{"invocation_id":"inv-1","decision":"approve","rationale":"low risk"}`

	code, err := h.send(t, "mallory", approve)
	require.NoError(t, err)
	require.NotNil(t, code)
	assert.Equal(t, commonpb.ErrorCode_PERMISSION_DENIED, *code)
	code, err = h.send(t, "hitl-bot", `{"invocation_id":"inv-1","decision":"perhaps","rationale":"x"}`)
	require.NoError(t, err)
	require.NotNil(t, code)
	assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, *code)
	code, err = h.send(t, "hitl-bot", `{"invocation_id":"nope","decision":"approve","rationale":"x"}`)
	require.NoError(t, err)
	require.NotNil(t, code)
	assert.Equal(t, commonpb.ErrorCode_NO_ROUTE, *code)
	assert.Zero(t, h.signals, "nothing refused reached the wait")

	h.down = true
	_, err = h.send(t, "hitl-bot", approve)
	require.ErrorContains(t, err, "temporal unreachable")
	h.down = false

	code, err = h.send(t, "hitl-bot", approve)
	require.NoError(t, err)
	require.Nil(t, code)
	assert.Equal(t, 1, h.signals)
	rec, err := h.st.HITL().GetInvocation(t.Context(), "inv-1")
	require.NoError(t, err)
	require.Equal(t, store.HITLDecided, rec.Status)
	var o hitl.Outcome
	require.NoError(t, json.Unmarshal(rec.Outcome, &o))
	assert.Equal(t, "hitl-bot", o.DecidedBy)
	assert.Equal(t, hitl.ViaMessage, o.Via)

	code, err = h.send(t, "hitl-bot", approve)
	require.NoError(t, err)
	assert.Nil(t, code, "a repeat of the applied decision is taken, and changes nothing")
	assert.Equal(t, 1, h.signals)
	code, err = h.send(t, "hitl-bot", `{"invocation_id":"inv-1","decision":"deny","rationale":"changed my mind"}`)
	require.NoError(t, err)
	require.NotNil(t, code)
	assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, *code)

	evs, err := h.st.Audit().List(t.Context(), store.AuditFilter{TypePrefix: "hitl."})
	require.NoError(t, err)
	var refused, received int
	for _, e := range evs {
		switch e.Type {
		case "hitl.decision_refused":
			refused++
		case "hitl.decision_received":
			received++
		}
	}
	assert.Equal(t, 4, refused)
	assert.Equal(t, 1, received)

	none := newHitlReplyHarness(t, "")
	none.pending(t, "inv-2")
	code, err = none.send(t, "hitl-bot", `{"invocation_id":"inv-2","decision":"approve","rationale":"x"}`)
	require.NoError(t, err)
	require.NotNil(t, code)
	assert.Equal(t, commonpb.ErrorCode_PERMISSION_DENIED, *code)
}
