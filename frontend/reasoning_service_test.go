package frontend

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sw4rm/sw4rm-temporal/proto/reasoningpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/inference"
	"github.com/sw4rm/sw4rm-temporal/reasoning"
)

var _ reasoningpb.ReasoningProxyServer = (*reasoningService)(nil)

// fakeEngine answers as and err, and records the scopes it saw.
type fakeEngine struct {
	as   inference.Assessment
	err  error
	seen [][2]inference.Scope
}

func (f *fakeEngine) CheckParallelism(a, b inference.Scope) (inference.Assessment, error) {
	f.seen = append(f.seen, [2]inference.Scope{a, b})
	return f.as, f.err
}

func TestReasoningCheckParallelism(t *testing.T) {
	cases := []struct {
		name  string
		a, b  string
		conf  float64
		notes []string
	}{
		{"different repos", "repo:alpha path:src", "repo:beta path:src", 0.95,
			[]string{"engine sw4rm-rules/v1", "rule different_repos (confidence 0.95)", "overlaps: none"}},
		{"same repo, disjoint paths", "repo:r path:src/ui/**", `{"repo": "r", "paths": ["docs"]}`, 0.8,
			[]string{"rule disjoint (confidence 0.8)", "overlaps: none"}},
		{"overlapping glob", "repo:r path:src/ui/**", "repo:r path:src/ui/button.go", 0.2,
			[]string{"rule overlapping_paths (confidence 0.2)", "overlaps: path src/ui/** overlaps src/ui/button.go"}},
		{"identical resource", "resource:users-db", "resource:users-db path:x", 0.05,
			[]string{"rule identical_resource", "overlaps: resource users-db"}},
		{"free text", "update the billing docs", "refactor billing", 0.4,
			[]string{"rule free_text_shared", "overlaps: word billing"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &reasoningService{engine: &inference.RuleEngine{}}
			resp, err := r.CheckParallelism(t.Context(), &reasoningpb.ParallelismCheckRequest{ScopeA: tc.a, ScopeB: tc.b})
			require.NoError(t, err)
			assert.Equal(t, tc.conf, resp.GetConfidenceScore())
			for _, n := range tc.notes {
				assert.Contains(t, resp.GetNotes(), n)
			}
		})
	}
}

func TestReasoningCheckParallelismDefaultsToRuleEngine(t *testing.T) {
	r := &reasoningService{} // nil engine
	resp, err := r.CheckParallelism(t.Context(), &reasoningpb.ParallelismCheckRequest{ScopeA: "repo:a", ScopeB: "repo:b"})
	require.NoError(t, err)
	assert.Equal(t, 0.95, resp.GetConfidenceScore())
	assert.Contains(t, resp.GetNotes(), inference.RuleEngineVersion)
}

func TestReasoningCheckParallelismInvalidScopes(t *testing.T) {
	cases := []struct {
		name  string
		a, b  string
		parts []string
	}{
		{"empty scope_a", "", "repo:r", []string{"validation_error: scope_a:", "scope is required (§9.2)"}},
		{"blank scope_b", "repo:r", "   ", []string{"validation_error: scope_b:", "scope is required (§9.2)"}},
		{"unparsable scope_a", "path:../etc", "repo:r", []string{"validation_error: scope_a:", "invalid scope", "leaves the repository root"}},
		{"unparsable scope_b", "repo:r", `{"pahts": []}`, []string{"validation_error: scope_b:", "pahts"}},
		{"unterminated quote", `path:"x`, "repo:r", []string{"scope_a", "unterminated double quote"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eng := &fakeEngine{}
			r := &reasoningService{engine: eng}
			resp, err := r.CheckParallelism(t.Context(), &reasoningpb.ParallelismCheckRequest{ScopeA: tc.a, ScopeB: tc.b})
			require.Error(t, err)
			assert.Nil(t, resp)
			assert.Equal(t, codes.InvalidArgument, toStatus(t.Context(), err).Code(), "%v", err)
			for _, p := range tc.parts {
				assert.Contains(t, toStatus(t.Context(), err).Message(), p)
			}
			assert.Empty(t, eng.seen, "the engine is not consulted for invalid scopes")
		})
	}
}

