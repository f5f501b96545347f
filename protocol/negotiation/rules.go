package negotiation

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
)

// Blend is the scored value of a draft (§17.3: "Deterministic scoring MUST run first; optional
// Inference Engine/LLM confidence in [0,1] MAY be blended per policy llm_weight"):
// (1-w)*deterministic + w*llm, where llm is the mean of confidences (the non-author
// participants' latest evaluations of the version, plus EvaluateDebate's when present). With no
// usable confidence the result is the deterministic score alone. NaN and ±Inf confidences are
// left out; the others, deterministic and w are clamped to [0,1] (a NaN w counts as 0, a NaN
// deterministic as 0). Confidences are summed in sorted order, so their order does not change
// a bit of the result.
func Blend(deterministic float32, confidences []float64, llmWeight float32) float32 {
	det := unit(float64(deterministic))
	var cs []float64
	for _, c := range confidences {
		if !math.IsNaN(c) && !math.IsInf(c, 0) {
			cs = append(cs, unit(c))
		}
	}
	if len(cs) == 0 {
		return float32(det)
	}
	slices.Sort(cs)
	var sum float64
	for _, c := range cs {
		sum += c
	}
	w := unit(float64(llmWeight))
	return float32(unit((1-w)*det + w*(sum/float64(len(cs)))))
}

// unit clamps x to [0,1]; NaN becomes 0.
func unit(x float64) float64 {
	if math.IsNaN(x) {
		return 0
	}
	return min(max(x, 0), 1)
}

// Version is one accepted draft of a negotiation as the stop rules see it (the workflow keeps
// them, in order).
type Version struct {
	// N is the 1-based version number.
	N int
	// Author is the participant who drafted it.
	Author string
	// Hash is the hex SHA-256 of the content type and payload; equal hashes are equal drafts.
	Hash string
	// Check is the draft's deterministic validation.
	Check Check
	// Delta is the change from the version before (nil or zero for the first).
	Delta *policypb.DeltaSummary
	// Evaluations are the participants' confidences in THIS version (the latest per
	// participant wins).
	Evaluations map[string]float64
	// EngineConfidence is EvaluateDebate's confidence, when it was asked.
	EngineConfidence *float64
	// Score is Blend of the version's deterministic score and confidences, kept current by
	// the workflow.
	Score float32
	// Tokens is the draft's estimated token cost (Tokens).
	Tokens uint64
}

// State is the round state the stop rules read (the workflow keeps it).
type State struct {
	// Participants take turns in this order.
	Participants []string
	// Policy is the effective policy.
	Policy *policypb.NegotiationPolicy
	// Versions are the accepted drafts, oldest first.
	Versions []Version
	// TokensUsed is the sum of the versions' Tokens.
	TokensUsed uint64
	// Aborted is the abort reason, "" if not aborted.
	Aborted string
	// RoundTimedOut says the current round's timer fired; DebateTimedOut says the total
	// debate_timeout did.
	RoundTimedOut, DebateTimedOut bool
}

// Stop reasons, the values of DecisionReport.stop_reason; the first four are §17.2/§17.4's
// words ("threshold_met|max_rounds|oscillation|budget|timeout").
const (
	// StopThreshold: the latest version was accepted.
	StopThreshold = "threshold_met"
	// StopMaxRounds: every round is used and evaluated.
	StopMaxRounds = "max_rounds"
	// StopOscillation: the drafts keep returning to earlier ones.
	StopOscillation = "oscillation"
	// StopBudget: the total token budget is spent.
	StopBudget = "budget"
	// StopTimeout: the round or debate timer fired.
	StopTimeout = "timeout"
	// StopAborted: a participant or the scheduler aborted.
	StopAborted = "aborted"
)

// Verdict says whether to stop and why.
type Verdict struct {
	// Stop is true when a stop rule applies.
	Stop bool
	// Reason is one of the Stop* constants when Stop.
	Reason string
	// Accept is true when the latest version is accepted (Reason StopThreshold).
	Accept bool
	// Detail explains the verdict in a sentence.
	Detail string
}

