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
			assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			for _, p := range tc.parts {
				assert.Contains(t, status.Convert(err).Message(), p)
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
			assert.Equal(t, tc.code, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), tc.msg)
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

func TestReasoningUnimplementedMethods(t *testing.T) {
	r := &reasoningService{}
	_, err := r.EvaluateDebate(t.Context(), &reasoningpb.DebateEvaluateRequest{NegotiationId: "n1", ProposalA: "a", ProposalB: "b"})
	assert.Equal(t, codes.Unimplemented, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "EvaluateDebate is not implemented in this server version")
	assert.Contains(t, status.Convert(err).Message(), "debate evaluation of negotiation proposals (§17)")

	_, err = r.Summarize(t.Context(), &reasoningpb.SummarizeRequest{SessionId: "s1"})
	assert.Equal(t, codes.Unimplemented, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "Summarize is not implemented in this server version")
	assert.Contains(t, status.Convert(err).Message(), "session summarisation")
}

// TestReasoningOverGRPC registers the service the way Server.Register is meant to (without the
// capability gate, which still blocks the whole service) and calls it over a connection.
func TestReasoningOverGRPC(t *testing.T) {
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
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
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	_, err = c.EvaluateDebate(t.Context(), &reasoningpb.DebateEvaluateRequest{})
	assert.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)
	_, err = c.Summarize(t.Context(), &reasoningpb.SummarizeRequest{})
	assert.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)
}
