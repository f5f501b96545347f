package negotiation

import (
	"fmt"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
)

// HITL gate modes, the values of policy.hitl.mode (§17.2: "hitl gate
// (None|PauseBetweenRounds|PauseOnFinalAccept)").
const (
	// HitlNone never pauses for a human.
	HitlNone = "None"
	// HitlPauseBetweenRounds pauses for a human after every round.
	HitlPauseBetweenRounds = "PauseBetweenRounds"
	// HitlPauseOnFinalAccept pauses for a human before an acceptance becomes final.
	HitlPauseOnFinalAccept = "PauseOnFinalAccept"
)

// HitlModes lists the HITL gate modes in the order §17.2 names them.
func HitlModes() []string {
	return []string{HitlNone, HitlPauseBetweenRounds, HitlPauseOnFinalAccept}
}

// Guardrails are the scheduler's bounds for one debate intensity (§17: "Implementations MUST
// map intensity levels to appropriate guardrails including round limits, time limits, and
// score thresholds"; §17.2: agent preferences are clamped to them). Every pair is [min, max],
// both inclusive; Derive clamps every knob of the effective policy into its pair.
type Guardrails struct {
	// MaxRounds bounds max_rounds.
	MaxRounds [2]uint32
	// ScoreThreshold bounds score_threshold.
	ScoreThreshold [2]float32
	// DiffTolerance bounds diff_tolerance.
	DiffTolerance [2]float32
	// RoundTimeout bounds round_timeout_ms.
	RoundTimeout [2]time.Duration
	// DebateTimeout bounds the negotiation's total time (Open's debate_timeout).
	DebateTimeout [2]time.Duration
	// TokenBudgetPerRound bounds token_budget_per_round.
	TokenBudgetPerRound [2]uint64
	// TotalTokenBudget bounds total_token_budget.
	TotalTokenBudget [2]uint64
	// OscillationLimit bounds oscillation_limit.
	OscillationLimit [2]uint32
	// Default is the intensity's default policy; every knob lies inside its bounds.
	Default *policypb.NegotiationPolicy
	// DefaultDebateTimeout is the total time bound when Open gives none: the default
	// max_rounds times the default round timeout.
	DefaultDebateTimeout time.Duration
}

// guardrailRow is one row of the intensity table; GuardrailsFor turns it into Guardrails.
type guardrailRow struct {
	rounds          [3]uint32 // min, max, default
	threshold       [3]float32
	tolerance       [3]float32
	roundTimeout    [3]time.Duration
	debateTimeout   [3]time.Duration
	tokensPerRound  [3]uint64
	totalTokens     [3]uint64
	oscillation     [3]uint32
	hitl            string
	requireSchema   bool
	requireExamples bool
	llmWeight       float32
}

// guardrailTable is the documented table (package doc, docs/negotiation.md "Intensity
// guardrails"), one row per intensity. Rigour grows with the intensity: more rounds and time
// allowed, a higher acceptance bar, a smaller tolerated change between the accepted version and
// the one before, larger budgets to pay for the longer debate, and a stricter default gate.
// Each default sits at the permissive end of its range, so an agent preference can only
// tighten it (Derive takes the most conservative value). The default debate timeout is the
// default rounds times the default round timeout, and the default total token budget the
// default rounds times the default per-round budget.
var guardrailTable = map[commonpb.DebateIntensity]guardrailRow{
	commonpb.DebateIntensity_LOWEST: {
		rounds:         [3]uint32{1, 2, 2},
		threshold:      [3]float32{0.6, 0.8, 0.6},
		tolerance:      [3]float32{0.2, 0.5, 0.5},
		roundTimeout:   [3]time.Duration{5 * time.Second, 30 * time.Second, 30 * time.Second},
		debateTimeout:  [3]time.Duration{30 * time.Second, 2 * time.Minute, time.Minute},
		tokensPerRound: [3]uint64{256, 4096, 2048},
		totalTokens:    [3]uint64{1024, 8192, 4096},
		oscillation:    [3]uint32{1, 1, 1},
		hitl:           HitlNone,
		llmWeight:      0.3,
	},
	commonpb.DebateIntensity_LOW: {
		rounds:         [3]uint32{1, 4, 4},
		threshold:      [3]float32{0.65, 0.85, 0.7},
		tolerance:      [3]float32{0.15, 0.4, 0.4},
		roundTimeout:   [3]time.Duration{10 * time.Second, time.Minute, time.Minute},
		debateTimeout:  [3]time.Duration{time.Minute, 8 * time.Minute, 4 * time.Minute},
		tokensPerRound: [3]uint64{512, 8192, 4096},
		totalTokens:    [3]uint64{2048, 32768, 16384},
		oscillation:    [3]uint32{1, 2, 1},
		hitl:           HitlNone,
		requireSchema:  true,
		llmWeight:      0.3,
	},
	commonpb.DebateIntensity_MEDIUM: {
		rounds:          [3]uint32{2, 6, 6},
		threshold:       [3]float32{0.7, 0.9, 0.75},
		tolerance:       [3]float32{0.1, 0.3, 0.3},
		roundTimeout:    [3]time.Duration{15 * time.Second, 3 * time.Minute, 2 * time.Minute},
		debateTimeout:   [3]time.Duration{2 * time.Minute, 30 * time.Minute, 12 * time.Minute},
		tokensPerRound:  [3]uint64{1024, 16384, 8192},
		totalTokens:     [3]uint64{4096, 131072, 49152},
		oscillation:     [3]uint32{1, 2, 2},
		hitl:            HitlNone,
		requireSchema:   true,
		requireExamples: true,
		llmWeight:       0.3,
	},
	commonpb.DebateIntensity_HIGH: {
		rounds:          [3]uint32{2, 9, 9},
		threshold:       [3]float32{0.75, 0.95, 0.8},
		tolerance:       [3]float32{0.05, 0.2, 0.2},
		roundTimeout:    [3]time.Duration{30 * time.Second, 5 * time.Minute, 5 * time.Minute},
		debateTimeout:   [3]time.Duration{5 * time.Minute, 90 * time.Minute, 45 * time.Minute},
		tokensPerRound:  [3]uint64{2048, 32768, 16384},
		totalTokens:     [3]uint64{8192, 524288, 147456},
		oscillation:     [3]uint32{1, 3, 2},
		hitl:            HitlPauseOnFinalAccept,
		requireSchema:   true,
		requireExamples: true,
		llmWeight:       0.3,
	},
	commonpb.DebateIntensity_HIGHEST: {
		rounds:          [3]uint32{3, 12, 12},
		threshold:       [3]float32{0.8, 1, 0.9},
		tolerance:       [3]float32{0.02, 0.15, 0.1},
		roundTimeout:    [3]time.Duration{time.Minute, 10 * time.Minute, 10 * time.Minute},
		debateTimeout:   [3]time.Duration{10 * time.Minute, 4 * time.Hour, 2 * time.Hour},
		tokensPerRound:  [3]uint64{4096, 65536, 32768},
		totalTokens:     [3]uint64{16384, 1048576, 393216},
		oscillation:     [3]uint32{1, 3, 3},
		hitl:            HitlPauseBetweenRounds,
		requireSchema:   true,
		requireExamples: true,
		llmWeight:       0.3,
	},
}