// scoreSlack lets a score computed in float32 (or a float64 confidence) that sits a rounding
// error below a threshold count as reaching it: 0.7 blended from parts may come out as
// 0.69999999, and a participant who answers exactly the threshold has met it.
const scoreSlack = 1e-6

func atLeast(x, threshold float64) bool { return x >= threshold-scoreSlack }

// Evaluate applies the stop rules (§17, §17.3: "Acceptance and stop decisions MUST follow
// EffectivePolicy") in this order, the first that applies winning:
//
//  1. aborted: Aborted is set.
//  2. acceptance (threshold_met, Accept): the latest version's Score >= score_threshold, its
//     delta magnitude <= diff_tolerance, and every participant other than its author has
//     evaluated it with confidence >= score_threshold — unanimity of at least two parties
//     (§17: "at minimum two-party unanimity").
//  3. max_rounds: there are max_rounds versions (or more) and every non-author has evaluated
//     the latest, so nothing more can happen. max_rounds 0 means no limit.
//  4. oscillation: the latest version repeats an earlier one (same Hash) and the versions
//     that repeated an earlier one number more than oscillation_limit in total.
//  5. budget: total_token_budget is set and TokensUsed > total_token_budget.
//  6. timeout: RoundTimedOut or DebateTimedOut.
//
// Thresholds are compared with a slack of 1e-6 (a rounding error below the threshold
// counts as meeting it).
func Evaluate(s State) Verdict {
	p := s.Policy
	if s.Aborted != "" {
		return Verdict{Stop: true, Reason: StopAborted, Detail: "aborted: " + s.Aborted}
	}
	if len(s.Versions) > 0 {
		v := s.Versions[len(s.Versions)-1]
		others := nonAuthors(s.Participants, v.Author)
		if ok, detail := accepted(v, others, p); ok {
			return Verdict{Stop: true, Reason: StopThreshold, Accept: true, Detail: detail}
		}
		if mr := p.GetMaxRounds(); mr > 0 && len(s.Versions) >= int(mr) && allEvaluated(v, others) {
			return Verdict{Stop: true, Reason: StopMaxRounds, Detail: fmt.Sprintf(
				"all %d rounds are used and version %d is evaluated by every other participant without acceptance", mr, v.N)}
		}
		if v.Hash != "" && repeats(s.Versions, len(s.Versions)-1) {
			total := 0
			for i := range s.Versions {
				if repeats(s.Versions, i) {
					total++
				}
			}
			if limit := p.GetOscillationLimit(); total > int(limit) {
				return Verdict{Stop: true, Reason: StopOscillation, Detail: fmt.Sprintf(
					"version %d repeats an earlier version; %d versions repeated earlier ones, more than oscillation_limit %d",
					v.N, total, limit)}
			}
		}
	}
	if b := p.GetTotalTokenBudget(); b > 0 && s.TokensUsed > b {
		return Verdict{Stop: true, Reason: StopBudget, Detail: fmt.Sprintf(
			"%d tokens used, more than total_token_budget %d", s.TokensUsed, b)}
	}
	if s.RoundTimedOut || s.DebateTimedOut {
		which := "round_timeout"
		if s.DebateTimedOut {
			which = "debate_timeout"
		}
		return Verdict{Stop: true, Reason: StopTimeout, Detail: which + " expired"}
	}
	return Verdict{}
}

// nonAuthors are the participants other than author, in list order.
func nonAuthors(participants []string, author string) []string {
	var out []string
	for _, p := range participants {
		if p != author {
			out = append(out, p)
		}
	}
	return out
}

// accepted applies rule 2 of Evaluate to v.
func accepted(v Version, others []string, p *policypb.NegotiationPolicy) (bool, string) {
	t := float64(p.GetScoreThreshold())
	if len(others) == 0 || !atLeast(float64(v.Score), t) {
		return false, ""
	}
	if mag := v.Delta.GetMagnitude(); float64(mag) > float64(p.GetDiffTolerance())+scoreSlack {
		return false, ""
	}
	by := make([]string, 0, len(others))
	for _, o := range others {
		c, ok := v.Evaluations[o]
		if !ok || math.IsNaN(c) || !atLeast(c, t) {
			return false, ""
		}
		by = append(by, fmt.Sprintf("%s (%s)", strconv.Quote(o), strconv.FormatFloat(c, 'g', -1, 64)))
	}
	return true, fmt.Sprintf("version %d by %q scored %s >= score_threshold %s with delta %s <= diff_tolerance %s, and every other participant agreed: %s",
		v.N, v.Author, formatFloat(v.Score), formatFloat(p.GetScoreThreshold()),
		formatFloat(v.Delta.GetMagnitude()), formatFloat(p.GetDiffTolerance()), strings.Join(by, ", "))
}

