package test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/frontend"
	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/proto/reasoningpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/reasoning"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// TestNegotiationPolicyRPCs covers SchedulerPolicyService's policy RPCs (§17.2) over gRPC on
// both stores, in required authentication mode: an operator sets the base policy and the
// profiles, which are stored and audited; an agent reads them but is refused on every set
// with PermissionDenied; a policy that breaks the rules answers ok=false with the reason and
// stores nothing, a request without a policy is InvalidArgument; `sw4rm negotiation policy`
// reads what was set; the methods not built yet answer Unimplemented. The builtin reasoning
// engine answers EvaluateDebate and Summarize through the same frontend.
func TestNegotiationPolicyRPCs(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, authConfig(t, kind, auth.Required))
			ops := operatorContext()
			ctx := context.Background()
			opsClient := schedulerpb.NewSchedulerPolicyServiceClient(dialRaw(t, sys))
			agent := dialSigned(t, sys, "negotiator")
			agentClient := schedulerpb.NewSchedulerPolicyServiceClient(agent.Conn())
			st := sys.app.Store().NegotiationPolicies()

			// Nothing set yet.
			got, err := agentClient.GetNegotiationPolicy(ctx, &schedulerpb.GetNegotiationPolicyRequest{})
			require.NoError(t, err)
			assert.Nil(t, got.GetPolicy())

			// The operator sets the base policy; the agent reads it back.
			base := &policypb.NegotiationPolicy{MaxRounds: 6, ScoreThreshold: 0.8, DiffTolerance: 0.1, RoundTimeoutMs: 60000,
				TokenBudgetPerRound: 2000, TotalTokenBudget: 10000, OscillationLimit: 2,
				Hitl:    &policypb.NegotiationPolicy_Hitl{Mode: "PauseOnFinalAccept"},
				Scoring: &policypb.NegotiationPolicy_Scoring{RequireSchemaValid: true, RequireExamplesPass: true, LlmWeight: 0.3}}
			set, err := opsClient.SetNegotiationPolicy(ops, &schedulerpb.SetNegotiationPolicyRequest{Policy: base})
			require.NoError(t, err)
			require.True(t, set.GetOk(), set.GetReason())
			got, err = agentClient.GetNegotiationPolicy(ctx, &schedulerpb.GetNegotiationPolicyRequest{})
			require.NoError(t, err)
			assert.True(t, proto.Equal(base, got.GetPolicy()), "%v", got.GetPolicy())
			stored, err := st.GetBasePolicy(ctx)
			require.NoError(t, err)
			assert.True(t, proto.Equal(base, stored))

			// A policy that breaks the rules: ok=false with every problem, nothing stored.
			set, err = opsClient.SetNegotiationPolicy(ops, &schedulerpb.SetNegotiationPolicyRequest{Policy: &policypb.NegotiationPolicy{
				ScoreThreshold: 1.5, Hitl: &policypb.NegotiationPolicy_Hitl{Mode: "Sometimes"}}})
			require.NoError(t, err)
			assert.False(t, set.GetOk())
			assert.True(t, strings.HasPrefix(set.GetReason(), "validation_error: "), set.GetReason())
			assert.Contains(t, set.GetReason(), "score_threshold 1.5")
			assert.Contains(t, set.GetReason(), `hitl.mode "Sometimes"`)
			stored, err = st.GetBasePolicy(ctx)
			require.NoError(t, err)
			assert.True(t, proto.Equal(base, stored), "a refused policy stores nothing")

			// A request without a policy is malformed.
			var trailer metadata.MD
			_, err = opsClient.SetNegotiationPolicy(ops, &schedulerpb.SetNegotiationPolicyRequest{}, grpc.Trailer(&trailer))
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			assert.True(t, strings.HasPrefix(status.Convert(err).Message(), "validation_error: policy is required"), "%v", err)
			assert.Equal(t, []string{"VALIDATION_ERROR"}, trailer.Get(wire.ErrorCodeTrailer))

			// Profiles: replaced whole, listed by name.
			profiles := []*policypb.PolicyProfile{
				{Name: "thorough", Policy: &policypb.NegotiationPolicy{MaxRounds: 10, ScoreThreshold: 0.9}},
				{Name: "fast", Policy: &policypb.NegotiationPolicy{MaxRounds: 2}},
			}
			sp, err := opsClient.SetPolicyProfiles(ops, &schedulerpb.SetPolicyProfilesRequest{Profiles: profiles})
			require.NoError(t, err)
			require.True(t, sp.GetOk(), sp.GetReason())
			list, err := agentClient.ListPolicyProfiles(ctx, &schedulerpb.ListPolicyProfilesRequest{})
			require.NoError(t, err)
			require.Len(t, list.GetProfiles(), 2)
			assert.True(t, proto.Equal(profiles[1], list.GetProfiles()[0]), "fast first")
			assert.True(t, proto.Equal(profiles[0], list.GetProfiles()[1]))
			sp, err = opsClient.SetPolicyProfiles(ops, &schedulerpb.SetPolicyProfilesRequest{Profiles: []*policypb.PolicyProfile{{Name: "fast"}, {Name: "fast"}}})
			require.NoError(t, err)
			assert.False(t, sp.GetOk())
			assert.Contains(t, sp.GetReason(), `validation_error: profile "fast" is given twice`)
			sp, err = opsClient.SetPolicyProfiles(ops, &schedulerpb.SetPolicyProfilesRequest{Profiles: []*policypb.PolicyProfile{{Name: "fast"}}})
			require.NoError(t, err)
			require.True(t, sp.GetOk(), sp.GetReason())
			_, err = st.GetProfile(ctx, "thorough")
			require.ErrorIs(t, err, store.ErrNotFound, "a set replaces every profile")

			// An agent may not set either.
			t.Run("agent refused on set", func(t *testing.T) {
				var tr metadata.MD
				_, err := agentClient.SetNegotiationPolicy(ctx, &schedulerpb.SetNegotiationPolicyRequest{Policy: &policypb.NegotiationPolicy{MaxRounds: 50}}, grpc.Trailer(&tr))
				refused(t, sys, err, tr, codes.PermissionDenied, schedulerpb.SchedulerPolicyService_SetNegotiationPolicy_FullMethodName)
				_, err = agentClient.SetPolicyProfiles(ctx, &schedulerpb.SetPolicyProfilesRequest{}, grpc.Trailer(&tr))
				refused(t, sys, err, tr, codes.PermissionDenied, schedulerpb.SchedulerPolicyService_SetPolicyProfiles_FullMethodName)
				stored, err := st.GetBasePolicy(ctx)
				require.NoError(t, err)
				assert.True(t, proto.Equal(base, stored), "nothing changed")
				ps, err := st.ListProfiles(ctx)
				require.NoError(t, err)
				assert.Len(t, ps, 1, "nothing changed")
				// Anonymous callers are refused even reads in required mode.
				_, err = schedulerpb.NewSchedulerPolicyServiceClient(dialRaw(t, sys)).GetNegotiationPolicy(ctx, &schedulerpb.GetNegotiationPolicyRequest{})
				assert.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
			})

			// Every stored set is audited with the operator as actor; the refusal too.
			require.Eventually(t, func() bool { // audit rows are written asynchronously
				evs, err := sys.app.Store().Audit().List(ctx, store.AuditFilter{TypePrefix: "negotiation.policy_"})
				if err != nil {
					return false
				}
				n := map[string]int{}
				for _, e := range evs {
					if e.Actor == "operator:"+authOperator {
						n[e.Type]++
					}
				}
				return n[frontend.AuditNegotiationPolicySet] == 3 && n[frontend.AuditNegotiationPolicyRefused] == 2
			}, 10*time.Second, 20*time.Millisecond, "three sets and two refusals audited")

			// The CLI reads what was set.
			out, err := runCLIArgs(t, sys, authOperatorToken, "negotiation", "policy", "get", "--server", sys.app.GRPCAddr())
			require.NoError(t, err, out)
			var printed map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &printed), out)
			assert.Equal(t, map[string]any{"mode": "PauseOnFinalAccept"}, printed["hitl"])
			file := filepath.Join(t.TempDir(), "policy.json")
			require.NoError(t, os.WriteFile(file, []byte(`{"max_rounds": 4}`), 0o600))
			out, err = runCLIArgs(t, sys, authOperatorToken, "negotiation", "policy", "set", file, "--server", sys.app.GRPCAddr())
			require.NoError(t, err, out)
			got, err = agentClient.GetNegotiationPolicy(ctx, &schedulerpb.GetNegotiationPolicyRequest{})
			require.NoError(t, err)
			assert.True(t, proto.Equal(&policypb.NegotiationPolicy{MaxRounds: 4}, got.GetPolicy()), "%v", got.GetPolicy())

			// An effective policy exists only for a negotiation that was opened.
			_, err = agentClient.GetEffectivePolicy(ctx, &schedulerpb.GetEffectivePolicyRequest{NegotiationId: "n1"})
			assert.Equal(t, codes.NotFound, status.Code(err), "%v", err)
			assert.Contains(t, err.Error(), "no_route", "%v", err)

			// The reasoning engine (builtin) through the frontend, as the agent.
			rp := reasoningpb.NewReasoningProxyClient(agent.Conn())
			deb, err := rp.EvaluateDebate(ctx, &reasoningpb.DebateEvaluateRequest{NegotiationId: "n1", Intensity: "HIGH",
				ProposalA: `{"price": 10, "qty": 5, "terms": "net30"}`, ProposalB: `{"terms": "net30", "qty": 5, "price": 12}`})
			require.NoError(t, err)
			assert.Equal(t, 2.0/4, deb.GetConfidenceScore())
			assert.Contains(t, deb.GetNotes(), "engine "+reasoning.BuiltinModel)
			assert.Contains(t, deb.GetNotes(), "differ at /price")
			sum, err := rp.Summarize(ctx, &reasoningpb.SummarizeRequest{SessionId: "n1", MaxTokens: 12, Segments: []*reasoningpb.TextSegment{
				{Kind: "bob", Content: "Too expensive. Lower the price.", Seq: 2}, {Kind: "alice", Content: "Price is 10. Quantity 5.", Seq: 1}}})
			require.NoError(t, err)
			assert.Equal(t, "alice: Price is 10.\nbob: Too expensive.", sum.GetSummary())
			assert.LessOrEqual(t, sum.GetTokens(), uint32(12))
			assert.Equal(t, reasoning.BuiltinModel, sum.GetModel())
			_, err = rp.EvaluateDebate(ctx, &reasoningpb.DebateEvaluateRequest{ProposalA: "x"}, grpc.Trailer(&trailer))
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), "validation_error: proposal_b is required")
			assert.Equal(t, []string{"VALIDATION_ERROR"}, trailer.Get(wire.ErrorCodeTrailer))
			_, err = rp.Summarize(ctx, &reasoningpb.SummarizeRequest{SessionId: "n1"}, grpc.Trailer(&trailer))
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), "validation_error: segments are required")
		})
	}
}

