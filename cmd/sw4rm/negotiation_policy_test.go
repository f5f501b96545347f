package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
)

// fakePolicies keeps a policy and profiles the way the server does, refusing a
// score_threshold above 1, and records the authorization it was called with.
type fakePolicies struct {
	schedulerpb.UnimplementedSchedulerPolicyServiceServer
	policy   *policypb.NegotiationPolicy
	profiles []*policypb.PolicyProfile
	tokens   []string
}

func (f *fakePolicies) seen(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.tokens = append(f.tokens, strings.Join(md.Get("authorization"), ","))
}

func (f *fakePolicies) SetNegotiationPolicy(ctx context.Context, req *schedulerpb.SetNegotiationPolicyRequest) (*schedulerpb.SetNegotiationPolicyResponse, error) {
	f.seen(ctx)
	if req.GetPolicy().GetScoreThreshold() > 1 {
		return &schedulerpb.SetNegotiationPolicyResponse{Reason: "validation_error: score_threshold 2 is outside 0..1"}, nil
	}
	f.policy = req.GetPolicy()
	return &schedulerpb.SetNegotiationPolicyResponse{Ok: true}, nil
}

func (f *fakePolicies) GetNegotiationPolicy(ctx context.Context, _ *schedulerpb.GetNegotiationPolicyRequest) (*schedulerpb.GetNegotiationPolicyResponse, error) {
	f.seen(ctx)
	return &schedulerpb.GetNegotiationPolicyResponse{Policy: f.policy}, nil
}

func (f *fakePolicies) SetPolicyProfiles(ctx context.Context, req *schedulerpb.SetPolicyProfilesRequest) (*schedulerpb.SetPolicyProfilesResponse, error) {
	f.seen(ctx)
	f.profiles = req.GetProfiles()
	return &schedulerpb.SetPolicyProfilesResponse{Ok: true}, nil
}

func (f *fakePolicies) ListPolicyProfiles(ctx context.Context, _ *schedulerpb.ListPolicyProfilesRequest) (*schedulerpb.ListPolicyProfilesResponse, error) {
	f.seen(ctx)
	return &schedulerpb.ListPolicyProfilesResponse{Profiles: f.profiles}, nil
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestNegotiationPolicyCommands(t *testing.T) {
	t.Setenv("SW4RM_OPERATOR_TOKEN", "")
	f := &fakePolicies{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := grpc.NewServer()
	schedulerpb.RegisterSchedulerPolicyServiceServer(g, f)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	srv := []string{"--server", lis.Addr().String(), "--token", "ops-token"}

	// Nothing set yet: get says so and prints nothing.
	out, errOut, err := runOut(t, append([]string{"negotiation", "policy", "get"}, srv...)...)
	require.NoError(t, err)
	assert.Empty(t, out)
	assert.Contains(t, errOut, "no base policy is set")

	// set reads protojson; get prints what set stored, which set reads back.
	file := writeFile(t, "policy.json", `{"max_rounds": 6, "score_threshold": 0.8, "hitl": {"mode": "PauseOnFinalAccept"}, "scoring": {"llm_weight": 0.25}}`)
	out, _, err = runOut(t, append([]string{"negotiation", "policy", "set", file}, srv...)...)
	require.NoError(t, err)
	assert.Contains(t, out, "base negotiation policy set")
	want := &policypb.NegotiationPolicy{MaxRounds: 6, ScoreThreshold: 0.8, Hitl: &policypb.NegotiationPolicy_Hitl{Mode: "PauseOnFinalAccept"},
		Scoring: &policypb.NegotiationPolicy_Scoring{LlmWeight: 0.25}}
	assert.True(t, proto.Equal(want, f.policy), "%v", f.policy)
	out, _, err = runOut(t, append([]string{"negotiation", "policy", "get"}, srv...)...)
	require.NoError(t, err)
	assert.Contains(t, out, `"score_threshold": 0.8`)
	again := writeFile(t, "again.json", out)
	_, _, err = runOut(t, append([]string{"negotiation", "policy", "set", again}, srv...)...)
	require.NoError(t, err)
	assert.True(t, proto.Equal(want, f.policy), "what get prints, set reads back")

	// A refusal is an error that carries the server's reason.
	_, _, err = runOut(t, append([]string{"negotiation", "policy", "set", writeFile(t, "bad.json", `{"score_threshold": 2}`)}, srv...)...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "refused: validation_error: score_threshold 2 is outside 0..1")
	// A typo in a field name is caught before anything is sent.
	_, _, err = runOut(t, append([]string{"negotiation", "policy", "set", writeFile(t, "typo.json", `{"score_treshold": 0.5}`)}, srv...)...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "score_treshold")

	// Profiles: the bare array or {"profiles": [...]}; profiles prints the latter.
	arr := writeFile(t, "profiles.json", `[{"name": "fast", "policy": {"max_rounds": 2}}, {"name": "thorough"}]`)
	out, _, err = runOut(t, append([]string{"negotiation", "policy", "profiles", "set", arr}, srv...)...)
	require.NoError(t, err)
	assert.Contains(t, out, "2 policy profile(s) set")
	require.Len(t, f.profiles, 2)
	assert.Equal(t, uint32(2), f.profiles[0].GetPolicy().GetMaxRounds())
	out, _, err = runOut(t, append([]string{"negotiation", "policy", "profiles"}, srv...)...)
	require.NoError(t, err)
	assert.Contains(t, out, `"profiles": [`)
	assert.Contains(t, out, `"name": "thorough"`)
	obj := writeFile(t, "profiles2.json", out)
	_, _, err = runOut(t, append([]string{"negotiation", "policy", "profiles", "set", obj}, srv...)...)
	require.NoError(t, err)
	require.Len(t, f.profiles, 2, "what profiles prints, profiles set reads back")
	_, _, err = runOut(t, append([]string{"negotiation", "policy", "set", arr}, srv...)...)
	require.Error(t, err, "a policy is an object, not an array")

	for _, tok := range f.tokens {
		assert.Equal(t, "Bearer ops-token", tok, "every call carries the operator token")
	}
	assert.Len(t, f.tokens, 8)
}