// Intensities lists the five debate intensities of §17, LOWEST to HIGHEST.
func Intensities() []commonpb.DebateIntensity {
	return []commonpb.DebateIntensity{
		commonpb.DebateIntensity_LOWEST, commonpb.DebateIntensity_LOW, commonpb.DebateIntensity_MEDIUM,
		commonpb.DebateIntensity_HIGH, commonpb.DebateIntensity_HIGHEST,
	}
}

// GuardrailsFor returns the documented guardrails of an intensity (package doc, "Intensity
// guardrails"); it refuses DEBATE_INTENSITY_UNSPECIFIED and unknown values (§17: a negotiation
// MUST be opened with one of LOWEST..HIGHEST). Default is built afresh on every call, so the caller may modify it.
func GuardrailsFor(i commonpb.DebateIntensity) (Guardrails, error) {
	row, ok := guardrailTable[i]
	if !ok {
		return Guardrails{}, fmt.Errorf("%w: debate intensity %s is not one of LOWEST, LOW, MEDIUM, HIGH, HIGHEST (§17)",
			ErrInvalidPolicy, intensityName(i))
	}
	def := &policypb.NegotiationPolicy{
		MaxRounds:           row.rounds[2],
		ScoreThreshold:      row.threshold[2],
		DiffTolerance:       row.tolerance[2],
		RoundTimeoutMs:      uint64(row.roundTimeout[2].Milliseconds()),
		TokenBudgetPerRound: row.tokensPerRound[2],
		TotalTokenBudget:    row.totalTokens[2],
		OscillationLimit:    row.oscillation[2],
		Hitl:                &policypb.NegotiationPolicy_Hitl{Mode: row.hitl},
		Scoring: &policypb.NegotiationPolicy_Scoring{
			RequireSchemaValid:  row.requireSchema,
			RequireExamplesPass: row.requireExamples,
			LlmWeight:           row.llmWeight,
		},
	}
	return Guardrails{
		MaxRounds:            [2]uint32{row.rounds[0], row.rounds[1]},
		ScoreThreshold:       [2]float32{row.threshold[0], row.threshold[1]},
		DiffTolerance:        [2]float32{row.tolerance[0], row.tolerance[1]},
		RoundTimeout:         [2]time.Duration{row.roundTimeout[0], row.roundTimeout[1]},
		DebateTimeout:        [2]time.Duration{row.debateTimeout[0], row.debateTimeout[1]},
		TokenBudgetPerRound:  [2]uint64{row.tokensPerRound[0], row.tokensPerRound[1]},
		TotalTokenBudget:     [2]uint64{row.totalTokens[0], row.totalTokens[1]},
		OscillationLimit:     [2]uint32{row.oscillation[0], row.oscillation[1]},
		Default:              def,
		DefaultDebateTimeout: row.debateTimeout[2],
	}, nil
}

// intensityName names an intensity for messages, also when it is out of the enum's range.
func intensityName(i commonpb.DebateIntensity) string {
	if name, ok := commonpb.DebateIntensity_name[int32(i)]; ok {
		return name
	}
	return fmt.Sprintf("%d", int32(i))
}