func TestReasoningCheckParallelismEngineFailures(t *testing.T) {
	cases := []struct {
		name string
		eng  *fakeEngine
		code codes.Code
		msg  string
	}{
		{"plain error is Unavailable", &fakeEngine{err: errors.New("model server down")}, codes.Unavailable,
			"inference engine unavailable: model server down"},
		{"gRPC status keeps its code", &fakeEngine{err: status.Error(codes.DeadlineExceeded, "too slow")}, codes.DeadlineExceeded, "too slow"},
		{"confidence above 1", &fakeEngine{as: inference.Assessment{Confidence: 1.2, Engine: "fake/v0"}}, codes.Internal,
			`inference engine "fake/v0" returned confidence 1.2 outside [0, 1]`},
		{"negative confidence", &fakeEngine{as: inference.Assessment{Confidence: -0.1}}, codes.Internal, "outside [0, 1]"},
		{"NaN confidence", &fakeEngine{as: inference.Assessment{Confidence: math.NaN()}}, codes.Internal, "NaN outside [0, 1]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &reasoningService{engine: tc.eng}
			resp, err := r.CheckParallelism(t.Context(), &reasoningpb.ParallelismCheckRequest{ScopeA: "repo:a", ScopeB: "repo:b"})
			assert.Nil(t, resp)
			assert.Equal(t, tc.code, toStatus(t.Context(), err).Code(), "%v", err)
			assert.Contains(t, toStatus(t.Context(), err).Message(), tc.msg)
			require.Len(t, tc.eng.seen, 1)
			assert.Equal(t, []string{"a"}, tc.eng.seen[0][0].Repos)
			assert.Equal(t, []string{"b"}, tc.eng.seen[0][1].Repos)
		})
	}
}

func TestReasoningCheckParallelismNotesOfOtherEngines(t *testing.T) {
	eng := &fakeEngine{as: inference.Assessment{Confidence: 0.3, Rule: "llm_judgement", Overlaps: []string{"table users"}, Notes: "both migrate users", Engine: "llm/v2"}}
	r := &reasoningService{engine: eng}
	resp, err := r.CheckParallelism(t.Context(), &reasoningpb.ParallelismCheckRequest{ScopeA: "resource:users", ScopeB: "resource:accounts"})
	require.NoError(t, err)
	assert.Equal(t, 0.3, resp.GetConfidenceScore())
	assert.Equal(t, "engine llm/v2; rule llm_judgement (confidence 0.3); both migrate users; overlaps: table users", resp.GetNotes())
}

func TestReasoningCheckParallelismLogs(t *testing.T) {
	var buf bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&buf, nil))}
	r := &reasoningService{s: s}
	_, err := r.CheckParallelism(t.Context(), &reasoningpb.ParallelismCheckRequest{ScopeA: "repo:r path:a", ScopeB: "repo:r path:a/b"})
	require.NoError(t, err)
	out := buf.String()
	for _, want := range []string{"inference check_parallelism", "engine=sw4rm-rules/v1", "rule=overlapping_paths", "confidence_score=0.2", `scope_a="repo:r path:a"`} {
		assert.Contains(t, out, want)
	}

	buf.Reset()
	r.engine = &fakeEngine{err: errors.New("boom")}
	_, err = r.CheckParallelism(t.Context(), &reasoningpb.ParallelismCheckRequest{ScopeA: "repo:r", ScopeB: "repo:s"})
	require.Error(t, err)
	assert.Contains(t, buf.String(), "inference check_parallelism failed")
	assert.Contains(t, buf.String(), "error=boom")
}

// fakeReasoning answers debate/summary and err, and counts the calls.
type fakeReasoning struct {
	debate  *reasoningpb.DebateEvaluateResponse
	summary *reasoningpb.SummarizeResponse
	err     error
	calls   int
}

func (f *fakeReasoning) EvaluateDebate(context.Context, *reasoningpb.DebateEvaluateRequest) (*reasoningpb.DebateEvaluateResponse, error) {
	f.calls++
	return f.debate, f.err
}

func (f *fakeReasoning) Summarize(context.Context, *reasoningpb.SummarizeRequest) (*reasoningpb.SummarizeResponse, error) {
	f.calls++
	return f.summary, f.err
}