// allEvaluated says every one of others has evaluated v.
func allEvaluated(v Version, others []string) bool {
	for _, o := range others {
		if _, ok := v.Evaluations[o]; !ok {
			return false
		}
	}
	return true
}

// repeats says versions[i] has the same (non-empty) Hash as an earlier version.
func repeats(versions []Version, i int) bool {
	h := versions[i].Hash
	if h == "" {
		return false
	}
	for _, e := range versions[:i] {
		if e.Hash == h {
			return true
		}
	}
	return false
}

// Refusals of CanDraft; each is wrapped with the detail. The frontend answers
// ErrNotParticipant with PermissionDenied and the others with FailedPrecondition.
var (
	// ErrNotParticipant: the author is not one of the negotiation's participants.
	ErrNotParticipant = errors.New("not a participant of this negotiation")
	// ErrOutOfTurn: it is another participant's turn to draft.
	ErrOutOfTurn = errors.New("not this participant's turn")
	// ErrNoRoundsLeft: every round allowed by max_rounds is used.
	ErrNoRoundsLeft = errors.New("no rounds left")
	// ErrOverBudget: the draft costs more tokens than token_budget_per_round.
	ErrOverBudget = errors.New("draft over the per-round token budget")
)

// CanDraft says whether author may submit draft number len(Versions)+1 now, checking in this
// order: author is a participant (ErrNotParticipant); a round is left, max_rounds 0 meaning no
// limit (ErrNoRoundsLeft); it is author's turn — participants take turns in list order, draft k
// by Participants[(k-1) % n] (ErrOutOfTurn); tokens is within token_budget_per_round when that
// is set (ErrOverBudget). Each error wraps its sentinel with the detail.
func CanDraft(s State, author string, tokens uint64) error {
	if !slices.Contains(s.Participants, author) {
		return fmt.Errorf("%w: %q is not one of %s", ErrNotParticipant, author, quoteAll(s.Participants))
	}
	next := len(s.Versions) + 1
	if mr := s.Policy.GetMaxRounds(); mr > 0 && next > int(mr) {
		return fmt.Errorf("%w: all %d rounds of max_rounds are used", ErrNoRoundsLeft, mr)
	}
	if turn := s.Participants[(next-1)%len(s.Participants)]; turn != author {
		return fmt.Errorf("%w: draft %d is %q's to write (participants take turns in the order %s)",
			ErrOutOfTurn, next, turn, quoteAll(s.Participants))
	}
	if b := s.Policy.GetTokenBudgetPerRound(); b > 0 && tokens > b {
		return fmt.Errorf("%w: the draft is about %d tokens, token_budget_per_round is %d", ErrOverBudget, tokens, b)
	}
	return nil
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// TieBreak picks the version to decide on after a stop without acceptance (§17: "handle
// deadlock/timeout conditions by applying tie-breaking rules or escalating with
// DEBATE_DEADLOCK"): the highest Score, ties going to the later version; ok is false when
// there are no versions. accept is true when that Score >= score_threshold (decided_by
// "policy"); otherwise the workflow escalates to HITL with DEBATE_DEADLOCK.
func TieBreak(s State) (v Version, accept bool, ok bool) {
	if len(s.Versions) == 0 {
		return Version{}, false, false
	}
	best := 0
	for i, c := range s.Versions {
		if c.Score >= s.Versions[best].Score {
			best = i
		}
	}
	v = s.Versions[best]
	return v, atLeast(float64(v.Score), float64(s.Policy.GetScoreThreshold())), true
}
