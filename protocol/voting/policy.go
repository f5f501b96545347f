package voting

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
)

// DefaultPolicyVersion is the policy_version of DefaultPolicy. RFC §17.5 "Policy Version
// Tracking": "Decisions MUST include the policy_version field identifying which policy
// configuration was applied".
const DefaultPolicyVersion = "room-policy/v1"

// Spec-mandated escalation limits (RFC §17.5 "Auto-Escalation Rules"; §3.11.1): the
// Coordinator MUST escalate when "Any critic vote has confidence < 0.3" or
// "aggregated_score.std_dev > 3.0".
const (
	// SpecEscalateBelowConfidence is the confidence below which a vote forces escalation.
	SpecEscalateBelowConfidence = 0.3
	// SpecEscalateAboveStdDev is the std_dev above which the votes force escalation.
	SpecEscalateAboveStdDev = 3.0
)

// thresholdSlack is how far a computed value may sit on the wrong side of a policy threshold
// and still count as equal to it. Sums of decimal fractions are inexact in binary floating
// point (0.7+0.7+0.7+0.7+0.7 is 3.4999999999999996), so without it five votes of confidence
// 0.7 would miss min_confidence 0.7. 1e-9 is far below any meaningful score or confidence
// difference.
const thresholdSlack = 1e-9

// atLeast reports x >= threshold, allowing thresholdSlack.
func atLeast(x, threshold float64) bool { return x >= threshold-thresholdSlack }

// atMost reports x <= threshold, allowing thresholdSlack.
func atMost(x, threshold float64) bool { return x <= threshold+thresholdSlack }

// Escalation rule ids, the machine-readable entries of Verdict.Escalations, one per
// auto-escalation rule of RFC §17.5 (and §3.11.1), listed in the order the rules are
// numbered there and in which Decide reports them.
const (
	// EscalationLowConfidence is rule 1: "Any critic vote has confidence < 0.3 (high
	// uncertainty)"; the limit is Policy.EscalateBelowConfidence.
	EscalationLowConfidence = "low_confidence"
	// EscalationExtremeDisagreement is rule 2: "aggregated_score.std_dev > 3.0 (extreme
	// disagreement)"; the limit is Policy.EscalateAboveStdDev.
	EscalationExtremeDisagreement = "extreme_disagreement"
	// EscalationCriticRequested is rule 3: "Any critic explicitly requests escalation via
	// recommendations", as decided by RequestsEscalation.
	EscalationCriticRequested = "critic_requested_escalation"
	// EscalationTimeoutMissingVotes is rule 4: "Policy timeout expires before sufficient votes
	// are received", where sufficient means every requested critic has voted.
	EscalationTimeoutMissingVotes = "timeout_missing_votes"
)

// Policy is the coordinator's decision policy: the auto-approval thresholds of RFC §17.5
// "Policy-Based Auto-Approval" (§3.11.1 table), the two numeric auto-escalation limits, the
// aggregation strategy (003 §6.14.5) and the policy_version recorded on every decision.
type Policy struct {
	// MinScore is min_score_threshold: auto-approval needs aggregated_score.weighted_mean >=
	// MinScore (RECOMMENDED default 7.0).
	MinScore float64
	// MinConfidence is min_confidence_threshold: auto-approval needs the average confidence
	// across votes >= MinConfidence (RECOMMENDED default 0.7).
	MinConfidence float64
	// MinPassRatio is min_pass_ratio: auto-approval needs the proportion of votes with
	// passed=true >= MinPassRatio (RECOMMENDED default 0.8).
	MinPassRatio float64
	// MaxStdDev is max_std_dev: auto-approval needs aggregated_score.std_dev <= MaxStdDev
	// (RECOMMENDED default 2.0).
	MaxStdDev float64
	// EscalateBelowConfidence escalates when any vote's confidence is strictly below it (RFC
	// §17.5 rule 1, fixed by the spec at 0.3; Validate allows only stricter values, >= 0.3).
	EscalateBelowConfidence float64
	// EscalateAboveStdDev escalates when std_dev is strictly above it (RFC §17.5 rule 2, fixed
	// by the spec at 3.0; Validate allows only stricter values, <= 3.0).
	EscalateAboveStdDev float64
	// Strategy is the aggregation strategy whose result becomes weighted_mean (003 §6.14.5).
	Strategy Strategy
	// Version is the policy_version written on every decision (RFC §17.5 "Policy Version
	// Tracking").
	Version string
}