func TestReasoningEvaluateDebateAndSummarizeWithTheBuiltinEngine(t *testing.T) {
	r := &reasoningService{} // no configuration: the builtin engine
	resp, err := r.EvaluateDebate(t.Context(), &reasoningpb.DebateEvaluateRequest{NegotiationId: "n1",
		ProposalA: `{"price": 10, "qty": 5}`, ProposalB: `{"qty": 5, "price": 12}`, Intensity: "MEDIUM"})
	require.NoError(t, err)
	assert.Equal(t, 1.0/3, resp.GetConfidenceScore())
	assert.Contains(t, resp.GetNotes(), "engine "+reasoning.BuiltinModel)
	assert.Contains(t, resp.GetNotes(), "differ at /price")

	sum, err := r.Summarize(t.Context(), &reasoningpb.SummarizeRequest{SessionId: "s1", MaxTokens: 9, Segments: []*reasoningpb.TextSegment{
		{Kind: "bob", Content: "I disagree. Too costly.", Seq: 2}, {Kind: "alice", Content: "Ship it. Now.", Seq: 1}}})
	require.NoError(t, err)
	assert.Equal(t, "alice: Ship it.\nbob: I disagree.", sum.GetSummary())
	assert.Equal(t, reasoning.BuiltinModel, sum.GetModel())
	assert.Equal(t, uint32(8), sum.GetTokens())
}

func TestReasoningEvaluateDebateAndSummarizeRefuseBadInput(t *testing.T) {
	eng := &fakeReasoning{}
	r := &reasoningService{s: &Server{cfg: Config{Reasoning: eng}}}
	for name, tc := range map[string]struct {
		call func() error
		msg  string
	}{
		"empty proposal_a": {func() error {
			_, err := r.EvaluateDebate(t.Context(), &reasoningpb.DebateEvaluateRequest{ProposalB: "b"})
			return err
		}, "validation_error: proposal_a is required"},
		"blank proposal_b": {func() error {
			_, err := r.EvaluateDebate(t.Context(), &reasoningpb.DebateEvaluateRequest{ProposalA: "a", ProposalB: "\t"})
			return err
		}, "validation_error: proposal_b is required"},
		"unknown intensity": {func() error {
			_, err := r.EvaluateDebate(t.Context(), &reasoningpb.DebateEvaluateRequest{ProposalA: "a", ProposalB: "b", Intensity: "max"})
			return err
		}, `validation_error: intensity "max"`},
		"no segments": {func() error {
			_, err := r.Summarize(t.Context(), &reasoningpb.SummarizeRequest{SessionId: "s"})
			return err
		}, "validation_error: segments are required"},
		"only blank segments": {func() error {
			_, err := r.Summarize(t.Context(), &reasoningpb.SummarizeRequest{Segments: []*reasoningpb.TextSegment{{Content: "  "}}})
			return err
		}, "validation_error: segments: all 1 are blank"},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.call()
			assert.Equal(t, codes.InvalidArgument, toStatus(t.Context(), err).Code(), "%v", err)
			assert.Contains(t, toStatus(t.Context(), err).Message(), tc.msg)
		})
	}
	assert.Zero(t, eng.calls, "the engine is not asked about bad input")
}

func TestReasoningEvaluateDebateAndSummarizeEngineFailures(t *testing.T) {
	cases := []struct {
		name string
		eng  *fakeReasoning
		code codes.Code
		msg  string
	}{
		{"plain error is Unavailable", &fakeReasoning{err: errors.New("model server down")}, codes.Unavailable, "inference engine unavailable: model server down"},
		{"gRPC status keeps its code", &fakeReasoning{err: status.Error(codes.Unavailable, "external engine gone")}, codes.Unavailable, "external engine gone"},
		{"engine refusal stays InvalidArgument", &fakeReasoning{err: status.Error(codes.InvalidArgument, "validation_error: mode x")}, codes.InvalidArgument, "mode x"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &reasoningService{s: &Server{cfg: Config{Reasoning: tc.eng}}}
			_, err := r.EvaluateDebate(t.Context(), &reasoningpb.DebateEvaluateRequest{ProposalA: "a", ProposalB: "b"})
			assert.Equal(t, tc.code, toStatus(t.Context(), err).Code(), "%v", err)
			assert.Contains(t, toStatus(t.Context(), err).Message(), tc.msg)
			_, err = r.Summarize(t.Context(), &reasoningpb.SummarizeRequest{Segments: []*reasoningpb.TextSegment{{Content: "x"}}})
			assert.Equal(t, tc.code, toStatus(t.Context(), err).Code(), "%v", err)
			assert.Equal(t, 2, tc.eng.calls)
		})
	}
	for _, c := range []float64{-0.5, 1.01, math.NaN()} {
		r := &reasoningService{s: &Server{cfg: Config{Reasoning: &fakeReasoning{debate: &reasoningpb.DebateEvaluateResponse{ConfidenceScore: c}}}}}
		_, err := r.EvaluateDebate(t.Context(), &reasoningpb.DebateEvaluateRequest{ProposalA: "a", ProposalB: "b"})
		assert.Equal(t, codes.Internal, toStatus(t.Context(), err).Code(), "confidence %v: %v", c, err)
		assert.Contains(t, toStatus(t.Context(), err).Message(), "outside [0, 1]")
	}
}

