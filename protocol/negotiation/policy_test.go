package negotiation

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
)

// TestGuardrailsTable pins every row of the documented table (package doc and
// docs/negotiation.md "Intensity guardrails").
func TestGuardrailsTable(t *testing.T) {
	type row struct {
		rounds         [2]uint32
		threshold      [2]float32
		tolerance      [2]float32
		roundTimeout   [2]time.Duration
		debateTimeout  [2]time.Duration
		tokensPerRound [2]uint64
		totalTokens    [2]uint64
		oscillation    [2]uint32
		def            *policypb.NegotiationPolicy
		defDebate      time.Duration
	}
	pol := func(rounds uint32, thr, tol float32, roundMs, perRound, total uint64, osc uint32, hitl string, schema, examples bool) *policypb.NegotiationPolicy {
		return &policypb.NegotiationPolicy{
			MaxRounds: rounds, ScoreThreshold: thr, DiffTolerance: tol, RoundTimeoutMs: roundMs,
			TokenBudgetPerRound: perRound, TotalTokenBudget: total, OscillationLimit: osc,
			Hitl:    &policypb.NegotiationPolicy_Hitl{Mode: hitl},
			Scoring: &policypb.NegotiationPolicy_Scoring{RequireSchemaValid: schema, RequireExamplesPass: examples, LlmWeight: 0.3},
		}
	}
	want := map[commonpb.DebateIntensity]row{
		commonpb.DebateIntensity_LOWEST: {
			[2]uint32{1, 2}, [2]float32{0.6, 0.8}, [2]float32{0.2, 0.5},
			[2]time.Duration{5 * time.Second, 30 * time.Second}, [2]time.Duration{30 * time.Second, 2 * time.Minute},
			[2]uint64{256, 4096}, [2]uint64{1024, 8192}, [2]uint32{1, 1},
			pol(2, 0.6, 0.5, 30_000, 2048, 4096, 1, HitlNone, false, false), time.Minute,
		},
		commonpb.DebateIntensity_LOW: {
			[2]uint32{1, 4}, [2]float32{0.65, 0.85}, [2]float32{0.15, 0.4},
			[2]time.Duration{10 * time.Second, time.Minute}, [2]time.Duration{time.Minute, 8 * time.Minute},
			[2]uint64{512, 8192}, [2]uint64{2048, 32768}, [2]uint32{1, 2},
			pol(4, 0.7, 0.4, 60_000, 4096, 16384, 1, HitlNone, true, false), 4 * time.Minute,
		},
		commonpb.DebateIntensity_MEDIUM: {
			[2]uint32{2, 6}, [2]float32{0.7, 0.9}, [2]float32{0.1, 0.3},
			[2]time.Duration{15 * time.Second, 3 * time.Minute}, [2]time.Duration{2 * time.Minute, 30 * time.Minute},
			[2]uint64{1024, 16384}, [2]uint64{4096, 131072}, [2]uint32{1, 2},
			pol(6, 0.75, 0.3, 120_000, 8192, 49152, 2, HitlNone, true, true), 12 * time.Minute,
		},
		commonpb.DebateIntensity_HIGH: {
			[2]uint32{2, 9}, [2]float32{0.75, 0.95}, [2]float32{0.05, 0.2},
			[2]time.Duration{30 * time.Second, 5 * time.Minute}, [2]time.Duration{5 * time.Minute, 90 * time.Minute},
			[2]uint64{2048, 32768}, [2]uint64{8192, 524288}, [2]uint32{1, 3},
			pol(9, 0.8, 0.2, 300_000, 16384, 147456, 2, HitlPauseOnFinalAccept, true, true), 45 * time.Minute,
		},
		commonpb.DebateIntensity_HIGHEST: {
			[2]uint32{3, 12}, [2]float32{0.8, 1}, [2]float32{0.02, 0.15},
			[2]time.Duration{time.Minute, 10 * time.Minute}, [2]time.Duration{10 * time.Minute, 4 * time.Hour},
			[2]uint64{4096, 65536}, [2]uint64{16384, 1048576}, [2]uint32{1, 3},
			pol(12, 0.9, 0.1, 600_000, 32768, 393216, 3, HitlPauseBetweenRounds, true, true), 2 * time.Hour,
		},
	}
	for _, i := range Intensities() {
		t.Run(i.String(), func(t *testing.T) {
			g, err := GuardrailsFor(i)
			require.NoError(t, err)
			w := want[i]
			assert.Equal(t, w.rounds, g.MaxRounds)
			assert.Equal(t, w.threshold, g.ScoreThreshold)
			assert.Equal(t, w.tolerance, g.DiffTolerance)
			assert.Equal(t, w.roundTimeout, g.RoundTimeout)
			assert.Equal(t, w.debateTimeout, g.DebateTimeout)
			assert.Equal(t, w.tokensPerRound, g.TokenBudgetPerRound)
			assert.Equal(t, w.totalTokens, g.TotalTokenBudget)
			assert.Equal(t, w.oscillation, g.OscillationLimit)
			assert.True(t, proto.Equal(w.def, g.Default), "default policy: got %v, want %v", g.Default, w.def)
			assert.Equal(t, w.defDebate, g.DefaultDebateTimeout)

			// The default lies inside every bound, and the documented products hold.
			d := g.Default
			assert.True(t, within(d.GetMaxRounds(), g.MaxRounds))
			assert.True(t, within(d.GetScoreThreshold(), g.ScoreThreshold))
			assert.True(t, within(d.GetDiffTolerance(), g.DiffTolerance))
			assert.True(t, within(time.Duration(d.GetRoundTimeoutMs())*time.Millisecond, g.RoundTimeout))
			assert.True(t, within(g.DefaultDebateTimeout, g.DebateTimeout))
			assert.True(t, within(d.GetTokenBudgetPerRound(), g.TokenBudgetPerRound))
			assert.True(t, within(d.GetTotalTokenBudget(), g.TotalTokenBudget))
			assert.True(t, within(d.GetOscillationLimit(), g.OscillationLimit))
			assert.Equal(t, time.Duration(d.GetMaxRounds())*time.Duration(d.GetRoundTimeoutMs())*time.Millisecond, g.DefaultDebateTimeout)
			assert.Equal(t, uint64(d.GetMaxRounds())*d.GetTokenBudgetPerRound(), d.GetTotalTokenBudget())
			require.NoError(t, ValidatePolicy(d))
		})
	}
}

