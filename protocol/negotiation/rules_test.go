package negotiation

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
)

func TestBlend(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	cases := []struct {
		name  string
		det   float32
		confs []float64
		w     float32
		want  float32
	}{
		{"no confidences: deterministic alone", 0.8, nil, 0.5, 0.8},
		{"no confidences, weight 1: still deterministic", 0.8, []float64{}, 1, 0.8},
		{"weight 0 ignores confidences", 0.8, []float64{0}, 0, 0.8},
		{"weight 1 is the confidences alone", 0.8, []float64{0.2, 0.4}, 1, 0.3},
		{"weighted", 1, []float64{0.5}, 0.3, 0.85},
		{"mean of confidences", 0.5, []float64{1, 0, 0.5}, 0.5, 0.5},
		{"NaN and Inf confidences left out", 0.6, []float64{nan, inf, math.Inf(-1), 1}, 0.5, 0.8},
		{"only unusable confidences: deterministic alone", 0.6, []float64{nan}, 0.5, 0.6},
		{"confidences clamped", 0.5, []float64{7, -3}, 1, 0.5},
		{"weight clamped above", 0, []float64{1}, 3, 1},
		{"weight clamped below", 0.4, []float64{1}, -1, 0.4},
		{"NaN weight counts as 0", 0.4, []float64{1}, float32(nan), 0.4},
		{"deterministic clamped", 2, nil, 0.5, 1},
		{"NaN deterministic counts as 0", float32(nan), []float64{1}, 0.5, 0.5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Blend(c.det, c.confs, c.w)
			assert.InDelta(t, c.want, got, 1e-6)
			assert.False(t, math.IsNaN(float64(got)))
		})
	}
}

// TestBlendOrderIndependent: the same confidences in any order give the same bits.
func TestBlendOrderIndependent(t *testing.T) {
	confs := []float64{0.1, 0.7, 0.3, 0.9, 0.11, 0.123456789}
	want := Blend(0.42, confs, 0.37)
	for _, perm := range permutations(len(confs)) {
		in := make([]float64, len(confs))
		for i, p := range perm {
			in[i] = confs[p]
		}
		require.Equal(t, want, Blend(0.42, in, 0.37), "%v", in)
	}
}

// policy is MEDIUM-like: 3 rounds, threshold 0.75, tolerance 0.3, oscillation 1, 1000 tokens.
func testPolicy() *policypb.NegotiationPolicy {
	return &policypb.NegotiationPolicy{MaxRounds: 3, ScoreThreshold: 0.75, DiffTolerance: 0.3, OscillationLimit: 1,
		TokenBudgetPerRound: 100, TotalTokenBudget: 1000}
}

func ver(n int, author, hash string, score float32, mag float32, evals map[string]float64) Version {
	return Version{N: n, Author: author, Hash: hash, Score: score, Delta: &policypb.DeltaSummary{Magnitude: mag}, Evaluations: evals}
}

