package negotiation

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
)

// ErrInvalidPolicy is wrapped by every refusal of a policy, a profile, agent preferences or
// an intensity (ValidatePolicy, ValidatePreferences, GuardrailsFor, Derive); the frontend
// answers it with InvalidArgument and VALIDATION_ERROR.
var ErrInvalidPolicy = errors.New("invalid negotiation policy")

// maxTimeoutMs is the largest round_timeout_ms that still fits a time.Duration.
const maxTimeoutMs = math.MaxInt64 / int64(time.Millisecond)

// ValidatePolicy refuses a policy with values outside their domain (§17.2): score_threshold,
// diff_tolerance and scoring.llm_weight must be finite and within 0..1, hitl.mode must be
// empty or one of HitlModes, round_timeout_ms must fit a time.Duration. Zero fields mean
// "unset" and are allowed; a nil policy is allowed. Values inside their domain but outside an
// intensity's guardrails are not refused here: Derive clamps them. The error wraps
// ErrInvalidPolicy and lists every problem, separated by "; ".
func ValidatePolicy(p *policypb.NegotiationPolicy) error {
	if p == nil {
		return nil
	}
	var problems []string
	problems = unitInterval(problems, "score_threshold", p.GetScoreThreshold())
	problems = unitInterval(problems, "diff_tolerance", p.GetDiffTolerance())
	problems = unitInterval(problems, "scoring.llm_weight", p.GetScoring().GetLlmWeight())
	if p.GetRoundTimeoutMs() > uint64(maxTimeoutMs) {
		problems = append(problems, fmt.Sprintf("round_timeout_ms %d is too large (at most %d)", p.GetRoundTimeoutMs(), maxTimeoutMs))
	}
	if m := p.GetHitl().GetMode(); m != "" && !slices.Contains(HitlModes(), m) {
		problems = append(problems, fmt.Sprintf("hitl.mode %q is not one of %s (§17.2)", m, strings.Join(HitlModes(), ", ")))
	}
	return policyError(problems)
}

// ValidatePreferences refuses agent preferences with values outside their domain:
// score_threshold and diff_tolerance must be finite and within 0..1, round_timeout_ms must fit
// a time.Duration. Zero fields mean "no preference"; nil is allowed. The error wraps
// ErrInvalidPolicy.
func ValidatePreferences(p *policypb.AgentPreferences) error {
	if p == nil {
		return nil
	}
	var problems []string
	problems = unitInterval(problems, "score_threshold", p.GetScoreThreshold())
	problems = unitInterval(problems, "diff_tolerance", p.GetDiffTolerance())
	if p.GetRoundTimeoutMs() > uint64(maxTimeoutMs) {
		problems = append(problems, fmt.Sprintf("round_timeout_ms %d is too large (at most %d)", p.GetRoundTimeoutMs(), maxTimeoutMs))
	}
	return policyError(problems)
}

// unitInterval appends a problem when v is NaN, infinite or outside 0..1.
func unitInterval(problems []string, name string, v float32) []string {
	f := float64(v)
	if math.IsNaN(f) || f < 0 || f > 1 {
		return append(problems, fmt.Sprintf("%s %s is outside 0..1", name, formatFloat(v)))
	}
	return problems
}

func policyError(problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidPolicy, strings.Join(problems, "; "))
}

// DeriveInput is everything Open knows that shapes the effective policy (§17.2).
type DeriveInput struct {
	// Intensity is Open's debate intensity; UNSPECIFIED is refused.
	Intensity commonpb.DebateIntensity
	// Base is the scheduler's base policy (SetNegotiationPolicy); nil when none is set.
	Base *policypb.NegotiationPolicy
	// Profile is the policy profile Open's profile hint names; nil when none.
	Profile *policypb.PolicyProfile
	// Preferences are the participants' advisory preferences by participant; may be nil.
	Preferences map[string]*policypb.AgentPreferences
	// DebateTimeout is Open's debate_timeout; 0 means the intensity's default.
	DebateTimeout time.Duration
}

// Derived is the effective policy of one negotiation and its total time bound.
type Derived struct {
	// Effective is the policy plus each participant's clamped preferences (applied).
	Effective *policypb.EffectivePolicy
	// DebateTimeout is the total time bound, clamped to the guardrail.
	DebateTimeout time.Duration
	// Notes say what was clamped or tightened and why, in a deterministic order, for the
	// policy event and the audit.
	Notes []string
}

