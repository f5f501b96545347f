// Package voting holds the Negotiation Room's pure decision rules: the four vote aggregation
// strategies of the Negotiation Room Client (003 §6.14.5), the coordinator's policy-based
// auto-approval and auto-escalation rules (RFC §17.5 "Policy-Based Auto-Approval"; Advanced
// Patterns §3.11.1), and the validation of proposals and votes that the server applies
// before it stores them (RFC §17.5 "Proposal Submission" and "Voting"; 003 §6.14.1).
//
// Everything here is deterministic: no clock, no randomness, no I/O, and no result depends on
// map iteration order or on the order in which votes are passed in. Temporal workflow code
// may therefore call it, and a replay reproduces every AggregatedScore and Verdict bit for
// bit. No function returns NaN or ±Inf in any numeric field.
package voting

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
)

// Score and confidence bounds of a NegotiationVote (RFC §17.5 "Voting": "score: Numerical
// score from 0-10", "confidence: Confidence level from 0-1"; 003 §6.14.1).
const (
	// MinVoteScore is the lowest score a critic may give.
	MinVoteScore = 0.0
	// MaxVoteScore is the highest score a critic may give ("10 = excellent").
	MaxVoteScore = 10.0
	// MinVoteConfidence is the lowest confidence a critic may report.
	MinVoteConfidence = 0.0
	// MaxVoteConfidence is the highest confidence a critic may report.
	MaxVoteConfidence = 1.0
)

// Strategy names one of the four vote aggregation strategies of 003 §6.14.5. Its value is the
// snake_case spelling used in configuration and in decision reasons.
type Strategy string

// The four strategies of 003 §6.14.5, each named after the SDK aggregator it mirrors.
const (
	// StrategySimpleAverage is SimpleAverageAggregator: weighted_mean is the arithmetic mean of
	// the scores and ignores confidence ("weighted_mean == mean").
	StrategySimpleAverage Strategy = "simple_average"
	// StrategyConfidenceWeighted is ConfidenceWeightedAggregator, the default ("Use for default
	// negotiation room decisions"): weighted_mean = sum(score_i * confidence_i) /
	// sum(confidence_i), falling back to the simple mean when every confidence is zero.
	StrategyConfidenceWeighted Strategy = "confidence_weighted"
	// StrategyMajorityVote is MajorityVoteAggregator: weighted_mean maps the pass/fail
	// majority to a score (all passed 10, majority passed 7.5, tie 5, majority failed 2.5, all
	// failed 0) and ignores the numeric scores.
	StrategyMajorityVote Strategy = "majority_vote"
	// StrategyBordaCount is BordaCountAggregator: votes are ranked by score and weighted_mean
	// is the Borda-points-weighted mean of the scores (see Aggregate for the exact formula).
	StrategyBordaCount Strategy = "borda_count"
)

// DefaultStrategy is the strategy used when none is configured: ConfidenceWeightedAggregator
// is the one 003 §6.14.5 recommends for "default negotiation room decisions" and for
// "General purpose" in its selection guide.
const DefaultStrategy = StrategyConfidenceWeighted

// ErrUnknownStrategy is returned by ParseStrategy for a name that is not one of the four
// strategies of 003 §6.14.5.
var ErrUnknownStrategy = errors.New("unknown voting strategy")

// Strategies lists the four strategies in the order 003 §6.14.5 documents them.
func Strategies() []Strategy {
	return []Strategy{StrategySimpleAverage, StrategyConfidenceWeighted, StrategyMajorityVote, StrategyBordaCount}
}

// Valid reports whether s is one of the four strategies of 003 §6.14.5 (the empty Strategy is
// not valid; ParseStrategy maps an empty name to DefaultStrategy).
func (s Strategy) Valid() bool {
	switch s {
	case StrategySimpleAverage, StrategyConfidenceWeighted, StrategyMajorityVote, StrategyBordaCount:
		return true
	}
	return false
}

// String returns the strategy's snake_case name.
func (s Strategy) String() string { return string(s) }

// ParseStrategy reads a strategy name, ignoring case and surrounding whitespace. An empty name
// yields DefaultStrategy (confidence_weighted, 003 §6.14.5); an unknown name yields an error
// wrapping ErrUnknownStrategy that lists the known names.
func ParseStrategy(name string) (Strategy, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	if n == "" {
		return DefaultStrategy, nil
	}
	if s := Strategy(n); s.Valid() {
		return s, nil
	}
	known := make([]string, 0, 4)
	for _, s := range Strategies() {
		known = append(known, string(s))
	}
	return "", fmt.Errorf("%w %q (known: %s)", ErrUnknownStrategy, name, strings.Join(known, ", "))
}