func TestEvaluateRules(t *testing.T) {
	parts := []string{"alice", "bob", "carol"}
	agree := map[string]float64{"bob": 0.9, "carol": 0.8}
	cases := []struct {
		name   string
		s      State
		reason string
		accept bool
		detail string
	}{
		{name: "nothing yet", s: State{Participants: parts, Policy: testPolicy()}},
		{name: "aborted", s: State{Participants: parts, Policy: testPolicy(), Aborted: "operator said so"}, reason: StopAborted, detail: "aborted: operator said so"},
		{name: "accepted", s: State{Participants: parts, Policy: testPolicy(), Versions: []Version{ver(1, "alice", "h1", 0.8, 0, agree)}},
			reason: StopThreshold, accept: true,
			detail: `version 1 by "alice" scored 0.8 >= score_threshold 0.75 with delta 0 <= diff_tolerance 0.3, and every other participant agreed: "bob" (0.9), "carol" (0.8)`},
		{name: "accepted at exactly the thresholds", s: State{Participants: parts, Policy: testPolicy(),
			Versions: []Version{ver(1, "alice", "h1", 0.75, 0.3, map[string]float64{"bob": 0.75, "carol": 0.75})}}, reason: StopThreshold, accept: true},
		{name: "accepted with a nil delta", s: State{Participants: parts, Policy: testPolicy(),
			Versions: []Version{{N: 1, Author: "alice", Score: 1, Evaluations: agree}}}, reason: StopThreshold, accept: true},
		{name: "not accepted: score below", s: State{Participants: parts, Policy: testPolicy(), Versions: []Version{ver(1, "alice", "h1", 0.7, 0, agree)}}},
		{name: "not accepted: delta above tolerance", s: State{Participants: parts, Policy: testPolicy(), Versions: []Version{ver(1, "alice", "h1", 0.9, 0.31, agree)}}},
		{name: "not accepted: one participant has not evaluated", s: State{Participants: parts, Policy: testPolicy(),
			Versions: []Version{ver(1, "alice", "h1", 0.9, 0, map[string]float64{"bob": 1})}}},
		{name: "not accepted: one participant disagrees", s: State{Participants: parts, Policy: testPolicy(),
			Versions: []Version{ver(1, "alice", "h1", 0.9, 0, map[string]float64{"bob": 1, "carol": 0.5})}}},
		{name: "not accepted: the author's own evaluation does not count", s: State{Participants: parts, Policy: testPolicy(),
			Versions: []Version{ver(1, "alice", "h1", 0.9, 0, map[string]float64{"alice": 1, "bob": 1})}}},
		{name: "not accepted: a single party is no unanimity", s: State{Participants: []string{"alice"}, Policy: testPolicy(),
			Versions: []Version{ver(1, "alice", "h1", 1, 0, map[string]float64{"alice": 1})}}},
		{name: "max rounds, all evaluated", s: State{Participants: parts, Policy: testPolicy(), Versions: []Version{
			ver(1, "alice", "h1", 0.5, 0, nil), ver(2, "bob", "h2", 0.5, 0.5, nil), ver(3, "carol", "h3", 0.5, 0.5, map[string]float64{"alice": 0.1, "bob": 0.2})}},
			reason: StopMaxRounds, detail: "all 3 rounds are used and version 3 is evaluated by every other participant without acceptance"},
		{name: "max rounds, waiting for an evaluation", s: State{Participants: parts, Policy: testPolicy(), Versions: []Version{
			ver(1, "alice", "h1", 0.5, 0, nil), ver(2, "bob", "h2", 0.5, 0.5, nil), ver(3, "carol", "h3", 0.5, 0.5, map[string]float64{"alice": 0.1})}}},
		{name: "max rounds 0 means no limit", s: State{Participants: parts, Policy: &policypb.NegotiationPolicy{ScoreThreshold: 0.9, OscillationLimit: 5},
			Versions: []Version{ver(1, "alice", "h1", 0.5, 0, agree)}}},
		{name: "one repeat tolerated at limit 1", s: State{Participants: []string{"a", "b"}, Policy: &policypb.NegotiationPolicy{OscillationLimit: 1, ScoreThreshold: 0.9},
			Versions: []Version{ver(1, "a", "A", 0, 0, nil), ver(2, "b", "B", 0, 1, nil), ver(3, "a", "A", 0, 1, nil)}}},
		{name: "second repeat oscillates at limit 1", s: State{Participants: []string{"a", "b"}, Policy: &policypb.NegotiationPolicy{OscillationLimit: 1, ScoreThreshold: 0.9},
			Versions: []Version{ver(1, "a", "A", 0, 0, nil), ver(2, "b", "B", 0, 1, nil), ver(3, "a", "A", 0, 1, nil), ver(4, "b", "B", 0, 1, nil)}},
			reason: StopOscillation, detail: "version 4 repeats an earlier version; 2 versions repeated earlier ones, more than oscillation_limit 1"},
		{name: "repeats counted only when the latest repeats", s: State{Participants: []string{"a", "b"}, Policy: &policypb.NegotiationPolicy{OscillationLimit: 1, ScoreThreshold: 0.9},
			Versions: []Version{ver(1, "a", "A", 0, 0, nil), ver(2, "b", "A", 0, 0, nil), ver(3, "a", "A", 0, 0, nil), ver(4, "b", "C", 0, 1, nil)}}},
		{name: "empty hashes never repeat", s: State{Participants: []string{"a", "b"}, Policy: &policypb.NegotiationPolicy{ScoreThreshold: 0.9},
			Versions: []Version{ver(1, "a", "", 0, 0, nil), ver(2, "b", "", 0, 0, nil)}}},
		{name: "budget spent", s: State{Participants: parts, Policy: testPolicy(), TokensUsed: 1001}, reason: StopBudget, detail: "1001 tokens used, more than total_token_budget 1000"},
		{name: "budget exactly used is not over", s: State{Participants: parts, Policy: testPolicy(), TokensUsed: 1000}},
		{name: "no total budget", s: State{Participants: parts, Policy: &policypb.NegotiationPolicy{}, TokensUsed: math.MaxUint64}},
		{name: "round timeout", s: State{Participants: parts, Policy: testPolicy(), RoundTimedOut: true}, reason: StopTimeout, detail: "round_timeout expired"},
		{name: "debate timeout", s: State{Participants: parts, Policy: testPolicy(), DebateTimedOut: true, RoundTimedOut: true}, reason: StopTimeout, detail: "debate_timeout expired"},
		{name: "nil policy: nothing but abort, repeats and timeouts", s: State{Participants: parts, TokensUsed: 5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Evaluate(c.s)
			assert.Equal(t, c.reason != "", v.Stop)
			assert.Equal(t, c.reason, v.Reason)
			assert.Equal(t, c.accept, v.Accept)
			if c.detail != "" {
				assert.Equal(t, c.detail, v.Detail)
			}
		})
	}
}

