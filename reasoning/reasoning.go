// Package reasoning is SW4RM's reasoning engine: the part of the Inference Engine proxy
// (§9.3, reasoning.proto's ReasoningProxy) that compares negotiation proposals
// (EvaluateDebate, §17.3's optional LLM confidence) and condenses session text (Summarize,
// which debate turns use once a transcript outgrows its budget, ADR-011).
//
// Two engines implement Engine. Builtin needs no model: it is deterministic, costs nothing
// and is the default. External forwards every call to another ReasoningProxy — a model-backed
// service — named by SW4RM_REASONING_EXTERNAL, with a per-call timeout; when that service
// cannot answer, the call fails with codes.Unavailable and the caller applies its
// inference-unavailable policy (§9.3 "Availability Handling"). FromConfig picks one.
//
// Scope-conflict analysis (CheckParallelism) stays with protocol/inference, whose rule
// engine admission and workflow code call directly.
package reasoning

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/reasoningpb"
)

// Engine evaluates negotiation proposals and summarises session text. Implementations
// report a refused request as a gRPC status with codes.InvalidArgument and a failure to
// answer as codes.Unavailable, so the frontend and activities can tell bad input (do not
// retry) from an engine outage (retry, or apply the unavailable policy).
type Engine interface {
	// EvaluateDebate answers the confidence, in [0, 1], that proposal_b is acceptable where
	// proposal_a was (how close the two are), with notes explaining it.
	EvaluateDebate(ctx context.Context, req *reasoningpb.DebateEvaluateRequest) (*reasoningpb.DebateEvaluateResponse, error)
	// Summarize condenses the segments into at most max_tokens tokens.
	Summarize(ctx context.Context, req *reasoningpb.SummarizeRequest) (*reasoningpb.SummarizeResponse, error)
}

// Named is implemented by engines that can say which engine and version answered, for the
// request and response log of §24 ("SHOULD version and log Inference Engine requests and
// responses"). Builtin and External implement it.
type Named interface {
	// Name identifies the engine, e.g. "sw4rm-builtin/v1" or "external:host:port".
	Name() string
}

// NameOf returns e's name, or its Go type when it does not implement Named.
func NameOf(e Engine) string {
	if n, ok := e.(Named); ok {
		return n.Name()
	}
	return fmt.Sprintf("%T", e)
}

// FromConfig returns the engine a process is configured with: Builtin when external is
// empty, else an External engine forwarding to the ReasoningProxy at external
// (SW4RM_REASONING_EXTERNAL). An External holds a connection: close it (it implements
// io.Closer) when the process stops.
func FromConfig(external string) (Engine, error) {
	if strings.TrimSpace(external) == "" {
		return Builtin{}, nil
	}
	return NewExternal(strings.TrimSpace(external))
}

// ErrInvalidRequest marks a request every engine refuses (CheckDebateRequest,
// CheckSummarizeRequest, and an engine's own refusals such as Builtin's of an unknown
// summary mode); match it with errors.Is. The error's text is the reason alone, without
// this sentinel's, so it reads well after "validation_error: ".
var ErrInvalidRequest = errors.New("reasoning: invalid request")

// requestError is a refusal of a request; it matches ErrInvalidRequest.
type requestError struct{ reason string }

func (e *requestError) Error() string { return e.reason }

func (e *requestError) Is(target error) bool { return target == ErrInvalidRequest }

// invalidf makes a refusal whose text is the formatted reason.
func invalidf(format string, args ...any) error {
	return &requestError{reason: fmt.Sprintf(format, args...)}
}

// InvalidArgument is the gRPC status of a refused request: codes.InvalidArgument with the
// spec's validation_error code in front of the reason (frontend/errors.go reads it).
func InvalidArgument(err error) error {
	return status.Error(codes.InvalidArgument, "validation_error: "+err.Error())
}

// CheckDebateRequest refuses an EvaluateDebate request no engine can answer: a proposal that
// is empty or blank, or an intensity that is neither empty nor one of the §17 debate
// intensities (LOWEST, LOW, MEDIUM, HIGH, HIGHEST; any case). The error matches
// ErrInvalidRequest and its text names the field.
func CheckDebateRequest(req *reasoningpb.DebateEvaluateRequest) error {
	if strings.TrimSpace(req.GetProposalA()) == "" {
		return invalidf("proposal_a is required: the proposal the other is compared with")
	}
	if strings.TrimSpace(req.GetProposalB()) == "" {
		return invalidf("proposal_b is required: the proposal to evaluate")
	}
	if _, err := ParseIntensity(req.GetIntensity()); err != nil {
		return err
	}
	return nil
}

// ParseIntensity reads DebateEvaluateRequest.intensity: empty means unspecified; otherwise
// one of the commonpb.DebateIntensity names LOWEST..HIGHEST, in any case. The error matches
// ErrInvalidRequest.
func ParseIntensity(s string) (commonpb.DebateIntensity, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return commonpb.DebateIntensity_DEBATE_INTENSITY_UNSPECIFIED, nil
	}
	v, ok := commonpb.DebateIntensity_value[strings.ToUpper(s)]
	if !ok || v == int32(commonpb.DebateIntensity_DEBATE_INTENSITY_UNSPECIFIED) {
		return 0, invalidf("intensity %q: want LOWEST, LOW, MEDIUM, HIGH or HIGHEST (§17), or empty", s)
	}
	return commonpb.DebateIntensity(v), nil
}

// CheckSummarizeRequest refuses a Summarize request no engine can answer: one without any
// segment that has content. Blank segments among others are allowed (engines skip them).
// The error matches ErrInvalidRequest.
func CheckSummarizeRequest(req *reasoningpb.SummarizeRequest) error {
	for _, s := range req.GetSegments() {
		if strings.TrimSpace(s.GetContent()) != "" {
			return nil
		}
	}
	if len(req.GetSegments()) == 0 {
		return invalidf("segments are required: nothing to summarise")
	}
	return invalidf("segments: all %d are blank, nothing to summarise", len(req.GetSegments()))
}
