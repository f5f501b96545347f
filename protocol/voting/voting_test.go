package voting

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
)

// tol is the tolerance of every float comparison in these tests.
const tol = 1e-9

// vt builds a vote on artifact "code-123".
func vt(critic string, score, confidence float64, passed bool, recs ...string) *negotiationroompb.NegotiationVote {
	return &negotiationroompb.NegotiationVote{
		ArtifactId:      "code-123",
		CriticId:        critic,
		Score:           score,
		Confidence:      confidence,
		Passed:          passed,
		Recommendations: recs,
	}
}

// aggCase is one hand-computed aggregation: the shared statistics and the weighted_mean each
// strategy must produce.
type aggCase struct {
	name                 string
	votes                []*negotiationroompb.NegotiationVote
	count                int32
	mean, lo, hi, stdDev float64
	simple, confidence   float64
	majority, borda      float64
}

func aggregationCases() []aggCase {
	return []aggCase{
		{
			// 003 §6.14.5 "Swapping Strategies" example.
			name:  "003 two-vote example",
			votes: []*negotiationroompb.NegotiationVote{vt("critic-1", 8.5, 0.9, true), vt("critic-2", 6.5, 0.6, false)},
			count: 2,
			// mean = (8.5+6.5)/2 = 7.5; min 6.5; max 8.5
			mean: 7.5, lo: 6.5, hi: 8.5,
			// deviations +1, -1 -> variance (1+1)/2 = 1 -> std_dev 1
			stdDev: 1.0,
			simple: 7.5,
			// (8.5*0.9 + 6.5*0.6) / (0.9+0.6) = (7.65+3.9)/1.5 = 11.55/1.5 = 7.7
			confidence: 7.7,
			// 1 passed, 1 failed -> tie -> 5.0
			majority: 5.0,
			// ranks 8.5 -> 2 points, 6.5 -> 1 point: (2*8.5 + 1*6.5)/(2+1) = 23.5/3 = 7.833333...
			borda: 23.5 / 3,
		},
		{
			name:  "single passing vote",
			votes: []*negotiationroompb.NegotiationVote{vt("c1", 7, 0.8, true)},
			count: 1,
			// every statistic is the one score; variance 0/1 = 0
			mean: 7, lo: 7, hi: 7, stdDev: 0,
			simple:     7,
			confidence: 7, // 7*0.8/0.8
			majority:   10,
			borda:      7, // 1*7/1
		},
		{
			name:  "single failing vote",
			votes: []*negotiationroompb.NegotiationVote{vt("c1", 4, 0.5, false)},
			count: 1,
			mean:  4, lo: 4, hi: 4, stdDev: 0,
			simple: 4, confidence: 4, // 4*0.5/0.5
			majority: 0, // all failed
			borda:    4,
		},
		{
			name: "three votes with tied scores",
			votes: []*negotiationroompb.NegotiationVote{
				vt("c1", 6, 0.5, true), vt("c2", 6, 1.0, true), vt("c3", 2, 0.5, false),
			},
			count: 3,
			// mean = 14/3 = 4.666...; min 2; max 6
			mean: 14.0 / 3, lo: 2, hi: 6,
			// deviations 4/3, 4/3, -8/3 -> (16+16+64)/9 = 96/9; /3 = 32/9; sqrt = 1.8856180831641267
			stdDev: 1.8856180831641267,
			simple: 14.0 / 3,
			// (6*0.5 + 6*1.0 + 2*0.5)/(0.5+1.0+0.5) = (3+6+1)/2 = 5
			confidence: 5,
			// 2 passed > 1 failed -> 7.5
			majority: 7.5,
			// 6 -> 3 pts, 6 -> 2 pts, 2 -> 1 pt: (18+12+2)/6 = 32/6 = 5.333...
			borda: 32.0 / 6,
		},
		{
			name: "all confidences zero fall back to the mean",
			votes: []*negotiationroompb.NegotiationVote{
				vt("c1", 9, 0, true), vt("c2", 5, 0, false), vt("c3", 4, 0, false),
			},
			count: 3,
			// mean = 18/3 = 6; min 4; max 9
			mean: 6, lo: 4, hi: 9,
			// deviations 3, -1, -2 -> (9+1+4)/3 = 14/3; sqrt = 2.1602468994692867
			stdDev: 2.1602468994692867,
			simple: 6,
			// sum(confidence) = 0 -> fallback to mean = 6
			confidence: 6,
			// 1 passed < 2 failed -> 2.5
			majority: 2.5,
			// 9 -> 3, 5 -> 2, 4 -> 1: (27+10+4)/6 = 41/6 = 6.8333...
			borda: 41.0 / 6,
		},
		{
			name: "all passed",
			votes: []*negotiationroompb.NegotiationVote{
				vt("c1", 8, 0.9, true), vt("c2", 9, 0.8, true), vt("c3", 10, 0.7, true),
			},
			count: 3,
			// mean = 27/3 = 9
			mean: 9, lo: 8, hi: 10,
			// deviations -1, 0, 1 -> 2/3; sqrt = 0.8164965809277259
			stdDev: 0.8164965809277259,
			simple: 9,
			// (8*0.9 + 9*0.8 + 10*0.7)/(0.9+0.8+0.7) = (7.2+7.2+7)/2.4 = 21.4/2.4 = 8.91666...
			confidence: 21.4 / 2.4,
			majority:   10,
			// 10 -> 3, 9 -> 2, 8 -> 1: (30+18+8)/6 = 56/6 = 9.333...
			borda: 56.0 / 6,
		},
		{
			name: "all failed",
			votes: []*negotiationroompb.NegotiationVote{
				vt("c1", 1, 0.5, false), vt("c2", 2, 0.5, false), vt("c3", 3, 1.0, false),
			},
			count: 3,
			// mean = 6/3 = 2
			mean: 2, lo: 1, hi: 3,
			// deviations -1, 0, 1 -> sqrt(2/3)
			stdDev: 0.8164965809277259,
			simple: 2,
			// (0.5 + 1 + 3)/(0.5+0.5+1) = 4.5/2 = 2.25
			confidence: 2.25,
			majority:   0,
			// 3 -> 3, 2 -> 2, 1 -> 1: (9+4+1)/6 = 14/6 = 2.333...
			borda: 14.0 / 6,
		},
		{
			name: "majority passed (3 of 4)",
			votes: []*negotiationroompb.NegotiationVote{
				vt("c1", 8, 1, true), vt("c2", 7, 1, true), vt("c3", 7.5, 1, true), vt("c4", 3, 1, false),
			},
			count: 4,
			// mean = 25.5/4 = 6.375
			mean: 6.375, lo: 3, hi: 8,
			// deviations 1.625, 0.625, 1.125, -3.375 -> 2.640625+0.390625+1.265625+11.390625
			// = 15.6875; /4 = 3.921875; sqrt = 1.9803724397193574
			stdDev: 1.9803724397193574,
			simple: 6.375,
			// all confidences 1 -> same as mean
			confidence: 6.375,
			// 3 passed > 1 failed -> 7.5
			majority: 7.5,
			// 8 -> 4, 7.5 -> 3, 7 -> 2, 3 -> 1: (32+22.5+14+3)/10 = 71.5/10 = 7.15
			borda: 7.15,
		},
		{
			name: "majority failed (1 of 3)",
			votes: []*negotiationroompb.NegotiationVote{
				vt("c1", 6, 0.5, true), vt("c2", 4, 0.5, false), vt("c3", 5, 0.5, false),
			},
			count: 3,
			// mean 15/3 = 5; deviations 1, -1, 0 -> sqrt(2/3)
			mean: 5, lo: 4, hi: 6, stdDev: 0.8164965809277259,
			simple: 5, confidence: 5, // equal confidences -> mean
			majority: 2.5,
			// 6 -> 3, 5 -> 2, 4 -> 1: (18+10+4)/6 = 32/6
			borda: 32.0 / 6,
		},
		{
			name: "extreme disagreement",
			votes: []*negotiationroompb.NegotiationVote{
				vt("c1", 10, 1, true), vt("c2", 0, 1, false),
			},
			count: 2,
			// mean 5; deviations +5, -5 -> variance 25 -> std_dev 5
			mean: 5, lo: 0, hi: 10, stdDev: 5,
			simple: 5, confidence: 5, // (10*1+0*1)/2
			majority: 5, // tie
			// 10 -> 2, 0 -> 1: (20+0)/3 = 6.666...
			borda: 20.0 / 3,
		},
		{
			name: "borda conformance vector: 9, 1, 1",
			votes: []*negotiationroompb.NegotiationVote{
				vt("c0", 9, 1, true), vt("c1", 1, 1, true), vt("c2", 1, 1, true),
			},
			count: 3,
			// mean 11/3; deviations 16/3, -8/3, -8/3 -> (256+64+64)/9 = 384/9; /3 = 128/9;
			// sqrt = 3.7712361663282534
			mean: 11.0 / 3, lo: 1, hi: 9, stdDev: 3.7712361663282534,
			simple: 11.0 / 3, confidence: 11.0 / 3, majority: 10,
			// 9 -> 3, 1 -> 2, 1 -> 1: (27+2+1)/6 = 30/6 = 5
			borda: 5,
		},
		{
			name:  "zero votes",
			votes: nil,
			// everything 0, vote_count 0, never NaN
		},
		{
			name:  "only nil votes",
			votes: []*negotiationroompb.NegotiationVote{nil, nil},
		},
	}
}