// DefaultPolicy returns the RFC §17.5 RECOMMENDED thresholds (min score 7.0, min confidence
// 0.7, min pass ratio 0.8, max std dev 2.0), the spec's escalation limits (confidence < 0.3,
// std_dev > 3.0), the default confidence_weighted strategy (003 §6.14.5) and policy version
// "room-policy/v1".
func DefaultPolicy() Policy {
	return Policy{
		MinScore:                7.0,
		MinConfidence:           0.7,
		MinPassRatio:            0.8,
		MaxStdDev:               2.0,
		EscalateBelowConfidence: SpecEscalateBelowConfidence,
		EscalateAboveStdDev:     SpecEscalateAboveStdDev,
		Strategy:                DefaultStrategy,
		Version:                 DefaultPolicyVersion,
	}
}

// ErrInvalidPolicy is wrapped by every error Policy.Validate returns.
var ErrInvalidPolicy = errors.New("invalid negotiation room policy")

// Validate checks that every threshold is a finite number on its scale (scores 0-10,
// confidences and ratios 0-1, standard deviations >= 0), that the escalation limits are at
// least as strict as RFC §17.5 mandates (EscalateBelowConfidence >= 0.3, EscalateAboveStdDev
// <= 3.0, because the Coordinator "MUST escalate" at those values), that Strategy is one of the
// four strategies, and that Version is non-empty (§17.5 "Policy Version Tracking"). The error
// wraps ErrInvalidPolicy and lists every problem, in field order.
func (p Policy) Validate() error {
	var problems []string
	check := func(name string, v, lo, hi float64, scale string) {
		switch {
		case !finite(v):
			problems = append(problems, fmt.Sprintf("%s is %s, not a finite number", name, num(v)))
		case v < lo || v > hi:
			problems = append(problems, fmt.Sprintf("%s %s is outside %s", name, num(v), scale))
		}
	}
	check("min_score", p.MinScore, MinVoteScore, MaxVoteScore, "[0, 10]")
	check("min_confidence", p.MinConfidence, 0, 1, "[0, 1]")
	check("min_pass_ratio", p.MinPassRatio, 0, 1, "[0, 1]")
	check("max_std_dev", p.MaxStdDev, 0, MaxVoteScore, "[0, 10]")
	check("escalate_below_confidence", p.EscalateBelowConfidence, SpecEscalateBelowConfidence, 1,
		"[0.3, 1] (RFC §17.5 requires escalation below confidence 0.3)")
	check("escalate_above_std_dev", p.EscalateAboveStdDev, 0, SpecEscalateAboveStdDev,
		"[0, 3] (RFC §17.5 requires escalation above std_dev 3.0)")
	if !p.Strategy.Valid() {
		_, err := ParseStrategy(string(p.Strategy))
		if p.Strategy == "" {
			err = errors.New("strategy is empty")
		}
		problems = append(problems, err.Error())
	}
	if strings.TrimSpace(p.Version) == "" {
		problems = append(problems, "version is empty (RFC §17.5: decisions MUST carry policy_version)")
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w %q: %s", ErrInvalidPolicy, p.Version, strings.Join(problems, "; "))
}

// Verdict is the outcome Decide reaches, ready to be written into a NegotiationDecision
// (RFC §17.5 "Decision Outcomes": the decision carries the aggregated score, the policy
// version and a human-readable rationale).
type Verdict struct {
	// Outcome is APPROVED, REVISION_REQUESTED or ESCALATED_TO_HITL, or
	// DECISION_OUTCOME_UNSPECIFIED while requested critics are still missing and the timeout
	// has not expired (no decision yet).
	Outcome negotiationroompb.DecisionOutcome
	// Aggregate is the AggregatedScore of the votes under the policy's strategy; never nil.
	Aggregate *negotiationroompb.AggregatedScore
	// Reason is the human-readable rationale: the policy version and strategy, the numbers
	// compared and which rule fired (or which critics are still awaited).
	Reason string
	// Escalations holds the ids of the auto-escalation rules that fired (Escalation*
	// constants), in rule order; empty unless Outcome is ESCALATED_TO_HITL.
	Escalations []string
}

// Decide applies policy p to the votes cast on an artifact whose proposal requested
// requestedCritics, with timedOut telling whether the policy timeout has expired (RFC §17.5
// "Policy-Based Auto-Approval"; §3.11.1).
//
// A decision is due once every requested critic has a usable vote (see Aggregate) or the
// timeout has expired. Before that, Decide returns Outcome DECISION_OUTCOME_UNSPECIFIED, the
// aggregate of the votes so far, no escalations, and a Reason naming the critics still awaited;
// the caller should keep waiting, and no rule is applied early, even one that has already
// fired. Votes from critics that were not requested are not filtered out here (ValidateVote
// refuses them on submission); they count like any other vote.
//
// When a decision is due, the auto-escalation rules are checked first, all of them, and the
// outcome is ESCALATED_TO_HITL if ANY fires ("The Coordinator MUST escalate to HITL when ANY of
// the following conditions are met"):
//
//  1. low_confidence: some vote has confidence < p.EscalateBelowConfidence (0.3);
//  2. extreme_disagreement: std_dev > p.EscalateAboveStdDev (3.0);
//  3. critic_requested_escalation: some recommendation of some vote satisfies
//     RequestsEscalation;
//  4. timeout_missing_votes: timedOut is true and a requested critic has not voted.
//
// Otherwise the outcome is APPROVED when ALL four auto-approval conditions hold, and
// REVISION_REQUESTED when any fails:
//
//  1. weighted_mean >= p.MinScore (weighted_mean from Aggregate under p.Strategy);
//  2. average confidence, sum(confidence_i)/n, >= p.MinConfidence;
//  3. pass ratio, (votes with passed=true)/n, >= p.MinPassRatio;
//  4. std_dev <= p.MaxStdDev.
//
// Threshold comparisons allow a slack of 1e-9 so that a value equal to a threshold in decimal
// arithmetic (five confidences of 0.7 averaging 0.7) compares as equal despite binary
// rounding. With no usable votes the average confidence and pass ratio are 0, so such a
// decision is REVISION_REQUESTED (or ESCALATED_TO_HITL by rule 4 if critics were requested and
// the timeout expired). Decide does not validate p; call Policy.Validate when loading it.
// It is one function because the rules are ordered and each reads the figures the previous
// ones computed; the numbered list above is its outline.
func Decide(p Policy, requestedCritics []string, votes []*negotiationroompb.NegotiationVote, timedOut bool) Verdict {
	strategy := p.Strategy
	if !strategy.Valid() {
		strategy = DefaultStrategy
	}
	vs := usableVotes(votes)
	agg := aggregate(strategy, vs)
	header := fmt.Sprintf("policy %s (%s)", p.Version, strategy)

	missing := missingCritics(requestedCritics, vs)
	if len(missing) > 0 && !timedOut {
		return Verdict{
			Outcome:   negotiationroompb.DecisionOutcome_DECISION_OUTCOME_UNSPECIFIED,
			Aggregate: agg,
			Reason: fmt.Sprintf("no decision yet under %s: waiting for %d of %d requested critics: %s",
				header, len(missing), len(uniqueNonEmpty(requestedCritics)), strings.Join(missing, ", ")),
		}
	}

	var ids, why []string
	fire := func(id, reason string) {
		ids = append(ids, id)
		why = append(why, reason)
	}

	var low []string
	for _, v := range vs {
		if v.confidence < p.EscalateBelowConfidence-thresholdSlack {
			low = append(low, fmt.Sprintf("critic %q confidence %s < %s", v.critic, num(v.confidence), num(p.EscalateBelowConfidence)))
		}
	}
	if len(low) > 0 {
		fire(EscalationLowConfidence, "high uncertainty: "+strings.Join(low, ", "))
	}
	if agg.StdDev > p.EscalateAboveStdDev+thresholdSlack {
		fire(EscalationExtremeDisagreement, fmt.Sprintf("extreme disagreement: std_dev %s > %s",
			num(agg.StdDev), num(p.EscalateAboveStdDev)))
	}
	var asked []string
	for _, v := range vs {
		for _, r := range v.recs {
			if RequestsEscalation(r) {
				asked = append(asked, fmt.Sprintf("critic %q recommends %q", v.critic, r))
				break
			}
		}
	}
	if len(asked) > 0 {
		fire(EscalationCriticRequested, "escalation requested: "+strings.Join(asked, ", "))
	}
	if timedOut && len(missing) > 0 {
		fire(EscalationTimeoutMissingVotes, fmt.Sprintf("timeout expired with %d of %d requested critics not voted: %s",
			len(missing), len(uniqueNonEmpty(requestedCritics)), strings.Join(missing, ", ")))
	}
	if len(ids) > 0 {
		return Verdict{
			Outcome:     negotiationroompb.DecisionOutcome_ESCALATED_TO_HITL,
			Aggregate:   agg,
			Reason:      fmt.Sprintf("escalated to HITL under %s: %s", header, strings.Join(why, "; ")),
			Escalations: ids,
		}
	}

	n := len(vs)
	var confSum float64
	passed := 0
	for _, v := range vs {
		confSum += v.confidence
		if v.passed {
			passed++
		}
	}
	var avgConf, passRatio float64
	if n > 0 {
		avgConf = confSum / float64(n)
		passRatio = float64(passed) / float64(n)
	}

	var met, unmet []string
	cond := func(ok bool, good, bad string) {
		if ok {
			met = append(met, good)
		} else {
			unmet = append(unmet, bad)
		}
	}
	cond(atLeast(agg.WeightedMean, p.MinScore),
		fmt.Sprintf("weighted_mean %s >= %s", num(agg.WeightedMean), num(p.MinScore)),
		fmt.Sprintf("weighted_mean %s < min_score %s", num(agg.WeightedMean), num(p.MinScore)))
	cond(atLeast(avgConf, p.MinConfidence),
		fmt.Sprintf("average confidence %s >= %s", num(avgConf), num(p.MinConfidence)),
		fmt.Sprintf("average confidence %s < min_confidence %s", num(avgConf), num(p.MinConfidence)))
	cond(atLeast(passRatio, p.MinPassRatio),
		fmt.Sprintf("pass ratio %s (%d/%d) >= %s", num(passRatio), passed, n, num(p.MinPassRatio)),
		fmt.Sprintf("pass ratio %s (%d/%d) < min_pass_ratio %s", num(passRatio), passed, n, num(p.MinPassRatio)))
	cond(atMost(agg.StdDev, p.MaxStdDev),
		fmt.Sprintf("std_dev %s <= %s", num(agg.StdDev), num(p.MaxStdDev)),
		fmt.Sprintf("std_dev %s > max_std_dev %s", num(agg.StdDev), num(p.MaxStdDev)))

	if len(unmet) == 0 {
		return Verdict{
			Outcome:   negotiationroompb.DecisionOutcome_APPROVED,
			Aggregate: agg,
			Reason:    fmt.Sprintf("approved under %s with %d votes: %s", header, n, strings.Join(met, ", ")),
		}
	}
	reason := fmt.Sprintf("revision requested under %s with %d votes: %s", header, n, strings.Join(unmet, "; "))
	if n == 0 {
		reason = fmt.Sprintf("revision requested under %s: no votes were cast", header)
	}
	if len(met) > 0 && n > 0 {
		reason += " (met: " + strings.Join(met, ", ") + ")"
	}
	return Verdict{
		Outcome:   negotiationroompb.DecisionOutcome_REVISION_REQUESTED,
		Aggregate: agg,
		Reason:    reason,
	}
}

// missingCritics lists, in request order and without duplicates or empty ids, the requested
// critics that have no usable vote in vs.
func missingCritics(requested []string, vs []vote) []string {
	voted := make(map[string]bool, len(vs))
	for _, v := range vs {
		voted[v.critic] = true
	}
	var missing []string
	for _, c := range uniqueNonEmpty(requested) {
		if !voted[c] {
			missing = append(missing, c)
		}
	}
	return missing
}

// uniqueNonEmpty returns ids without empty entries and repeats, first occurrence first.
func uniqueNonEmpty(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, id)
	}
	return out
}