// knobs are the seven numeric knobs NegotiationPolicy and AgentPreferences share (§17.2).
// Zero means unset.
type knobs struct {
	maxRounds      uint32
	scoreThreshold float32
	diffTolerance  float32
	roundTimeoutMs uint64
	tokensPerRound uint64
	totalTokens    uint64
	oscillation    uint32
}

func policyKnobs(p *policypb.NegotiationPolicy) knobs {
	return knobs{
		maxRounds: p.GetMaxRounds(), scoreThreshold: p.GetScoreThreshold(), diffTolerance: p.GetDiffTolerance(),
		roundTimeoutMs: p.GetRoundTimeoutMs(), tokensPerRound: p.GetTokenBudgetPerRound(),
		totalTokens: p.GetTotalTokenBudget(), oscillation: p.GetOscillationLimit(),
	}
}

func preferenceKnobs(p *policypb.AgentPreferences) knobs {
	return knobs{
		maxRounds: p.GetMaxRounds(), scoreThreshold: p.GetScoreThreshold(), diffTolerance: p.GetDiffTolerance(),
		roundTimeoutMs: p.GetRoundTimeoutMs(), tokensPerRound: p.GetTokenBudgetPerRound(),
		totalTokens: p.GetTotalTokenBudget(), oscillation: p.GetOscillationLimit(),
	}
}

func (k knobs) preferences() *policypb.AgentPreferences {
	return &policypb.AgentPreferences{
		MaxRounds: k.maxRounds, ScoreThreshold: k.scoreThreshold, DiffTolerance: k.diffTolerance,
		RoundTimeoutMs: k.roundTimeoutMs, TokenBudgetPerRound: k.tokensPerRound,
		TotalTokenBudget: k.totalTokens, OscillationLimit: k.oscillation,
	}
}

func (k knobs) applyTo(p *policypb.NegotiationPolicy) {
	p.MaxRounds, p.ScoreThreshold, p.DiffTolerance = k.maxRounds, k.scoreThreshold, k.diffTolerance
	p.RoundTimeoutMs, p.TokenBudgetPerRound = k.roundTimeoutMs, k.tokensPerRound
	p.TotalTokenBudget, p.OscillationLimit = k.totalTokens, k.oscillation
}

// number is the knob value types.
type number interface{ uint32 | uint64 | float32 }

// clamper clamps knob values into one intensity's guardrails and notes every change.
type clamper struct {
	g         Guardrails
	intensity string
	notes     []string
}

// clampKnob clamps a set value into [lo, hi]; unset (zero) stays unset.
func clampKnob[T number](c *clamper, who, name string, v, lo, hi T) T {
	if v == 0 {
		return 0
	}
	to := min(max(v, lo), hi)
	if to != v {
		c.notes = append(c.notes, fmt.Sprintf("%s: %s %s clamped to %s (%s allows %s..%s)",
			who, name, formatNumber(v), formatNumber(to), c.intensity, formatNumber(lo), formatNumber(hi)))
	}
	return to
}

// clamp clamps every set knob of k into the guardrails; who names the source in notes.
func (c *clamper) clamp(who string, k knobs) knobs {
	g := c.g
	k.maxRounds = clampKnob(c, who, "max_rounds", k.maxRounds, g.MaxRounds[0], g.MaxRounds[1])
	k.scoreThreshold = clampKnob(c, who, "score_threshold", k.scoreThreshold, g.ScoreThreshold[0], g.ScoreThreshold[1])
	k.diffTolerance = clampKnob(c, who, "diff_tolerance", k.diffTolerance, g.DiffTolerance[0], g.DiffTolerance[1])
	k.roundTimeoutMs = clampKnob(c, who, "round_timeout_ms", k.roundTimeoutMs,
		uint64(g.RoundTimeout[0].Milliseconds()), uint64(g.RoundTimeout[1].Milliseconds()))
	k.tokensPerRound = clampKnob(c, who, "token_budget_per_round", k.tokensPerRound, g.TokenBudgetPerRound[0], g.TokenBudgetPerRound[1])
	k.totalTokens = clampKnob(c, who, "total_token_budget", k.totalTokens, g.TotalTokenBudget[0], g.TotalTokenBudget[1])
	k.oscillation = clampKnob(c, who, "oscillation_limit", k.oscillation, g.OscillationLimit[0], g.OscillationLimit[1])
	return k
}

