package activities

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/hitlsignals"
	"github.com/sw4rm/sw4rm-temporal/proto/hitlpb"
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
	e.keys = append(e.keys, md.Get(hitlsignals.IdempotencyKeyMetadata)...)
	e.mu.Unlock()
	return &hitlpb.HitlDecision{Action: string(hitlsignals.Approve), Rationale: "looks fine"}, nil
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

	acts := &Activities{HITL: hitlsignals.Policy{External: lis.Addr().String()}}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	inv := hitlsignals.Invocation{InvocationID: "inv-42", ReasonType: "SECURITY_APPROVAL", ProposedActions: []string{"approve"}}
	for range 2 {
		v, err := env.ExecuteActivity(acts.AskExternalHitl, inv)
		require.NoError(t, err)
		var out hitlsignals.Outcome
		require.NoError(t, v.Get(&out))
		require.Equal(t, hitlsignals.Approve, out.Decision)
	}
	ext.mu.Lock()
	defer ext.mu.Unlock()
	require.Equal(t, []string{"inv-42", "inv-42"}, ext.keys)
}