func TestAggregateStrategies(t *testing.T) {
	for _, tc := range aggregationCases() {
		t.Run(tc.name, func(t *testing.T) {
			want := map[Strategy]float64{
				StrategySimpleAverage:      tc.simple,
				StrategyConfidenceWeighted: tc.confidence,
				StrategyMajorityVote:       tc.majority,
				StrategyBordaCount:         tc.borda,
			}
			for _, s := range Strategies() {
				got := Aggregate(s, tc.votes)
				require.NotNil(t, got, "strategy %s", s)
				assert.Equal(t, tc.count, got.GetVoteCount(), "vote_count, strategy %s", s)
				assert.InDelta(t, tc.mean, got.GetMean(), tol, "mean, strategy %s", s)
				assert.InDelta(t, tc.lo, got.GetMinScore(), tol, "min_score, strategy %s", s)
				assert.InDelta(t, tc.hi, got.GetMaxScore(), tol, "max_score, strategy %s", s)
				assert.InDelta(t, tc.stdDev, got.GetStdDev(), tol, "std_dev, strategy %s", s)
				assert.InDelta(t, want[s], got.GetWeightedMean(), tol, "weighted_mean, strategy %s", s)
			}
		})
	}
}

func TestAggregateDefaultsToConfidenceWeighted(t *testing.T) {
	votes := []*negotiationroompb.NegotiationVote{vt("critic-1", 8.5, 0.9, true), vt("critic-2", 6.5, 0.6, false)}
	for _, s := range []Strategy{"", "no_such_strategy"} {
		// (8.5*0.9 + 6.5*0.6)/1.5 = 7.7, the confidence-weighted result, not the mean 7.5
		assert.InDelta(t, 7.7, Aggregate(s, votes).GetWeightedMean(), tol, "strategy %q", s)
	}
}