// overlay replaces every knob of dst that src sets (non-zero).
func overlay(dst, src knobs) knobs {
	dst.maxRounds = overlayKnob(dst.maxRounds, src.maxRounds)
	dst.scoreThreshold = overlayKnob(dst.scoreThreshold, src.scoreThreshold)
	dst.diffTolerance = overlayKnob(dst.diffTolerance, src.diffTolerance)
	dst.roundTimeoutMs = overlayKnob(dst.roundTimeoutMs, src.roundTimeoutMs)
	dst.tokensPerRound = overlayKnob(dst.tokensPerRound, src.tokensPerRound)
	dst.totalTokens = overlayKnob(dst.totalTokens, src.totalTokens)
	dst.oscillation = overlayKnob(dst.oscillation, src.oscillation)
	return dst
}

func overlayKnob[T number](dst, src T) T {
	if src != 0 {
		return src
	}
	return dst
}

// prefEntry is one participant's clamped preferences.
type prefEntry struct {
	agent string
	k     knobs
}

// tighten returns the most conservative of the policy value and the participants' set
// values (the smallest, or the largest when higherIsStricter) and notes which participants
// moved it. Taking a minimum or maximum does not depend on the order of the participants.
func tighten[T number](c *clamper, name string, v T, prefs []prefEntry, get func(knobs) T, higherIsStricter bool) T {
	to := v
	for _, p := range prefs {
		pv := get(p.k)
		if pv == 0 {
			continue
		}
		if higherIsStricter {
			to = max(to, pv)
		} else {
			to = min(to, pv)
		}
	}
	if to == v {
		return v
	}
	var by []string
	for _, p := range prefs {
		if get(p.k) == to {
			by = append(by, strconv.Quote(p.agent))
		}
	}
	verb := "lowered"
	if higherIsStricter {
		verb = "raised"
	}
	c.notes = append(c.notes, fmt.Sprintf("%s %s %s to %s by the preferences of %s (the most conservative value wins, §17.2)",
		name, formatNumber(v), verb, formatNumber(to), strings.Join(by, ", ")))
	return to
}