// vote is the sanitised view of a NegotiationVote that every computation in this package uses.
type vote struct {
	critic     string
	score      float64
	confidence float64
	passed     bool
	recs       []string
}

// usableVotes turns the caller's votes into the sanitised, canonically ordered slice every
// computation here works on:
//   - nil votes, and votes whose score or confidence is NaN or ±Inf (which ValidateVote
//     refuses), are left out and do not count towards vote_count;
//   - finite scores are clamped to [0, 10] and confidences to [0, 1] (RFC §17.5 "Voting"),
//     so a vote that slipped past validation cannot push any result off the scale;
//   - the votes are sorted by critic_id, then score, confidence and passed, so that sums are
//     taken in an order that does not depend on the order the caller (or a store) returned
//     them in: the same set of votes always yields bit-identical results.
func usableVotes(in []*negotiationroompb.NegotiationVote) []vote {
	out := make([]vote, 0, len(in))
	for _, v := range in {
		if v == nil || !finite(v.GetScore()) || !finite(v.GetConfidence()) {
			continue
		}
		out = append(out, vote{
			critic:     v.GetCriticId(),
			score:      clamp(v.GetScore(), MinVoteScore, MaxVoteScore),
			confidence: clamp(v.GetConfidence(), MinVoteConfidence, MaxVoteConfidence),
			passed:     v.GetPassed(),
			recs:       v.GetRecommendations(),
		})
	}
	slices.SortStableFunc(out, func(a, b vote) int {
		if c := strings.Compare(a.critic, b.critic); c != 0 {
			return c
		}
		if c := cmp.Compare(a.score, b.score); c != 0 {
			return c
		}
		if c := cmp.Compare(a.confidence, b.confidence); c != 0 {
			return c
		}
		switch {
		case a.passed == b.passed:
			return 0
		case !a.passed:
			return -1
		default:
			return 1
		}
	})
	return out
}

// Aggregate computes the full AggregatedScore of votes under strategy s (003 §6.14.5: "Each
// strategy returns an AggregatedScore with the strategy result stored in weighted_mean").
// An empty or unknown s is treated as DefaultStrategy; Policy.Validate refuses unknown ones.
//
// Every strategy fills the same statistics over the usable votes (see below), which are those
// of RFC §17.5 "Vote Aggregation" and of the published Python and Rust SDKs:
//
//	vote_count = n
//	mean       = sum(score_i) / n
//	min_score  = min(score_i),  max_score = max(score_i)
//	std_dev    = sqrt(sum((score_i - mean)^2) / n)
//
// std_dev is the population standard deviation (divide by n, not n-1), exactly as every SDK
// aggregator computes it ("variance = sum((s - mean) ** 2 for s in scores) / len(scores)") and
// as the SDKs' cross-SDK Borda conformance vectors pin it (contract "borda-v1",
// tests/conformance_vectors/borda_vectors.json of the SDK repository): scores 9, 1, 1 give
// std_dev 3.7712361663282534. It measures consensus (RFC §17.5: "Standard deviation (measures
// consensus)"), and a single vote has std_dev 0.
//
// weighted_mean is the strategy's result:
//
//   - simple_average: weighted_mean = mean.
//   - confidence_weighted: weighted_mean = sum(score_i * confidence_i) / sum(confidence_i)
//     (003 §6.14.5 formula); when sum(confidence_i) is 0 it falls back to mean (003: "Falls
//     back to the simple mean if all confidences are zero").
//   - majority_vote: with p votes passed and f failed, 10 when f = 0, 0 when p = 0, 7.5 when
//     p > f, 2.5 when f > p, 5 when p = f (003: "All passed: 10.0, Majority passed (>50%):
//     7.5, Tie: 5.0, Majority failed (>50%): 2.5, All failed: 0.0").
//   - borda_count: votes are ranked by score, highest first; the vote at rank r (0-based)
//     earns n-r Borda points, so the points are n, n-1, ..., 1 and total n(n+1)/2; then
//     weighted_mean = sum(points_i * score_i) / (n(n+1)/2). 003 says only "Ranks scores from
//     highest to lowest and assigns position-based points. Normalizes the points to a 0-10
//     scale"; this reading is the one the published SDKs settled on (the "borda-v1"
//     conformance contract shared by the Python, JavaScript and Rust SDKs: "points n..1 by
//     rank, and weighted_mean = sum(points * score) / sum(points)"). Dividing by the points
//     total normalises the points into weights that sum to 1, so the result is a weighted
//     mean of 0-10 scores and lies on the 0-10 scale, between min_score and max_score, while
//     still depending on the scores (an earlier SDK formula, (n+1)/(2n)*10, depended on the
//     vote count alone). Tied scores may be ranked in either order without changing the
//     result, because tied votes contribute the same score.
//
// Usable votes: nil votes and votes with a NaN or ±Inf score or confidence are ignored;
// finite scores are clamped to [0, 10] and confidences to [0, 1]. With no usable votes every
// field is 0 (vote_count 0) for every strategy, never NaN. The result never depends on the
// order of votes.
func Aggregate(s Strategy, votes []*negotiationroompb.NegotiationVote) *negotiationroompb.AggregatedScore {
	return aggregate(s, usableVotes(votes))
}