func within[T int64 | uint32 | uint64 | float32 | time.Duration](v T, b [2]T) bool {
	return b[0] <= v && v <= b[1]
}

// TestGuardrailsRigourGrows: from LOWEST to HIGHEST no bound or default gets laxer.
func TestGuardrailsRigourGrows(t *testing.T) {
	var prev Guardrails
	for n, i := range Intensities() {
		g, err := GuardrailsFor(i)
		require.NoError(t, err)
		if n > 0 {
			assert.GreaterOrEqual(t, g.MaxRounds[1], prev.MaxRounds[1], "%s max rounds", i)
			assert.GreaterOrEqual(t, g.ScoreThreshold[0], prev.ScoreThreshold[0], "%s threshold min", i)
			assert.Greater(t, g.Default.GetScoreThreshold(), prev.Default.GetScoreThreshold(), "%s threshold", i)
			assert.Less(t, g.Default.GetDiffTolerance(), prev.Default.GetDiffTolerance(), "%s tolerance", i)
			assert.Greater(t, g.RoundTimeout[1], prev.RoundTimeout[1], "%s round timeout", i)
			assert.Greater(t, g.DefaultDebateTimeout, prev.DefaultDebateTimeout, "%s debate timeout", i)
			assert.Greater(t, g.TotalTokenBudget[1], prev.TotalTokenBudget[1], "%s total budget", i)
		}
		prev = g
	}
}

func TestGuardrailsForRefusesUnspecified(t *testing.T) {
	for _, i := range []commonpb.DebateIntensity{commonpb.DebateIntensity_DEBATE_INTENSITY_UNSPECIFIED, 6, -1} {
		_, err := GuardrailsFor(i)
		require.ErrorIs(t, err, ErrInvalidPolicy, "%d", i)
		assert.Contains(t, err.Error(), "LOWEST, LOW, MEDIUM, HIGH, HIGHEST")
	}
}

