package frontend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/reasoningpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/inference"
	"github.com/sw4rm/sw4rm-temporal/reasoning"
)

// reasoningService serves sw4rm.reasoning.ReasoningProxy, the Inference Engine proxy (§9.3).
// CheckParallelism scores two task scopes with engine; EvaluateDebate and Summarize ask the
// reasoning engine of the server's configuration (Config.Reasoning: the builtin one, or an
// external ReasoningProxy named by SW4RM_REASONING_EXTERNAL).
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
	a, b, perr := inference.ScopesOf(req)
	if perr != nil {
		return nil, perr
	}
	as, err := r.assess(ctx, req, a, b)
	if err != nil {
		return nil, err
	}
	return &reasoningpb.ParallelismCheckResponse{ConfidenceScore: as.Confidence, Notes: checkNotes(as)}, nil
}

// assess asks the engine, checks that its confidence is in [0, 1] and logs the check. An
// engine that cannot answer is Unavailable, and the caller applies its inference-unavailable
// policy (§9.3 "Availability Handling"); an engine that speaks gRPC keeps its code.
func (r *reasoningService) assess(ctx context.Context, req *reasoningpb.ParallelismCheckRequest, a, b inference.Scope) (inference.Assessment, error) {
	as, err := r.inferenceEngine().CheckParallelism(a, b)
	if err != nil {
		r.logCheck(ctx, req, inference.Assessment{}, err)
		return inference.Assessment{}, engineFailure(err)
	}
	if c := as.Confidence; math.IsNaN(c) || c < 0 || c > 1 {
		err := status.Errorf(codes.Internal, "internal_error: inference engine %q returned confidence %v outside [0, 1]", as.Engine, c)
		r.logCheck(ctx, req, as, err)
		return as, err
	}
	r.logCheck(ctx, req, as, nil)
	return as, nil
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

// reasoningEngine is the engine of EvaluateDebate and Summarize: the configured one, else
// reasoning.Builtin.
func (r *reasoningService) reasoningEngine() reasoning.Engine {
	if r.s != nil && r.s.cfg.Reasoning != nil {
		return r.s.cfg.Reasoning
	}
	return reasoning.Builtin{}
}

// EvaluateDebate answers the engine's confidence, in [0, 1], that proposal_b is acceptable
// where proposal_a was, with notes that name the engine and explain the score (§17.3's
// optional Inference Engine confidence; see package reasoning for the builtin algorithm).
// Empty proposals and an unknown intensity are refused with InvalidArgument
// (validation_error) before the engine is asked; an engine that cannot answer gives
// Unavailable, and the caller applies its inference-unavailable policy (§9.3).
func (r *reasoningService) EvaluateDebate(ctx context.Context, req *reasoningpb.DebateEvaluateRequest) (*reasoningpb.DebateEvaluateResponse, error) {
	if err := reasoning.CheckDebateRequest(req); err != nil {
		return nil, reasoning.InvalidArgument(err)
	}
	eng := r.reasoningEngine()
	resp, err := eng.EvaluateDebate(ctx, req)
	if err == nil {
		if c := resp.GetConfidenceScore(); math.IsNaN(c) || c < 0 || c > 1 {
			err = status.Errorf(codes.Internal, "internal_error: inference engine %q returned confidence %v outside [0, 1]", reasoning.NameOf(eng), c)
		}
	}
	if err != nil {
		err = engineFailure(err)
		r.logDebate(ctx, eng, req, nil, err)
		return nil, err
	}
	r.logDebate(ctx, eng, req, resp, nil)
	return resp, nil
}

// Summarize condenses the segments into at most max_tokens tokens with the engine and
// answers the summary, its token count, cost and the model that wrote it. A request without
// any segment with content is refused with InvalidArgument (validation_error); an engine
// that cannot answer gives Unavailable.
func (r *reasoningService) Summarize(ctx context.Context, req *reasoningpb.SummarizeRequest) (*reasoningpb.SummarizeResponse, error) {
	if err := reasoning.CheckSummarizeRequest(req); err != nil {
		return nil, reasoning.InvalidArgument(err)
	}
	eng := r.reasoningEngine()
	resp, err := eng.Summarize(ctx, req)
	if err != nil {
		err = engineFailure(err)
		r.logSummary(ctx, eng, req, nil, err)
		return nil, err
	}
	r.logSummary(ctx, eng, req, resp, nil)
	return resp, nil
}

// engineFailure keeps an engine's gRPC status (a refusal stays InvalidArgument, an outage
// Unavailable) and makes any other error Unavailable, as CheckParallelism does.
func engineFailure(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.Unavailable, "inference engine unavailable: %v", err)
}

// digest is the short SHA-256 of a text the log records instead of the text itself.
func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// logDebate records an EvaluateDebate request and its response or failure (§24). Proposals
// are negotiation payloads that may hold secrets (§24: "SHOULD redact secrets"), so the log
// keeps their size and a digest, which matches them with the negotiation's artifacts.
func (r *reasoningService) logDebate(ctx context.Context, eng reasoning.Engine, req *reasoningpb.DebateEvaluateRequest, resp *reasoningpb.DebateEvaluateResponse, err error) {
	if r.s == nil || r.s.log == nil {
		return
	}
	attrs := []any{"engine", reasoning.NameOf(eng), "negotiation_id", req.GetNegotiationId(), "intensity", req.GetIntensity(),
		"proposal_a_bytes", len(req.GetProposalA()), "proposal_a_sha256", digest(req.GetProposalA()),
		"proposal_b_bytes", len(req.GetProposalB()), "proposal_b_sha256", digest(req.GetProposalB())}
	if err != nil {
		r.s.log.WarnContext(ctx, "inference evaluate_debate failed", append(attrs, "error", err)...)
		return
	}
	r.s.log.InfoContext(ctx, "inference evaluate_debate", append(attrs, "confidence_score", resp.GetConfidenceScore(), "notes", resp.GetNotes())...)
}

// logSummary records a Summarize request and its response or failure (§24), the texts by
// size and digest like logDebate.
func (r *reasoningService) logSummary(ctx context.Context, eng reasoning.Engine, req *reasoningpb.SummarizeRequest, resp *reasoningpb.SummarizeResponse, err error) {
	if r.s == nil || r.s.log == nil {
		return
	}
	n := 0
	for _, seg := range req.GetSegments() {
		n += len(seg.GetContent())
	}
	attrs := []any{"engine", reasoning.NameOf(eng), "session_id", req.GetSessionId(), "segments", len(req.GetSegments()),
		"segment_bytes", n, "max_tokens", req.GetMaxTokens(), "mode", req.GetMode()}
	if err != nil {
		r.s.log.WarnContext(ctx, "inference summarize failed", append(attrs, "error", err)...)
		return
	}
	r.s.log.InfoContext(ctx, "inference summarize", append(attrs, "model", resp.GetModel(), "tokens", resp.GetTokens(),
		"cost_cents", resp.GetCostCents(), "summary_bytes", len(resp.GetSummary()), "summary_sha256", digest(resp.GetSummary()))...)
}
