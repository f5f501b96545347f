package frontend

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/mocks"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// hitlAdminHarness is a HitlAdminService over the memory store and a Temporal client that
// records the decision signals it is asked to send and plays the workflow: it verifies the
// decision as the workflow would and records the outcome in the store.
type hitlAdminHarness struct {
	svc     *hitlAdminService
	st      store.Store
	policy  hitl.Policy
	signals [][]byte // each signal's input, as Temporal's data converter encodes it
}

var (
	testDecisionKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	testHITLPolicy  = hitl.Policy{
		Operators: []hitl.Operator{
			{Name: "alice", TokenSHA256: hitl.HashToken("alice-token")},
			{Name: "carol", TokenSHA256: hitl.HashToken("carol-token"), Reasons: []string{"CONFLICT"}},
		},
		DecisionKeys: []ed25519.PublicKey{testDecisionKey.Public().(ed25519.PublicKey)},
	}
)

func newHitlAdminHarness(t *testing.T, key ed25519.PrivateKey) *hitlAdminHarness {
	t.Helper()
	st := memory.New()
	t.Cleanup(st.Close)
	tc := &mocks.Client{}
	h := &hitlAdminHarness{st: st, policy: testHITLPolicy}
	tc.On("SignalWorkflow", mock.Anything, mock.Anything, "", hitl.DecisionSignal, mock.Anything).Return(func(ctx context.Context, wfID, _, _ string, arg any) error {
		p, err := converter.GetDefaultDataConverter().ToPayload(arg)
		require.NoError(t, err)
		h.signals = append(h.signals, p.GetData())
		var d hitl.Decision
		require.NoError(t, json.Unmarshal(p.GetData(), &d))
		require.Equal(t, hitl.WorkflowID(d.InvocationID), wfID)
		rec, err := st.HITL().GetInvocation(ctx, d.InvocationID)
		require.NoError(t, err)
		keyID, err := h.policy.Authorize(d, rec.ReasonType, time.Now())
		require.NoError(t, err, "the workflow accepts what the frontend sends")
		out, _ := json.Marshal(hitl.Outcome{InvocationID: d.InvocationID, Decision: d.Decision, Rationale: d.Rationale,
			DecidedBy: d.Operator, AttestedBy: keyID, Via: d.Via, DecidedAt: time.Now()})
		return st.HITL().CompleteInvocation(ctx, d.InvocationID, out, time.Now())
	})
	log := slog.New(slog.DiscardHandler)
	s := &Server{store: st, temporal: tc, sink: audit.New(log, st.Audit()), log: log, cfg: Config{HITLPolicy: testHITLPolicy, HITLDecisionKey: key}}
	h.svc = &hitlAdminService{s: s}
	return h
}

// pending records a pending invocation of the reason type.
func (h *hitlAdminHarness) pending(t *testing.T, id, reason string) {
	t.Helper()
	inv, _ := json.Marshal(hitl.Invocation{InvocationID: id, ReasonType: reason})
	require.NoError(t, h.st.HITL().PutInvocation(t.Context(), store.HITLRecord{InvocationID: id, WorkflowID: hitl.WorkflowID(id),
		ReasonType: reason, Status: store.HITLPending, Invocation: inv, CreatedAt: time.Now(), Deadline: time.Now().Add(time.Hour)}))
}

// TestHitlAdminDecideSignalsNoToken: the decision the frontend signals — and so what
// Temporal keeps in the workflow's history — names the operator the bearer token proved and
// carries an attestation by the decision key, never the token.
func TestHitlAdminDecideSignalsNoToken(t *testing.T) {
	h := newHitlAdminHarness(t, testDecisionKey)
	h.pending(t, "inv-1", "SECURITY_APPROVAL")
	resp, err := h.svc.Decide(operatorCtx(t, "alice-token"), &hitladminpb.DecideRequest{InvocationId: "inv-1", Decision: "approve", Rationale: "scoped to one tenant"})
	require.NoError(t, err)
	require.Len(t, h.signals, 1)
	input := string(h.signals[0])
	assert.NotContains(t, input, "alice-token")
	assert.NotContains(t, input, `"token"`)
	assert.NotContains(t, input, hitl.HashToken("alice-token"))
	var d hitl.Decision
	require.NoError(t, json.Unmarshal(h.signals[0], &d))
	assert.Equal(t, "alice", d.Operator)
	assert.Equal(t, "cli", d.Via)
	require.NotNil(t, d.Attestation)
	assert.Equal(t, auth.KeyID(auth.AlgorithmEd25519, testDecisionKey.Public().(ed25519.PublicKey)), d.Attestation.KeyID)
	assert.WithinDuration(t, time.Now().Add(hitl.DefaultAttestationTTL), time.UnixMilli(d.Attestation.ExpiresAt), time.Minute, "short-lived")
	var o hitl.Outcome
	require.NoError(t, json.Unmarshal([]byte(resp.GetOutcomeJson()), &o))
	assert.Equal(t, "alice", o.DecidedBy)
}

// TestHitlAdminDecideTrustsTheInterceptorsOperator: an operator the auth interceptor already
// proved needs no bearer token; one who is not a HITL operator is refused, and so is a
// reason type the operator may not decide — before anything is signalled.
func TestHitlAdminDecideTrustsTheInterceptorsOperator(t *testing.T) {
	h := newHitlAdminHarness(t, testDecisionKey)
	h.pending(t, "inv-2", "SECURITY_APPROVAL")
	as := func(name string) context.Context {
		return auth.WithPrincipal(t.Context(), auth.Principal{Operator: name})
	}
	req := &hitladminpb.DecideRequest{InvocationId: "inv-2", Decision: "deny", Rationale: "too broad"}

	_, err := h.svc.Decide(as("mallory"), req)
	requireCode(t, codes.PermissionDenied, err)
	_, err = h.svc.Decide(as("carol"), req)
	requireCode(t, codes.PermissionDenied, err)
	assert.Contains(t, status.Convert(err).Message(), "may not decide SECURITY_APPROVAL")
	_, err = h.svc.Decide(t.Context(), req)
	requireCode(t, codes.Unauthenticated, err)
	assert.Empty(t, h.signals, "nothing was signalled")

	resp, err := h.svc.Decide(as("alice"), req)
	require.NoError(t, err)
	assert.Contains(t, resp.GetOutcomeJson(), `"decided_by":"alice"`)
	require.Len(t, h.signals, 1)
	assert.Contains(t, string(h.signals[0]), `"via":"grpc"`)
}

// TestHitlAdminDecideWithoutDecisionKey: a server without the decision key cannot vouch for a
// decision and says so rather than sending one the workflow would refuse.
func TestHitlAdminDecideWithoutDecisionKey(t *testing.T) {
	h := newHitlAdminHarness(t, nil)
	h.pending(t, "inv-3", "SECURITY_APPROVAL")
	_, err := h.svc.Decide(operatorCtx(t, "alice-token"), &hitladminpb.DecideRequest{InvocationId: "inv-3", Decision: "approve", Rationale: "x"})
	requireCode(t, codes.FailedPrecondition, err)
	assert.Contains(t, status.Convert(err).Message(), "SW4RM_HITL_DECISION_KEY_FILE")
	assert.Empty(t, h.signals)
}