// TestGuardrailsForFreshDefault: changing a returned Default does not change the table.
func TestGuardrailsForFreshDefault(t *testing.T) {
	g, err := GuardrailsFor(commonpb.DebateIntensity_MEDIUM)
	require.NoError(t, err)
	g.Default.MaxRounds = 99
	g.Default.Hitl.Mode = "x"
	again, err := GuardrailsFor(commonpb.DebateIntensity_MEDIUM)
	require.NoError(t, err)
	assert.Equal(t, uint32(6), again.Default.GetMaxRounds())
	assert.Equal(t, HitlNone, again.Default.GetHitl().GetMode())
}

func TestValidatePolicy(t *testing.T) {
	nan := float32(math.NaN())
	cases := []struct {
		name string
		p    *policypb.NegotiationPolicy
		want []string // substrings of the error; none = valid
	}{
		{name: "nil", p: nil},
		{name: "empty: every field unset", p: &policypb.NegotiationPolicy{}},
		{name: "full valid", p: &policypb.NegotiationPolicy{
			MaxRounds: 3, ScoreThreshold: 1, DiffTolerance: 0.01, RoundTimeoutMs: 1,
			Hitl: &policypb.NegotiationPolicy_Hitl{Mode: HitlPauseOnFinalAccept}, Scoring: &policypb.NegotiationPolicy_Scoring{LlmWeight: 1},
		}},
		{name: "threshold above 1", p: &policypb.NegotiationPolicy{ScoreThreshold: 1.5}, want: []string{"score_threshold 1.5 is outside 0..1"}},
		{name: "threshold negative", p: &policypb.NegotiationPolicy{ScoreThreshold: -0.1}, want: []string{"score_threshold -0.1 is outside 0..1"}},
		{name: "threshold NaN", p: &policypb.NegotiationPolicy{ScoreThreshold: nan}, want: []string{"score_threshold NaN"}},
		{name: "tolerance infinite", p: &policypb.NegotiationPolicy{DiffTolerance: float32(math.Inf(1))}, want: []string{"diff_tolerance +Inf is outside 0..1"}},
		{name: "llm weight", p: &policypb.NegotiationPolicy{Scoring: &policypb.NegotiationPolicy_Scoring{LlmWeight: 2}}, want: []string{"scoring.llm_weight 2 is outside 0..1"}},
		{name: "unknown hitl mode", p: &policypb.NegotiationPolicy{Hitl: &policypb.NegotiationPolicy_Hitl{Mode: "pausebetweenrounds"}},
			want: []string{`hitl.mode "pausebetweenrounds" is not one of None, PauseBetweenRounds, PauseOnFinalAccept`}},
		{name: "round timeout overflows", p: &policypb.NegotiationPolicy{RoundTimeoutMs: math.MaxUint64}, want: []string{"round_timeout_ms 18446744073709551615 is too large"}},
		{name: "every problem listed", p: &policypb.NegotiationPolicy{ScoreThreshold: 2, DiffTolerance: -1, Hitl: &policypb.NegotiationPolicy_Hitl{Mode: "Sometimes"}},
			want: []string{"score_threshold 2", "; diff_tolerance -1", `; hitl.mode "Sometimes"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := ValidatePolicy(c.p)
			if len(c.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidPolicy)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestValidatePreferences(t *testing.T) {
	require.NoError(t, ValidatePreferences(nil))
	require.NoError(t, ValidatePreferences(&policypb.AgentPreferences{MaxRounds: 99, ScoreThreshold: 1, TotalTokenBudget: math.MaxUint64}))
	err := ValidatePreferences(&policypb.AgentPreferences{ScoreThreshold: 1.2, DiffTolerance: float32(math.NaN()), RoundTimeoutMs: math.MaxUint64})
	require.ErrorIs(t, err, ErrInvalidPolicy)
	assert.Contains(t, err.Error(), "score_threshold 1.2 is outside 0..1")
	assert.Contains(t, err.Error(), "diff_tolerance NaN is outside 0..1")
	assert.Contains(t, err.Error(), "round_timeout_ms 18446744073709551615 is too large")
}

// TestDeriveDefaults: with nothing but the intensity the effective policy is the row's default.
func TestDeriveDefaults(t *testing.T) {
	for _, i := range Intensities() {
		g, err := GuardrailsFor(i)
		require.NoError(t, err)
		d, err := Derive(DeriveInput{Intensity: i})
		require.NoError(t, err)
		assert.True(t, proto.Equal(g.Default, d.Effective.GetPolicy()), "%s", i)
		assert.Nil(t, d.Effective.GetApplied())
		assert.Equal(t, g.DefaultDebateTimeout, d.DebateTimeout)
		assert.Empty(t, d.Notes)
	}
}

func TestDeriveOverlayAndClamp(t *testing.T) {
	base := &policypb.NegotiationPolicy{
		MaxRounds:        20,   // above MEDIUM's 6: clamped
		ScoreThreshold:   0.8,  // inside 0.7..0.9: kept
		DiffTolerance:    0.01, // below 0.1: clamped up
		RoundTimeoutMs:   1000, // below 15 s: clamped up
		TotalTokenBudget: 5000, // inside: kept
		Hitl:             &policypb.NegotiationPolicy_Hitl{Mode: HitlPauseBetweenRounds},
		Scoring:          &policypb.NegotiationPolicy_Scoring{RequireSchemaValid: false, RequireExamplesPass: false, LlmWeight: 0},
	}
	profile := &policypb.PolicyProfile{Name: "strict", Policy: &policypb.NegotiationPolicy{
		MaxRounds:        4,     // overrides the base
		OscillationLimit: 9,     // above 2: clamped
		TotalTokenBudget: 10000, // overrides the base
	}}
	d, err := Derive(DeriveInput{Intensity: commonpb.DebateIntensity_MEDIUM, Base: base, Profile: profile})
	require.NoError(t, err)
	want := &policypb.NegotiationPolicy{
		MaxRounds: 4, ScoreThreshold: 0.8, DiffTolerance: 0.1, RoundTimeoutMs: 15_000,
		TokenBudgetPerRound: 8192, TotalTokenBudget: 10000, OscillationLimit: 2,
		Hitl:    &policypb.NegotiationPolicy_Hitl{Mode: HitlPauseBetweenRounds},
		Scoring: &policypb.NegotiationPolicy_Scoring{},
	}
	assert.True(t, proto.Equal(want, d.Effective.GetPolicy()), "got %v", d.Effective.GetPolicy())
	assert.Equal(t, []string{
		"base policy: max_rounds 20 clamped to 6 (MEDIUM allows 2..6)",
		"base policy: diff_tolerance 0.01 clamped to 0.1 (MEDIUM allows 0.1..0.3)",
		"base policy: round_timeout_ms 1000 clamped to 15000 (MEDIUM allows 15000..180000)",
		`profile "strict": oscillation_limit 9 clamped to 2 (MEDIUM allows 1..2)`,
	}, d.Notes)
	// The base policy the caller passed is not modified.
	assert.Equal(t, uint32(20), base.GetMaxRounds())
}

// TestDeriveProfileKeepsBaseGateWithoutOwn: a profile without hitl or scoring leaves the base's.
func TestDeriveProfileKeepsBaseGateWithoutOwn(t *testing.T) {
	d, err := Derive(DeriveInput{
		Intensity: commonpb.DebateIntensity_HIGHEST,
		Base:      &policypb.NegotiationPolicy{Hitl: &policypb.NegotiationPolicy_Hitl{Mode: HitlNone}},
		Profile:   &policypb.PolicyProfile{Name: "p", Policy: &policypb.NegotiationPolicy{Hitl: &policypb.NegotiationPolicy_Hitl{}}},
	})
	require.NoError(t, err)
	assert.Equal(t, HitlNone, d.Effective.GetPolicy().GetHitl().GetMode())
	assert.True(t, d.Effective.GetPolicy().GetScoring().GetRequireExamplesPass(), "the intensity's scoring stays")
}

// TestDerivePreferences: each preference is clamped (Applied) and the most conservative value
// per knob wins, whatever participant holds which preference.
func TestDerivePreferences(t *testing.T) {
	prefs := []*policypb.AgentPreferences{
		{MaxRounds: 3, ScoreThreshold: 0.5, RoundTimeoutMs: 90_000},            // threshold below 0.7: clamped to 0.7
		{MaxRounds: 1, DiffTolerance: 0.2, TokenBudgetPerRound: 100_000},       // rounds below 2: clamped to 2; budget above 16384: clamped
		{ScoreThreshold: 0.85, TotalTokenBudget: 6000, OscillationLimit: 1},    // all inside
		{ScoreThreshold: 0.99, DiffTolerance: 0.25, TokenBudgetPerRound: 2000}, // threshold above 0.9: clamped
		{}, // no preference at all
		{MaxRounds: 5, RoundTimeoutMs: 10_000, TotalTokenBudget: 1, DiffTolerance: 1}, // clamped up to 15 s and 4096, tolerance down to 0.3
	}
	wantApplied := []*policypb.AgentPreferences{
		{MaxRounds: 3, ScoreThreshold: 0.7, RoundTimeoutMs: 90_000},
		{MaxRounds: 2, DiffTolerance: 0.2, TokenBudgetPerRound: 16384},
		{ScoreThreshold: 0.85, TotalTokenBudget: 6000, OscillationLimit: 1},
		{ScoreThreshold: 0.9, DiffTolerance: 0.25, TokenBudgetPerRound: 2000},
		{},
		{MaxRounds: 5, RoundTimeoutMs: 15_000, TotalTokenBudget: 4096, DiffTolerance: 0.3},
	}
	want := &policypb.NegotiationPolicy{
		MaxRounds: 2, ScoreThreshold: 0.9, DiffTolerance: 0.2, RoundTimeoutMs: 15_000,
		TokenBudgetPerRound: 2000, TotalTokenBudget: 4096, OscillationLimit: 1,
		Hitl:    &policypb.NegotiationPolicy_Hitl{Mode: HitlNone},
		Scoring: &policypb.NegotiationPolicy_Scoring{RequireSchemaValid: true, RequireExamplesPass: true, LlmWeight: 0.3},
	}
	agents := []string{"a", "b", "c", "d", "e", "f"}
	perms := permutations(len(prefs))
	require.Len(t, perms, 720)
	for _, perm := range perms {
		in := map[string]*policypb.AgentPreferences{}
		for i, p := range perm {
			in[agents[i]] = prefs[p]
		}
		d, err := Derive(DeriveInput{Intensity: commonpb.DebateIntensity_MEDIUM, Preferences: in})
		require.NoError(t, err)
		require.True(t, proto.Equal(want, d.Effective.GetPolicy()), "perm %v: got %v", perm, d.Effective.GetPolicy())
		for i, p := range perm {
			require.True(t, proto.Equal(wantApplied[p], d.Effective.GetApplied()[agents[i]]), "perm %v agent %s", perm, agents[i])
		}
	}
}

// TestDerivePreferencesTightenBase: preferences only ever tighten the base policy; a looser
// preference leaves it as it is.
func TestDerivePreferencesTightenBase(t *testing.T) {
	base := &policypb.NegotiationPolicy{MaxRounds: 3, ScoreThreshold: 0.8}
	d, err := Derive(DeriveInput{
		Intensity:   commonpb.DebateIntensity_MEDIUM,
		Base:        base,
		Preferences: map[string]*policypb.AgentPreferences{"alice": {MaxRounds: 6, ScoreThreshold: 0.72}, "bob": {MaxRounds: 2}},
	})
	require.NoError(t, err)
	p := d.Effective.GetPolicy()
	assert.Equal(t, uint32(2), p.GetMaxRounds())
	assert.Equal(t, float32(0.8), p.GetScoreThreshold())
	assert.Equal(t, []string{`max_rounds 3 lowered to 2 by the preferences of "bob" (the most conservative value wins, §17.2)`}, d.Notes)
}

func TestDeriveNotesNameEveryTighteningParticipant(t *testing.T) {
	d, err := Derive(DeriveInput{
		Intensity:   commonpb.DebateIntensity_LOW,
		Preferences: map[string]*policypb.AgentPreferences{"zed": {ScoreThreshold: 0.8}, "amy": {ScoreThreshold: 0.8}, "bo": {ScoreThreshold: 0.75}},
	})
	require.NoError(t, err)
	assert.Equal(t, []string{`score_threshold 0.7 raised to 0.8 by the preferences of "amy", "zed" (the most conservative value wins, §17.2)`}, d.Notes)
}

func TestDeriveDebateTimeout(t *testing.T) {
	cases := []struct {
		in, want time.Duration
		note     string
	}{
		{0, 12 * time.Minute, ""},
		{5 * time.Minute, 5 * time.Minute, ""},
		{time.Second, 2 * time.Minute, "debate_timeout 1s clamped to 2m0s (MEDIUM allows 2m0s..30m0s)"},
		{10 * time.Hour, 30 * time.Minute, "debate_timeout 10h0m0s clamped to 30m0s (MEDIUM allows 2m0s..30m0s)"},
	}
	for _, c := range cases {
		d, err := Derive(DeriveInput{Intensity: commonpb.DebateIntensity_MEDIUM, DebateTimeout: c.in})
		require.NoError(t, err)
		assert.Equal(t, c.want, d.DebateTimeout, "%s", c.in)
		if c.note == "" {
			assert.Empty(t, d.Notes)
		} else {
			assert.Equal(t, []string{c.note}, d.Notes)
		}
	}
}

func TestDeriveRefusals(t *testing.T) {
	cases := []struct {
		name string
		in   DeriveInput
		want string
	}{
		{"unspecified intensity", DeriveInput{}, "DEBATE_INTENSITY_UNSPECIFIED is not one of"},
		{"bad base", DeriveInput{Intensity: 1, Base: &policypb.NegotiationPolicy{ScoreThreshold: 3}}, "base policy: invalid negotiation policy: score_threshold 3"},
		{"bad profile", DeriveInput{Intensity: 1, Profile: &policypb.PolicyProfile{Name: "x", Policy: &policypb.NegotiationPolicy{Hitl: &policypb.NegotiationPolicy_Hitl{Mode: "?"}}}},
			`profile "x": invalid negotiation policy: hitl.mode "?"`},
		{"bad preference", DeriveInput{Intensity: 1, Preferences: map[string]*policypb.AgentPreferences{"bob": {DiffTolerance: -1}}},
			`preferences of "bob": invalid negotiation policy: diff_tolerance -1`},
		{"empty participant", DeriveInput{Intensity: 1, Preferences: map[string]*policypb.AgentPreferences{"": {}}}, "empty participant id"},
		{"negative timeout", DeriveInput{Intensity: 1, DebateTimeout: -time.Second}, "debate_timeout -1s is negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Derive(c.in)
			require.ErrorIs(t, err, ErrInvalidPolicy)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// TestDeriveNilPreference: a participant listed with nil preferences has none, recorded empty.
func TestDeriveNilPreference(t *testing.T) {
	d, err := Derive(DeriveInput{Intensity: commonpb.DebateIntensity_LOW, Preferences: map[string]*policypb.AgentPreferences{"a": nil}})
	require.NoError(t, err)
	require.Contains(t, d.Effective.GetApplied(), "a")
	assert.True(t, proto.Equal(&policypb.AgentPreferences{}, d.Effective.GetApplied()["a"]))
}

// permutations lists every ordering of 0..n-1 (Heap's algorithm).
func permutations(n int) [][]int {
	a := make([]int, n)
	for i := range a {
		a[i] = i
	}
	var out [][]int
	var gen func(k int)
	gen = func(k int) {
		if k == 1 {
			out = append(out, append([]int(nil), a...))
			return
		}
		for i := 0; i < k; i++ {
			gen(k - 1)
			if k%2 == 0 {
				a[i], a[k-1] = a[k-1], a[i]
			} else {
				a[0], a[k-1] = a[k-1], a[0]
			}
		}
	}
	gen(n)
	return out
}