func TestAggregateIgnoresUnusableAndClampsOutOfRange(t *testing.T) {
	votes := []*negotiationroompb.NegotiationVote{
		nil,
		vt("nan-score", math.NaN(), 0.5, true),  // ignored
		vt("inf-score", math.Inf(1), 0.5, true), // ignored
		vt("nan-conf", 5, math.NaN(), true),     // ignored
		vt("inf-conf", 5, math.Inf(-1), true),   // ignored
		vt("high", 12, 2, true),                 // score clamped to 10, confidence to 1
		vt("low", -3, -1, false),                // score clamped to 0, confidence to 0
		vt("ok", 5, 0.5, true),                  // as is
	}
	for _, s := range Strategies() {
		got := Aggregate(s, votes)
		// usable: (10, 1, pass), (0, 0, fail), (5, 0.5, pass)
		assert.Equal(t, int32(3), got.GetVoteCount(), "strategy %s", s)
		// mean = 15/3 = 5
		assert.InDelta(t, 5.0, got.GetMean(), tol, "strategy %s", s)
		assert.InDelta(t, 0.0, got.GetMinScore(), tol, "strategy %s", s)
		assert.InDelta(t, 10.0, got.GetMaxScore(), tol, "strategy %s", s)
		// deviations 5, -5, 0 -> 50/3; sqrt = 4.08248290463863
		assert.InDelta(t, math.Sqrt(50.0/3), got.GetStdDev(), tol, "strategy %s", s)
	}
	// (10*1 + 0*0 + 5*0.5)/(1+0+0.5) = 12.5/1.5 = 8.333...
	assert.InDelta(t, 12.5/1.5, Aggregate(StrategyConfidenceWeighted, votes).GetWeightedMean(), tol)
	// 2 passed > 1 failed
	assert.InDelta(t, 7.5, Aggregate(StrategyMajorityVote, votes).GetWeightedMean(), tol)
	// 10 -> 3, 5 -> 2, 0 -> 1: (30+10+0)/6 = 6.666...
	assert.InDelta(t, 40.0/6, Aggregate(StrategyBordaCount, votes).GetWeightedMean(), tol)
}

