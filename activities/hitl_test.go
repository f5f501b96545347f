package activities

import (
	"context"
	"crypto/ed25519"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/hitlpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// externalHITL is an external HITL component that approves and records the idempotency keys
// it was asked with.
type externalHITL struct {
	hitlpb.UnimplementedHitlServiceServer
	mu   sync.Mutex
	keys []string
}

func (e *externalHITL) Decide(ctx context.Context, _ *hitlpb.HitlInvocation) (*hitlpb.HitlDecision, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	e.mu.Lock()
	e.keys = append(e.keys, md.Get(wire.IdempotencyKey)...)
	e.mu.Unlock()
	return &hitlpb.HitlDecision{Action: string(hitl.Approve), Rationale: "looks fine"}, nil
}

// TestAskExternalHitlSendsTheInvocationAsKey: asking the external component again — an
// activity retry, or the workflow asking after the component was unavailable — names the
// same invocation, so a component that honours sw4rm-idempotency-key (a sw4rm server does)
// answers the question it was already asked instead of raising a second one.
func TestAskExternalHitlSendsTheInvocationAsKey(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	ext := &externalHITL{}
	hitlpb.RegisterHitlServiceServer(srv, ext)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	acts := &Activities{HITL: hitl.Policy{External: lis.Addr().String()}}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	inv := hitl.Invocation{InvocationID: "inv-42", ReasonType: "SECURITY_APPROVAL", ProposedActions: []string{"approve"}}
	for range 2 {
		v, err := env.ExecuteActivity(acts.AskExternalHitl, inv)
		require.NoError(t, err)
		var out hitl.Outcome
		require.NoError(t, v.Get(&out))
		require.Equal(t, hitl.Approve, out.Decision)
	}
	ext.mu.Lock()
	defer ext.mu.Unlock()
	require.Equal(t, []string{"inv-42", "inv-42"}, ext.keys)
}

// TestHitlPolicyLeavesTokenHashesOut: the policy a HITL wait records in its history carries
// no token hash — unless the run was recorded before attested decisions and still needs
// them (it did not ask to omit them) — while names, reason types and keys stay.
func TestHitlPolicyLeavesTokenHashesOut(t *testing.T) {
	st := memory.New()
	t.Cleanup(st.Close)
	policy := hitl.Policy{
		Operators:    []hitl.Operator{{Name: "alice", TokenSHA256: hitl.HashToken("alice-token"), Reasons: []string{"CONFLICT"}, PublicKeys: []ed25519.PublicKey{make([]byte, 32)}}},
		DecisionKeys: []ed25519.PublicKey{make([]byte, 32)},
	}
	acts := &Activities{Store: st, Sink: audit.New(nil, st.Audit()), HITL: policy}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	get := func(fn any, args ...any) hitl.Policy {
		t.Helper()
		v, err := env.ExecuteActivity(fn, args...)
		require.NoError(t, err)
		var p hitl.Policy
		require.NoError(t, v.Get(&p))
		return p
	}
	in := func(id string, omit bool) HitlInvocationInput {
		return HitlInvocationInput{Invocation: hitl.Invocation{InvocationID: id, ReasonType: "CONFLICT"}, WorkflowID: "hitl/" + id,
			Deadline: time.Now().Add(time.Hour), CreatedAt: time.Now(), OmitTokenHashes: omit}
	}
	for name, p := range map[string]hitl.Policy{
		"new run": get(acts.RecordHitlInvocation, in("i1", true)),
		"reload":  get(acts.LoadHitlPolicy),
	} {
		require.Len(t, p.Operators, 1, name)
		assert.Empty(t, p.Operators[0].TokenSHA256, name)
		assert.Equal(t, []string{"CONFLICT"}, p.Operators[0].Reasons, name)
		assert.Len(t, p.Operators[0].PublicKeys, 1, name)
		assert.Len(t, p.DecisionKeys, 1, name)
	}
	legacy := get(acts.RecordHitlInvocation, in("i2", false))
	assert.Equal(t, hitl.HashToken("alice-token"), legacy.Operators[0].TokenSHA256, "a legacy run keeps what its token decisions need")
	assert.NotEmpty(t, acts.HITL.Operators[0].TokenSHA256, "the worker's own policy is not changed")
}