// aggregate is Aggregate over already-sanitised votes.
func aggregate(s Strategy, vs []vote) *negotiationroompb.AggregatedScore {
	n := len(vs)
	if n == 0 {
		return &negotiationroompb.AggregatedScore{}
	}
	st := stats(vs)
	var result float64
	switch s {
	case StrategySimpleAverage:
		result = st.mean
	case StrategyMajorityVote:
		result = majorityScore(vs)
	case StrategyBordaCount:
		result = bordaScore(vs)
	default: // StrategyConfidenceWeighted, "" and unknown strategies.
		result = confidenceWeightedMean(vs, st.mean)
	}
	return &negotiationroompb.AggregatedScore{
		Mean:         st.mean,
		MinScore:     st.min,
		MaxScore:     st.max,
		StdDev:       st.stdDev,
		WeightedMean: result,
		VoteCount:    int32(min(n, math.MaxInt32)),
	}
}

// scoreStats are the strategy-independent statistics of RFC §17.5 "Vote Aggregation".
type scoreStats struct {
	mean, min, max, stdDev float64
}

// stats computes mean, min, max and the population standard deviation of vs (len(vs) > 0).
// When every score is equal the mean is that score exactly and std_dev exactly 0, so that
// floating-point rounding of the sum cannot put an exact score a hair off a policy threshold.
func stats(vs []vote) scoreStats {
	n := float64(len(vs))
	lo, hi, sum := vs[0].score, vs[0].score, 0.0
	for _, v := range vs {
		lo = min(lo, v.score)
		hi = max(hi, v.score)
		sum += v.score
	}
	if lo == hi {
		return scoreStats{mean: lo, min: lo, max: hi}
	}
	mean := clamp(sum/n, lo, hi)
	sq := 0.0
	for _, v := range vs {
		d := v.score - mean
		sq += d * d
	}
	return scoreStats{mean: mean, min: lo, max: hi, stdDev: math.Sqrt(sq / n)}
}

// confidenceWeightedMean is sum(score_i*confidence_i)/sum(confidence_i), or mean when every
// confidence is zero (003 §6.14.5).
func confidenceWeightedMean(vs []vote, mean float64) float64 {
	var num, den float64
	lo, hi := vs[0].score, vs[0].score
	for _, v := range vs {
		num += v.score * v.confidence
		den += v.confidence
		lo = min(lo, v.score)
		hi = max(hi, v.score)
	}
	if den <= 0 {
		return mean
	}
	// A weighted mean lies between the smallest and largest score; clamping only absorbs
	// rounding (or underflow of tiny confidences) and never changes an exact result.
	return clamp(num/den, lo, hi)
}

// majorityScore maps the pass/fail counts to 10, 7.5, 5, 2.5 or 0 (003 §6.14.5).
func majorityScore(vs []vote) float64 {
	passed := 0
	for _, v := range vs {
		if v.passed {
			passed++
		}
	}
	failed := len(vs) - passed
	switch {
	case failed == 0:
		return 10.0
	case passed == 0:
		return 0.0
	case passed > failed:
		return 7.5
	case failed > passed:
		return 2.5
	default:
		return 5.0
	}
}

// bordaScore is sum(points_i*score_i)/sum(points_i) with points n..1 by descending score
// (003 §6.14.5 BordaCountAggregator, SDK "borda-v1" contract).
func bordaScore(vs []vote) float64 {
	scores := make([]float64, len(vs))
	for i, v := range vs {
		scores[i] = v.score
	}
	slices.SortFunc(scores, func(a, b float64) int { return cmp.Compare(b, a) }) // highest first
	n := len(scores)
	var weighted, total float64
	for rank, s := range scores {
		points := float64(n - rank)
		weighted += points * s
		total += points
	}
	return clamp(weighted/total, scores[n-1], scores[0])
}

// finite reports whether x is neither NaN nor ±Inf.
func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// clamp limits x to [lo, hi].
func clamp(x, lo, hi float64) float64 { return max(lo, min(hi, x)) }