// Derive computes a negotiation's effective policy (§17.2): it starts from the intensity's
// Default; overlays the base policy's set (non-zero) knobs, then the profile policy's; clamps
// every knob to the intensity's guardrails; clamps each participant's preferences to the
// guardrails (recorded in Effective.Applied); and then takes, per knob, the most conservative
// of the policy value and the clamped preferences: fewer rounds, a higher score threshold, a
// lower diff tolerance, a shorter round timeout, smaller budgets, a lower oscillation limit.
// The result does not depend on the order of the preferences, which are visited in sorted
// participant order so that Notes are deterministic too.
//
// hitl and scoring are not numeric knobs: a base or profile policy with a non-empty
// hitl.mode replaces the gate, and one with a scoring message replaces the whole scoring
// (each of its three fields, zero included, is meaningful). Preferences carry neither.
//
// DebateTimeout is Open's, clamped to the guardrail, or the intensity's default when 0.
//
// Derive refuses (ErrInvalidPolicy) an UNSPECIFIED or unknown intensity, a base or profile
// policy that ValidatePolicy refuses, preferences that ValidatePreferences refuses or are keyed
// by an empty participant, and a negative debate timeout.
func Derive(in DeriveInput) (Derived, error) {
	g, err := GuardrailsFor(in.Intensity)
	if err != nil {
		return Derived{}, err
	}
	if err := ValidatePolicy(in.Base); err != nil {
		return Derived{}, fmt.Errorf("base policy: %w", err)
	}
	profileName := "profile " + strconv.Quote(in.Profile.GetName())
	if err := ValidatePolicy(in.Profile.GetPolicy()); err != nil {
		return Derived{}, fmt.Errorf("%s: %w", profileName, err)
	}
	if in.DebateTimeout < 0 {
		return Derived{}, fmt.Errorf("%w: debate_timeout %s is negative", ErrInvalidPolicy, in.DebateTimeout)
	}
	agents := make([]string, 0, len(in.Preferences))
	// Collected, then sorted: the order of the map does not leak out (workflow code calls
	// this package).
	//workflowcheck:ignore
	for agent := range in.Preferences {
		agents = append(agents, agent)
	}
	slices.Sort(agents)
	for _, agent := range agents {
		if agent == "" {
			return Derived{}, fmt.Errorf("%w: agent preferences keyed by an empty participant id", ErrInvalidPolicy)
		}
		if err := ValidatePreferences(in.Preferences[agent]); err != nil {
			return Derived{}, fmt.Errorf("preferences of %q: %w", agent, err)
		}
	}

	c := &clamper{g: g, intensity: intensityName(in.Intensity)}
	policy := g.Default
	k := policyKnobs(policy)
	for _, src := range []struct {
		who string
		p   *policypb.NegotiationPolicy
	}{{"base policy", in.Base}, {profileName, in.Profile.GetPolicy()}} {
		if src.p == nil {
			continue
		}
		// Clamping each source before overlaying it gives the same policy as clamping after
		// (both are per knob), and lets every note name the source of the clamped value.
		k = overlay(k, c.clamp(src.who, policyKnobs(src.p)))
		if m := src.p.GetHitl().GetMode(); m != "" {
			policy.Hitl = &policypb.NegotiationPolicy_Hitl{Mode: m}
		}
		if s := src.p.GetScoring(); s != nil {
			policy.Scoring = proto.CloneOf(s)
		}
	}

	var applied map[string]*policypb.AgentPreferences
	prefs := make([]prefEntry, 0, len(agents))
	if len(agents) > 0 {
		applied = make(map[string]*policypb.AgentPreferences, len(agents))
	}
	for _, agent := range agents {
		pk := c.clamp("preferences of "+strconv.Quote(agent), preferenceKnobs(in.Preferences[agent]))
		applied[agent] = pk.preferences()
		prefs = append(prefs, prefEntry{agent: agent, k: pk})
	}
	k.maxRounds = tighten(c, "max_rounds", k.maxRounds, prefs, func(k knobs) uint32 { return k.maxRounds }, false)
	k.scoreThreshold = tighten(c, "score_threshold", k.scoreThreshold, prefs, func(k knobs) float32 { return k.scoreThreshold }, true)
	k.diffTolerance = tighten(c, "diff_tolerance", k.diffTolerance, prefs, func(k knobs) float32 { return k.diffTolerance }, false)
	k.roundTimeoutMs = tighten(c, "round_timeout_ms", k.roundTimeoutMs, prefs, func(k knobs) uint64 { return k.roundTimeoutMs }, false)
	k.tokensPerRound = tighten(c, "token_budget_per_round", k.tokensPerRound, prefs, func(k knobs) uint64 { return k.tokensPerRound }, false)
	k.totalTokens = tighten(c, "total_token_budget", k.totalTokens, prefs, func(k knobs) uint64 { return k.totalTokens }, false)
	k.oscillation = tighten(c, "oscillation_limit", k.oscillation, prefs, func(k knobs) uint32 { return k.oscillation }, false)
	k.applyTo(policy)

	timeout := g.DefaultDebateTimeout
	if in.DebateTimeout > 0 {
		timeout = min(max(in.DebateTimeout, g.DebateTimeout[0]), g.DebateTimeout[1])
		if timeout != in.DebateTimeout {
			c.notes = append(c.notes, fmt.Sprintf("debate_timeout %s clamped to %s (%s allows %s..%s)",
				in.DebateTimeout, timeout, c.intensity, g.DebateTimeout[0], g.DebateTimeout[1]))
		}
	}
	return Derived{
		Effective:     &policypb.EffectivePolicy{Policy: policy, Applied: applied},
		DebateTimeout: timeout,
		Notes:         c.notes,
	}, nil
}

// formatNumber renders a knob value for notes: integers as they are, float32 in the
// shortest form that reads back to the same float32 (0.7, not 0.699999988).
func formatNumber[T number](v T) string {
	switch x := any(v).(type) {
	case float32:
		return formatFloat(x)
	case uint32:
		return strconv.FormatUint(uint64(x), 10)
	default:
		return strconv.FormatUint(any(v).(uint64), 10)
	}
}

func formatFloat(v float32) string { return strconv.FormatFloat(float64(v), 'g', -1, 32) }
