package debate

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode"

	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/protocol/voting"
)

// Verdict is the verdict a final turn ends with.
type Verdict struct {
	// Agent is the participant.
	Agent string `json:"agent"`
	// Label is the verdict word, lower-case ("approve", "reject", ...); "" when none is given.
	Label string `json:"label"`
	// Score is 0..10, 10 excellent (the NegotiationVote scale, RFC §17.5).
	Score float64 `json:"score"`
	// Confidence is 0..1.
	Confidence float64 `json:"confidence"`
	// Passed is true for an approving label (see ParseVerdict).
	Passed bool `json:"passed"`
	// Missing is true when the turn has no FINAL_VERDICT line; it counts as an abstention.
	Missing bool `json:"missing"`
}

// approving are the labels that pass.
var approving = []string{"approve", "approved", "accept", "accepted", "pass", "passed", "yes", "agree", "agreed", "lgtm"}

// ParseVerdict reads the verdict of a final turn: the last line that starts with
// FINAL_VERDICT (case-insensitive, after leading spaces and Markdown emphasis or heading
// marks), in one of the forms
//
//	FINAL_VERDICT: approve
//	FINAL_VERDICT: reject score=3 confidence=0.8
//	FINAL_VERDICT: {"verdict": "approve", "score": 8, "confidence": 0.9}
//
// (":" after the marker may be "=" or "-" or left out; "label" may stand for "verdict";
// key:value, "key: value" and "key = value" for key=value; other words are ignored). The label is lower-cased and stripped of punctuation; it passes when it is one
// of approve(d), accept(ed), pass(ed), yes, agree(d), lgtm. Score is clamped to 0..10 and
// defaults to 10 for a passing label, 0 otherwise; confidence is clamped to 0..1 and defaults
// to 1; values that are not finite numbers count as absent. A turn without the marker is
// Missing (an abstention).
func ParseVerdict(agent, text string) Verdict {
	lines := strings.Split(text, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if body, ok := markerLine(lines[i]); ok {
			return parseBody(agent, body)
		}
	}
	return Verdict{Agent: agent, Missing: true}
}

// markerLine reports whether line is a FINAL_VERDICT line and returns what follows the marker.
func markerLine(line string) (string, bool) {
	s := strings.TrimLeft(line, " \t\r*_`#>")
	if len(s) < len(VerdictMarker) || !strings.EqualFold(s[:len(VerdictMarker)], VerdictMarker) {
		return "", false
	}
	rest := s[len(VerdictMarker):]
	// "FINAL_VERDICTS" or "FINAL_VERDICT2" is another word, not the marker.
	if rest != "" {
		if r := rune(rest[0]); unicode.IsLetter(r) || unicode.IsDigit(r) {
			return "", false
		}
	}
	rest = strings.TrimLeft(rest, "*_` \t")
	rest = strings.TrimLeft(rest, ":=-")
	rest = strings.TrimSpace(strings.TrimRight(strings.TrimSpace(rest), "*_`"))
	return rest, true
}

// verdictJSON is the JSON form; pointers tell absent from zero.
type verdictJSON struct {
	Verdict    *string  `json:"verdict"`
	Label      *string  `json:"label"`
	Score      *float64 `json:"score"`
	Confidence *float64 `json:"confidence"`
}

