package reasoning

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/reasoningpb"
)

// fakeProxy is a ReasoningProxy standing in for a model-backed engine.
type fakeProxy struct {
	reasoningpb.UnimplementedReasoningProxyServer
	debate    *reasoningpb.DebateEvaluateResponse
	summary   *reasoningpb.SummarizeResponse
	err       error
	delay     time.Duration
	debates   chan *reasoningpb.DebateEvaluateRequest
	summaries chan *reasoningpb.SummarizeRequest
}

func (f *fakeProxy) EvaluateDebate(ctx context.Context, req *reasoningpb.DebateEvaluateRequest) (*reasoningpb.DebateEvaluateResponse, error) {
	f.debates <- req
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	return f.debate, f.err
}

func (f *fakeProxy) Summarize(ctx context.Context, req *reasoningpb.SummarizeRequest) (*reasoningpb.SummarizeResponse, error) {
	f.summaries <- req
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	return f.summary, f.err
}

func (f *fakeProxy) wait(ctx context.Context) error {
	select {
	case <-time.After(f.delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// serveFake serves f on a local port and returns an External engine pointed at it.
func serveFake(t *testing.T, f *fakeProxy) *External {
	t.Helper()
	f.debates = make(chan *reasoningpb.DebateEvaluateRequest, 10)
	f.summaries = make(chan *reasoningpb.SummarizeRequest, 10)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := grpc.NewServer()
	reasoningpb.RegisterReasoningProxyServer(g, f)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	e, err := NewExternal(lis.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func TestExternalForwards(t *testing.T) {
	f := &fakeProxy{
		debate:  &reasoningpb.DebateEvaluateResponse{ConfidenceScore: 0.42, Notes: "model says so"},
		summary: &reasoningpb.SummarizeResponse{Summary: "short", Tokens: 2, CostCents: 0.3, Model: "big-model/2"},
	}
	e := serveFake(t, f)
	req := &reasoningpb.DebateEvaluateRequest{NegotiationId: "n1", ProposalA: "a", ProposalB: "b", Intensity: "HIGH"}
	resp, err := e.EvaluateDebate(t.Context(), req)
	require.NoError(t, err)
	assert.Equal(t, 0.42, resp.GetConfidenceScore())
	assert.Equal(t, "model says so", resp.GetNotes())
	got := <-f.debates
	assert.Equal(t, "n1", got.GetNegotiationId())
	assert.Equal(t, "HIGH", got.GetIntensity())

	sreq := &reasoningpb.SummarizeRequest{SessionId: "s1", Segments: []*reasoningpb.TextSegment{{Kind: "k", Content: "text", Seq: 3, At: "t"}}, MaxTokens: 9, Mode: "abstractive"}
	sresp, err := e.Summarize(t.Context(), sreq)
	require.NoError(t, err)
	assert.Equal(t, "big-model/2", sresp.GetModel())
	assert.Equal(t, 0.3, sresp.GetCostCents())
	sgot := <-f.summaries
	assert.Equal(t, "abstractive", sgot.GetMode(), "modes the builtin engine refuses reach the external one")
	assert.Equal(t, uint32(9), sgot.GetMaxTokens())
	require.Len(t, sgot.GetSegments(), 1)
	assert.Equal(t, "t", sgot.GetSegments()[0].GetAt())
}

func TestExternalFailures(t *testing.T) {
	cases := []struct {
		name string
		fake *fakeProxy
		tune func(*External)
		code codes.Code
		msg  string
	}{
		{"engine error is Unavailable", &fakeProxy{err: status.Error(codes.Internal, "model crashed")}, nil,
			codes.Unavailable, "Internal: model crashed"},
		{"refused input keeps InvalidArgument", &fakeProxy{err: status.Error(codes.InvalidArgument, "validation_error: proposal too long")}, nil,
			codes.InvalidArgument, "validation_error: proposal too long"},
		{"per-call timeout is Unavailable", &fakeProxy{delay: time.Minute, debate: &reasoningpb.DebateEvaluateResponse{}},
			func(e *External) { e.Timeout = 100 * time.Millisecond }, codes.Unavailable, "DeadlineExceeded"},
		{"confidence outside [0, 1] is Unavailable", &fakeProxy{debate: &reasoningpb.DebateEvaluateResponse{ConfidenceScore: 1.5}}, nil,
			codes.Unavailable, "answered confidence_score 1.5 outside [0, 1]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := serveFake(t, tc.fake)
			if tc.tune != nil {
				tc.tune(e)
			}
			_, err := e.EvaluateDebate(t.Context(), &reasoningpb.DebateEvaluateRequest{ProposalA: "a", ProposalB: "b"})
			assert.Equal(t, tc.code, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), tc.msg)
			if tc.code == codes.Unavailable {
				assert.Contains(t, status.Convert(err).Message(), "inference engine unavailable: external reasoning engine "+e.addr+": EvaluateDebate")
			}
		})
	}
}

// TestExternalDeadAddress: nothing listens at the address — both methods fail with
// Unavailable naming it.
func TestExternalDeadAddress(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close()) // the port is now closed
	e, err := NewExternal(addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	_, err = e.EvaluateDebate(t.Context(), &reasoningpb.DebateEvaluateRequest{ProposalA: "a", ProposalB: "b"})
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "external reasoning engine "+addr)
	_, err = e.Summarize(t.Context(), &reasoningpb.SummarizeRequest{Segments: []*reasoningpb.TextSegment{{Content: "x"}}})
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
}

// TestExternalCallerGivesUp: the caller's own cancellation is not the engine's outage.
func TestExternalCallerGivesUp(t *testing.T) {
	e := serveFake(t, &fakeProxy{delay: time.Minute})
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := e.Summarize(ctx, &reasoningpb.SummarizeRequest{Segments: []*reasoningpb.TextSegment{{Content: "x"}}})
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
}