func TestReasoningEvaluateDebateAndSummarizeLog(t *testing.T) {
	var buf bytes.Buffer
	r := &reasoningService{s: &Server{log: slog.New(slog.NewTextHandler(&buf, nil))}}
	_, err := r.EvaluateDebate(t.Context(), &reasoningpb.DebateEvaluateRequest{NegotiationId: "n9", ProposalA: "secret plan a", ProposalB: "secret plan b"})
	require.NoError(t, err)
	out := buf.String()
	for _, want := range []string{"inference evaluate_debate", "engine=" + reasoning.BuiltinModel, "negotiation_id=n9", "proposal_a_bytes=13",
		"proposal_b_sha256=", "confidence_score=0.5", "notes="} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "secret plan", "payloads are logged by size and digest only (§24)")

	buf.Reset()
	_, err = r.Summarize(t.Context(), &reasoningpb.SummarizeRequest{SessionId: "s9", Segments: []*reasoningpb.TextSegment{{Content: "hush. hush."}}})
	require.NoError(t, err)
	for _, want := range []string{"inference summarize", "session_id=s9", "segments=1", "segment_bytes=11", "model=" + reasoning.BuiltinModel, "tokens=3", "summary_sha256="} {
		assert.Contains(t, buf.String(), want)
	}
	assert.NotContains(t, buf.String(), "hush")

	buf.Reset()
	r.s.cfg.Reasoning = &fakeReasoning{err: errors.New("boom")}
	_, err = r.Summarize(t.Context(), &reasoningpb.SummarizeRequest{Segments: []*reasoningpb.TextSegment{{Content: "x"}}})
	require.Error(t, err)
	assert.Contains(t, buf.String(), "inference summarize failed")
	assert.Contains(t, buf.String(), "engine=*frontend.fakeReasoning")
	assert.Contains(t, buf.String(), "boom")
}

// TestReasoningOverGRPC registers the service as Server.Register does and calls it over a
// connection.
func TestReasoningOverGRPC(t *testing.T) {
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer(grpc.ChainUnaryInterceptor(errorsUnary)) // the error table, as Server.Register's server has
	s := &Server{log: slog.New(slog.DiscardHandler)}
	reasoningpb.RegisterReasoningProxyServer(g, &reasoningService{s: s, engine: &inference.RuleEngine{}})
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	c := reasoningpb.NewReasoningProxyClient(conn)

	resp, err := c.CheckParallelism(t.Context(), &reasoningpb.ParallelismCheckRequest{ScopeA: "repo:r path:src/ui/**", ScopeB: "repo:r path:src/ui/button.go"})
	require.NoError(t, err)
	assert.Equal(t, 0.2, resp.GetConfidenceScore())
	assert.Contains(t, resp.GetNotes(), "overlaps: path src/ui/** overlaps src/ui/button.go")

	_, err = c.CheckParallelism(t.Context(), &reasoningpb.ParallelismCheckRequest{ScopeA: "", ScopeB: "repo:r"})
	assert.Equal(t, codes.InvalidArgument, toStatus(t.Context(), err).Code(), "%v", err)
	_, err = c.EvaluateDebate(t.Context(), &reasoningpb.DebateEvaluateRequest{})
	assert.Equal(t, codes.InvalidArgument, toStatus(t.Context(), err).Code(), "%v", err)
	deb, err := c.EvaluateDebate(t.Context(), &reasoningpb.DebateEvaluateRequest{ProposalA: "a b", ProposalB: "a c"})
	require.NoError(t, err)
	assert.Equal(t, 1.0/3, deb.GetConfidenceScore())
	_, err = c.Summarize(t.Context(), &reasoningpb.SummarizeRequest{})
	assert.Equal(t, codes.InvalidArgument, toStatus(t.Context(), err).Code(), "%v", err)
	sum, err := c.Summarize(t.Context(), &reasoningpb.SummarizeRequest{Segments: []*reasoningpb.TextSegment{{Content: "One. Two."}}})
	require.NoError(t, err)
	assert.Equal(t, "One. Two.", sum.GetSummary())
}