func parseBody(agent, body string) Verdict {
	var label string
	var score, confidence *float64
	parsed := false
	if strings.HasPrefix(body, "{") {
		var j verdictJSON
		// Decoding a string in memory is deterministic; workflowcheck flags encoding/json only
		// because its reflection reaches runtime internals.
		//workflowcheck:ignore
		if err := json.NewDecoder(bytes.NewReader([]byte(body))).Decode(&j); err == nil {
			parsed = true
			switch {
			case j.Verdict != nil:
				label = *j.Verdict
			case j.Label != nil:
				label = *j.Label
			}
			score, confidence = j.Score, j.Confidence
		}
	}
	if !parsed {
		fields := strings.Fields(body)
		for i := 0; i < len(fields); i++ {
			f := fields[i]
			key, val, ok := strings.Cut(f, "=")
			if !ok {
				key, val, ok = strings.Cut(f, ":")
			}
			if !ok {
				if i == 0 {
					label = f
				}
				continue
			}
			if val == "" && i+1 < len(fields) {
				// "score: 8" or "score = 8".
				i++
				val = fields[i]
			}
			n, err := strconv.ParseFloat(strings.TrimRight(val, ".,;)"), 64)
			if err != nil {
				continue
			}
			switch strings.ToLower(key) {
			case "score":
				score = &n
			case "confidence":
				confidence = &n
			}
		}
	}
	v := Verdict{Agent: agent, Label: normaliseLabel(label)}
	for _, a := range approving {
		if v.Label == a {
			v.Passed = true
		}
	}
	v.Score = 0
	if v.Passed {
		v.Score = voting.MaxVoteScore
	}
	if score != nil && finite(*score) {
		v.Score = min(max(*score, voting.MinVoteScore), voting.MaxVoteScore)
	}
	v.Confidence = voting.MaxVoteConfidence
	if confidence != nil && finite(*confidence) {
		v.Confidence = min(max(*confidence, voting.MinVoteConfidence), voting.MaxVoteConfidence)
	}
	return v
}

func normaliseLabel(s string) string {
	return strings.ToLower(strings.TrimFunc(s, func(r rune) bool { return unicode.IsPunct(r) || unicode.IsSymbol(r) }))
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Aggregate turns the verdicts into NegotiationVotes (critic_id = agent, score, confidence,
// passed) and aggregates them with voting.Aggregate under the named strategy (an empty or
// unknown name is voting.DefaultStrategy); Missing verdicts are left out. majority is the most
// common non-empty label among the counted verdicts, "" when there is none or the top count
// is tied.
func Aggregate(strategy string, vs []Verdict) (agg *negotiationroompb.AggregatedScore, majority string) {
	s, err := voting.ParseStrategy(strategy)
	if err != nil {
		s = voting.DefaultStrategy
	}
	var votes []*negotiationroompb.NegotiationVote
	var labels []string
	var counts []int
	for _, v := range vs {
		if v.Missing {
			continue
		}
		votes = append(votes, &negotiationroompb.NegotiationVote{CriticId: v.Agent, Score: v.Score, Confidence: v.Confidence, Passed: v.Passed})
		if v.Label == "" {
			continue
		}
		found := false
		for i, l := range labels {
			if l == v.Label {
				counts[i]++
				found = true
			}
		}
		if !found {
			labels = append(labels, v.Label)
			counts = append(counts, 1)
		}
	}
	best, tied := -1, false
	for i, c := range counts {
		switch {
		case best < 0 || c > counts[best]:
			best, tied = i, false
		case c == counts[best]:
			tied = true
		}
	}
	if best >= 0 && !tied {
		majority = labels[best]
	}
	return voting.Aggregate(s, votes), majority
}

// Result is a debate's outcome, the JSON result of its decide event.
type Result struct {
	// Mode is ModeDebate or ModeParallel.
	Mode string `json:"mode"`
	// RoundsRun counts the rounds that ran.
	RoundsRun int `json:"rounds_run"`
	// StopReason is one of StopRounds, StopConverged, StopTimeout, StopAborted.
	StopReason string `json:"stop_reason"`
	// Transcript is every turn, in order.
	Transcript []Turn `json:"transcript"`
	// Verdicts are the final round's verdicts, in participant order.
	Verdicts []Verdict `json:"verdicts"`
	// Aggregate is Aggregate's score of the verdicts.
	Aggregate *negotiationroompb.AggregatedScore `json:"aggregate"`
	// Majority is the most common label, "" when none or tied.
	Majority string `json:"majority"`
}