// TestEvaluateOrder: when several rules apply, the earlier one in the documented order wins.
func TestEvaluateOrder(t *testing.T) {
	p := &policypb.NegotiationPolicy{MaxRounds: 4, ScoreThreshold: 0.75, DiffTolerance: 0.3, OscillationLimit: 1, TotalTokenBudget: 10}
	parts := []string{"a", "b"}
	// Four versions, the fourth repeating the second (second repeat: oscillation), evaluated
	// and agreed by the other party (acceptance), using every round (max_rounds).
	all := func() State {
		return State{
			Participants: parts, Policy: p, TokensUsed: 11, RoundTimedOut: true, DebateTimedOut: true, Aborted: "stop",
			Versions: []Version{ver(1, "a", "A", 0, 0, nil), ver(2, "b", "B", 0, 1, nil), ver(3, "a", "A", 0, 1, nil),
				ver(4, "b", "B", 0.9, 0.1, map[string]float64{"a": 0.9})},
		}
	}
	steps := []struct {
		reason string
		peel   func(*State) // removes the condition of this rule
	}{
		{StopAborted, func(s *State) { s.Aborted = "" }},
		{StopThreshold, func(s *State) { s.Versions[3].Score = 0.1 }},
		{StopMaxRounds, func(s *State) {
			s.Policy = &policypb.NegotiationPolicy{MaxRounds: 9, ScoreThreshold: 0.75, OscillationLimit: 1, TotalTokenBudget: 10}
		}},
		{StopOscillation, func(s *State) { s.Versions[3].Hash = "D" }},
		{StopBudget, func(s *State) { s.TokensUsed = 0 }},
		{StopTimeout, func(s *State) { s.RoundTimedOut, s.DebateTimedOut = false, false }},
	}
	s := all()
	for _, step := range steps {
		v := Evaluate(s)
		require.True(t, v.Stop)
		assert.Equal(t, step.reason, v.Reason)
		step.peel(&s)
	}
	assert.False(t, Evaluate(s).Stop, "every condition removed")
}

