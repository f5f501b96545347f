package frontend

import (
	"context"
	"math"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/reasoningpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/inference"
)

// reasoningService serves sw4rm.reasoning.ReasoningProxy, the Inference Engine proxy (§9.3).
// CheckParallelism scores two task scopes with engine; EvaluateDebate and Summarize need
// capabilities this server version does not have and answer codes.Unimplemented.
type reasoningService struct {
	reasoningpb.UnimplementedReasoningProxyServer
	s *Server
	// engine scores scopes; nil means the default inference.RuleEngine.
	engine inference.Engine
}

func (r *reasoningService) inferenceEngine() inference.Engine {
	if r.engine == nil {
		return &inference.RuleEngine{}
	}
	return r.engine
}

// CheckParallelism parses both scopes (see protocol/inference for the format) and returns the
// engine's confidence, in [0, 1], that tasks with them can run in parallel safely (§9.2,
// §9.3). The notes name the engine, the rule that applied and what overlaps. The threshold and
// the HITL escalation are the caller's (the scheduler's) business: see inference.Decide.
func (r *reasoningService) CheckParallelism(ctx context.Context, req *reasoningpb.ParallelismCheckRequest) (*reasoningpb.ParallelismCheckResponse, error) {
	a, err := inference.ParseScope(req.GetScopeA())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "validation_error: scope_a: %v", err)
	}
	b, err := inference.ParseScope(req.GetScopeB())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "validation_error: scope_b: %v", err)
	}
	as, err := r.inferenceEngine().CheckParallelism(a, b)
	if err != nil {
		r.logCheck(ctx, req, inference.Assessment{}, err)
		if st, ok := status.FromError(err); ok {
			return nil, st.Err() // an engine that speaks gRPC keeps its code
		}
		// The caller applies its inference-unavailable policy (§9.3 "Availability Handling").
		return nil, status.Errorf(codes.Unavailable, "inference engine unavailable: %v", err)
	}
	if c := as.Confidence; math.IsNaN(c) || c < 0 || c > 1 {
		err := status.Errorf(codes.Internal, "internal_error: inference engine %q returned confidence %v outside [0, 1]", as.Engine, c)
		r.logCheck(ctx, req, as, err)
		return nil, err
	}
	r.logCheck(ctx, req, as, nil)
	return &reasoningpb.ParallelismCheckResponse{ConfidenceScore: as.Confidence, Notes: checkNotes(as)}, nil
}

// checkNotes renders an assessment as the response's notes: engine, rule, explanation and
// overlaps, e.g. "engine sw4rm-rules/v1; rule overlapping_paths (confidence 0.2): paths overlap
// in a repository both scopes may share; overlaps: path src/ui/** overlaps src/ui/button.go".
func checkNotes(as inference.Assessment) string {
	var parts []string
	if as.Engine != "" {
		parts = append(parts, "engine "+as.Engine)
	}
	if as.Rule != "" && !strings.Contains(as.Notes, "rule "+as.Rule) {
		parts = append(parts, "rule "+as.Rule+" (confidence "+strconv.FormatFloat(as.Confidence, 'f', -1, 64)+")")
	}
	if as.Notes != "" {
		parts = append(parts, as.Notes)
	}
	overlaps := "none"
	if len(as.Overlaps) > 0 {
		overlaps = strings.Join(as.Overlaps, ", ")
	}
	return strings.Join(append(parts, "overlaps: "+overlaps), "; ")
}

// logCheck records the request and response (§24: "SHOULD version and log Inference Engine
// requests and responses").
func (r *reasoningService) logCheck(ctx context.Context, req *reasoningpb.ParallelismCheckRequest, as inference.Assessment, err error) {
	if r.s == nil || r.s.log == nil {
		return
	}
	attrs := []any{"scope_a", req.GetScopeA(), "scope_b", req.GetScopeB()}
	if err != nil {
		r.s.log.WarnContext(ctx, "inference check_parallelism failed", append(attrs, "error", err)...)
		return
	}
	r.s.log.InfoContext(ctx, "inference check_parallelism", append(attrs,
		"engine", as.Engine, "rule", as.Rule, "confidence_score", as.Confidence, "overlaps", as.Overlaps)...)
}

// EvaluateDebate answers codes.Unimplemented: scoring negotiation proposals (§17) needs a
// debate-capable (LLM or ML) inference engine, which this server version does not have.
func (r *reasoningService) EvaluateDebate(context.Context, *reasoningpb.DebateEvaluateRequest) (*reasoningpb.DebateEvaluateResponse, error) {
	return nil, status.Error(codes.Unimplemented,
		"/sw4rm.reasoning.ReasoningProxy/EvaluateDebate is not implemented in this server version: debate evaluation of negotiation proposals (§17) needs an LLM/ML inference engine; only the rule-based CheckParallelism (§9.3) is available")
}

// Summarize answers codes.Unimplemented: summarising session text needs a language model,
// which this server version does not have.
func (r *reasoningService) Summarize(context.Context, *reasoningpb.SummarizeRequest) (*reasoningpb.SummarizeResponse, error) {
	return nil, status.Error(codes.Unimplemented,
		"/sw4rm.reasoning.ReasoningProxy/Summarize is not implemented in this server version: session summarisation needs a language-model inference engine; only the rule-based CheckParallelism (§9.3) is available")
}