func TestAggregateIsOrderIndependent(t *testing.T) {
	// Summed left to right, (0.1+0.2+9.7)/3 = 3.3333333333333335 but (9.7+0.2+0.1)/3 =
	// 3.3333333333333326: the result must not depend on which order the store returned the
	// votes in.
	forward := []*negotiationroompb.NegotiationVote{
		vt("a", 0.1, 0.1, true), vt("b", 0.2, 0.2, false), vt("c", 9.7, 0.7, true),
	}
	reversed := []*negotiationroompb.NegotiationVote{forward[2], forward[1], forward[0]}
	rotated := []*negotiationroompb.NegotiationVote{forward[1], forward[2], forward[0]}
	for _, s := range Strategies() {
		want := Aggregate(s, forward)
		for _, other := range [][]*negotiationroompb.NegotiationVote{reversed, rotated} {
			got := Aggregate(s, other)
			// exact equality, bit for bit
			assert.Equal(t, want.GetMean(), got.GetMean(), "strategy %s", s)
			assert.Equal(t, want.GetStdDev(), got.GetStdDev(), "strategy %s", s)
			assert.Equal(t, want.GetWeightedMean(), got.GetWeightedMean(), "strategy %s", s)
			assert.Equal(t, want.GetMinScore(), got.GetMinScore(), "strategy %s", s)
			assert.Equal(t, want.GetMaxScore(), got.GetMaxScore(), "strategy %s", s)
		}
	}
}

func TestAggregateEqualScoresAreExact(t *testing.T) {
	// Three votes of 0.7: a plain sum gives 2.0999999999999996/3 = 0.6999999999999998; the
	// aggregate must report the score itself and a std_dev of exactly 0, so that equal scores
	// on a threshold compare as equal to it.
	votes := []*negotiationroompb.NegotiationVote{vt("a", 0.7, 1, true), vt("b", 0.7, 1, true), vt("c", 0.7, 1, true)}
	got := Aggregate(StrategySimpleAverage, votes)
	assert.Equal(t, 0.7, got.GetMean())
	assert.Equal(t, 0.7, got.GetWeightedMean())
	assert.Equal(t, 0.0, got.GetStdDev())
}

func TestAggregateNeverNaN(t *testing.T) {
	inputs := [][]*negotiationroompb.NegotiationVote{
		nil,
		{},
		{nil},
		{vt("a", 0, 0, false)},
		{vt("a", 0, 0, false), vt("b", 0, 0, true)},
		{vt("a", math.NaN(), math.NaN(), true)},
		{vt("a", math.Inf(1), 1, true), vt("b", 5, math.Inf(1), true)},
		{vt("a", 10, 1e-320, true), vt("b", 0, 1e-320, false)}, // denormal confidences
		{vt("a", math.MaxFloat64, math.MaxFloat64, true), vt("b", -math.MaxFloat64, 1, false)},
	}
	for i, votes := range inputs {
		for _, s := range Strategies() {
			got := Aggregate(s, votes)
			for name, x := range map[string]float64{
				"mean": got.GetMean(), "min_score": got.GetMinScore(), "max_score": got.GetMaxScore(),
				"std_dev": got.GetStdDev(), "weighted_mean": got.GetWeightedMean(),
			} {
				assert.False(t, math.IsNaN(x) || math.IsInf(x, 0), "input %d strategy %s %s = %v", i, s, name, x)
				assert.True(t, x >= 0 && x <= 10, "input %d strategy %s %s = %v off the 0-10 scale", i, s, name, x)
			}
		}
	}
}

func TestParseStrategy(t *testing.T) {
	cases := []struct {
		in   string
		want Strategy
	}{
		{"simple_average", StrategySimpleAverage},
		{"confidence_weighted", StrategyConfidenceWeighted},
		{"majority_vote", StrategyMajorityVote},
		{"borda_count", StrategyBordaCount},
		{"  Borda_Count\n", StrategyBordaCount},
		{"", StrategyConfidenceWeighted}, // default per 003 §6.14.5
		{"   ", StrategyConfidenceWeighted},
	}
	for _, tc := range cases {
		got, err := ParseStrategy(tc.in)
		require.NoError(t, err, "input %q", tc.in)
		assert.Equal(t, tc.want, got, "input %q", tc.in)
		assert.True(t, got.Valid())
	}

	_, err := ParseStrategy("median")
	require.ErrorIs(t, err, ErrUnknownStrategy)
	assert.Equal(t, `unknown voting strategy "median" (known: simple_average, confidence_weighted, majority_vote, borda_count)`, err.Error())

	assert.False(t, Strategy("").Valid())
	assert.False(t, Strategy("median").Valid())
	assert.Equal(t, StrategyConfidenceWeighted, DefaultStrategy)
	assert.Equal(t, "borda_count", StrategyBordaCount.String())
	assert.Equal(t, []Strategy{"simple_average", "confidence_weighted", "majority_vote", "borda_count"}, Strategies())
}