func TestCanDraft(t *testing.T) {
	p := testPolicy()
	parts := []string{"alice", "bob"}
	v := func(n int) []Version {
		out := make([]Version, n)
		for i := range out {
			out[i] = Version{N: i + 1, Author: parts[i%2]}
		}
		return out
	}
	cases := []struct {
		name    string
		s       State
		author  string
		tokens  uint64
		want    error
		message string
	}{
		{name: "first draft by the first participant", s: State{Participants: parts, Policy: p}, author: "alice", tokens: 100},
		{name: "second draft by the second", s: State{Participants: parts, Policy: p, Versions: v(1)}, author: "bob", tokens: 1},
		{name: "third draft wraps around", s: State{Participants: parts, Policy: p, Versions: v(2)}, author: "alice"},
		{name: "not a participant", s: State{Participants: parts, Policy: p}, author: "mallory", want: ErrNotParticipant,
			message: `not a participant of this negotiation: "mallory" is not one of "alice", "bob"`},
		{name: "no participants at all", s: State{Policy: p}, author: "alice", want: ErrNotParticipant},
		{name: "out of turn", s: State{Participants: parts, Policy: p, Versions: v(1)}, author: "alice", want: ErrOutOfTurn,
			message: `not this participant's turn: draft 2 is "bob"'s to write (participants take turns in the order "alice", "bob")`},
		{name: "no rounds left", s: State{Participants: parts, Policy: p, Versions: v(3)}, author: "bob", want: ErrNoRoundsLeft,
			message: "no rounds left: all 3 rounds of max_rounds are used"},
		{name: "no rounds left wins over turn", s: State{Participants: parts, Policy: p, Versions: v(3)}, author: "alice", want: ErrNoRoundsLeft},
		{name: "over the per-round budget", s: State{Participants: parts, Policy: p}, author: "alice", tokens: 101, want: ErrOverBudget,
			message: "draft over the per-round token budget: the draft is about 101 tokens, token_budget_per_round is 100"},
		{name: "turn checked before budget", s: State{Participants: parts, Policy: p}, author: "bob", tokens: 1000, want: ErrOutOfTurn},
		{name: "nil policy: no round or budget limit", s: State{Participants: parts, Versions: v(40)}, author: "alice", tokens: math.MaxUint64},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CanDraft(c.s, c.author, c.tokens)
			if c.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, c.want)
			for _, other := range []error{ErrNotParticipant, ErrOutOfTurn, ErrNoRoundsLeft, ErrOverBudget} {
				if other != c.want {
					assert.NotErrorIs(t, err, other)
				}
			}
			if c.message != "" {
				assert.Equal(t, c.message, err.Error())
			}
		})
	}
}

func TestTieBreak(t *testing.T) {
	p := testPolicy()
	_, _, ok := TieBreak(State{Policy: p})
	assert.False(t, ok, "no versions")

	cases := []struct {
		name   string
		scores []float32
		pick   int
		accept bool
	}{
		{"single below threshold", []float32{0.5}, 1, false},
		{"highest wins", []float32{0.6, 0.8, 0.7}, 2, true},
		{"ties go to the later version", []float32{0.8, 0.6, 0.8}, 3, true},
		{"all equal: the last", []float32{0.4, 0.4, 0.4}, 3, false},
		{"exactly the threshold accepts", []float32{0.75}, 1, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := State{Policy: p}
			for i, sc := range c.scores {
				s.Versions = append(s.Versions, Version{N: i + 1, Score: sc})
			}
			v, accept, ok := TieBreak(s)
			require.True(t, ok)
			assert.Equal(t, c.pick, v.N)
			assert.Equal(t, c.accept, accept)
		})
	}
}