// fakeReasoner is an external reasoning engine: a ReasoningProxy with fixed answers that
// records the negotiations it was asked about.
type fakeReasoner struct {
	reasoningpb.UnimplementedReasoningProxyServer
	asked chan string
}

func (f *fakeReasoner) EvaluateDebate(_ context.Context, req *reasoningpb.DebateEvaluateRequest) (*reasoningpb.DebateEvaluateResponse, error) {
	f.asked <- req.GetNegotiationId()
	return &reasoningpb.DebateEvaluateResponse{ConfidenceScore: 0.77, Notes: "external model"}, nil
}

func (f *fakeReasoner) Summarize(_ context.Context, req *reasoningpb.SummarizeRequest) (*reasoningpb.SummarizeResponse, error) {
	f.asked <- req.GetSessionId()
	return &reasoningpb.SummarizeResponse{Summary: "external summary", Tokens: 3, CostCents: 0.2, Model: "fake-llm/1"}, nil
}

// TestReasoningExternalEngine: with SW4RM_REASONING_EXTERNAL the frontend forwards
// EvaluateDebate and Summarize to that ReasoningProxy, and answers Unavailable once it is
// gone; input the frontend refuses never reaches it.
func TestReasoningExternalEngine(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := &fakeReasoner{asked: make(chan string, 10)}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			g := grpc.NewServer()
			reasoningpb.RegisterReasoningProxyServer(g, f)
			go func() { _ = g.Serve(lis) }()
			t.Cleanup(g.Stop)

			cfg := newConfig(t, kind)
			cfg.ReasoningExternal = lis.Addr().String()
			sys := start(t, cfg)
			rp := reasoningpb.NewReasoningProxyClient(dialRaw(t, sys))
			ctx := context.Background()

			deb, err := rp.EvaluateDebate(ctx, &reasoningpb.DebateEvaluateRequest{NegotiationId: "n-ext", ProposalA: "a", ProposalB: "b"})
			require.NoError(t, err)
			assert.Equal(t, 0.77, deb.GetConfidenceScore())
			assert.Equal(t, "external model", deb.GetNotes())
			assert.Equal(t, "n-ext", <-f.asked)
			sum, err := rp.Summarize(ctx, &reasoningpb.SummarizeRequest{SessionId: "s-ext", Segments: []*reasoningpb.TextSegment{{Content: "x"}}, Mode: "abstractive"})
			require.NoError(t, err)
			assert.Equal(t, "fake-llm/1", sum.GetModel())
			assert.Equal(t, "s-ext", <-f.asked)

			_, err = rp.EvaluateDebate(ctx, &reasoningpb.DebateEvaluateRequest{NegotiationId: "n-bad", ProposalA: "a"})
			assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			assert.Empty(t, f.asked, "refused input never reaches the engine")

			g.Stop() // the external engine goes away
			_, err = rp.EvaluateDebate(ctx, &reasoningpb.DebateEvaluateRequest{NegotiationId: "n-down", ProposalA: "a", ProposalB: "b"})
			require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), "external reasoning engine "+lis.Addr().String())
		})
	}
}