// escalationPhrases are the phrases that, anywhere in a normalised recommendation, request
// escalation (see RequestsEscalation).
var escalationPhrases = []string{
	"escalate to hitl",
	"escalate to human",
	"escalate to a human",
	"human review required",
	"requires human review",
	"needs human review",
	"request human review",
	"requests human review",
}

// RequestsEscalation reports whether a critic's recommendation explicitly requests escalation
// to a human, RFC §17.5 auto-escalation rule 3 ("Any critic explicitly requests escalation
// via recommendations"). The spec does not say how a request is spelled, so this package fixes
// the rule. The recommendation is normalised (lower-cased, surrounding whitespace trimmed,
// inner whitespace runs collapsed to one space) and requests escalation when either
//
//   - its first word is "escalate", a word being a run of letters, so "Escalate",
//     "ESCALATE: licence unclear" and "escalate to security team" request it while
//     "escalated", "escalation" and "de-escalate" do not; or
//   - it contains one of the phrases "escalate to hitl", "escalate to human",
//     "escalate to a human", "human review required", "requires human review",
//     "needs human review", "request human review" or "requests human review".
//
// Matching is purely textual: a negated phrase ("no need to escalate to HITL") still counts,
// which errs towards human review. Critics that mean to request escalation should start the
// recommendation with "ESCALATE:".
func RequestsEscalation(recommendation string) bool {
	r := strings.ToLower(strings.Join(strings.Fields(recommendation), " "))
	if r == "" {
		return false
	}
	end := strings.IndexFunc(r, func(c rune) bool { return !unicode.IsLetter(c) })
	if end < 0 {
		end = len(r)
	}
	if r[:end] == "escalate" {
		return true
	}
	for _, phrase := range escalationPhrases {
		if strings.Contains(r, phrase) {
			return true
		}
	}
	return false
}

// num formats a number for reasons and error messages: up to four decimals, trailing zeros
// dropped (7.7, 0.3, 3.7712), and NaN or ±Inf spelled out.
func num(x float64) string {
	if !finite(x) {
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	s := strconv.FormatFloat(x, 'f', 4, 64)
	s = strings.TrimRight(s, "0")
	s = strings.TrimSuffix(s, ".")
	if s == "-0" {
		s = "0"
	}
	return s
}
