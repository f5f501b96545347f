package debate

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/protocol/voting"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

func TestParseOptions(t *testing.T) {
	cases := []struct {
		name string
		md   map[string]string
		want Options
	}{
		{"defaults", nil, Options{Rounds: 2, Strategy: "confidence_weighted", SummaryThreshold: 16384}},
		{"parallel vote", map[string]string{wire.DebateRoundsKey: "0"}, Options{Rounds: 0, Strategy: "confidence_weighted", SummaryThreshold: 16384}},
		{"every key", map[string]string{wire.DebateRoundsKey: " 5 ", wire.DebateStrategyKey: "Borda_Count", wire.DebateSummaryBytesKey: "1"},
			Options{Rounds: 5, Strategy: "borda_count", SummaryThreshold: 1}},
		{"empty strategy is the default", map[string]string{wire.DebateStrategyKey: ""}, Options{Rounds: 2, Strategy: "confidence_weighted", SummaryThreshold: 16384}},
		{"other keys ignored", map[string]string{"sw4rm-negotiation-mode": "debate"}, Options{Rounds: 2, Strategy: "confidence_weighted", SummaryThreshold: 16384}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseOptions(c.md)
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

func TestParseOptionsRefusals(t *testing.T) {
	cases := []struct {
		md   map[string]string
		want string
	}{
		{map[string]string{wire.DebateRoundsKey: "6"}, `sw4rm-debate-rounds "6" is not an integer from 0 to 5`},
		{map[string]string{wire.DebateRoundsKey: "-1"}, `sw4rm-debate-rounds "-1"`},
		{map[string]string{wire.DebateRoundsKey: "two"}, `sw4rm-debate-rounds "two"`},
		{map[string]string{wire.DebateRoundsKey: ""}, `sw4rm-debate-rounds ""`},
		{map[string]string{wire.DebateStrategyKey: "plurality"}, `sw4rm-debate-strategy: unknown voting strategy "plurality"`},
		{map[string]string{wire.DebateSummaryBytesKey: "0"}, `sw4rm-debate-summary-bytes "0" is not an integer from 1 to 16777216`},
		{map[string]string{wire.DebateSummaryBytesKey: "16777217"}, `sw4rm-debate-summary-bytes "16777217"`},
		{map[string]string{wire.DebateSummaryBytesKey: "1k"}, `sw4rm-debate-summary-bytes "1k"`},
	}
	for _, c := range cases {
		_, err := ParseOptions(c.md)
		require.ErrorIs(t, err, ErrInvalidOptions, "%v", c.md)
		assert.Contains(t, err.Error(), c.want)
	}
}

func TestParseVerdict(t *testing.T) {
	cases := []struct {
		name string
		text string
		want Verdict
	}{
		{"plain approve", "I like it.\nFINAL_VERDICT: approve", Verdict{Label: "approve", Score: 10, Confidence: 1, Passed: true}},
		{"plain reject", "FINAL_VERDICT: reject", Verdict{Label: "reject", Score: 0, Confidence: 1}},
		{"key=value", "Too risky.\nFINAL_VERDICT: reject score=3 confidence=0.8", Verdict{Label: "reject", Score: 3, Confidence: 0.8}},
		{"key: value and key:value", "FINAL_VERDICT: Approved. score: 7.5, confidence:0.6", Verdict{Label: "approved", Score: 7.5, Confidence: 0.6, Passed: true}},
		{"JSON", `FINAL_VERDICT: {"verdict":"approve","score":8,"confidence":0.9}`, Verdict{Label: "approve", Score: 8, Confidence: 0.9, Passed: true}},
		{"JSON with label and defaults", `FINAL_VERDICT {"label": "Reject"}`, Verdict{Label: "reject", Score: 0, Confidence: 1}},
		{"JSON, passing label default score", `FINAL_VERDICT: {"verdict": "accept", "confidence": 0.5}`, Verdict{Label: "accept", Score: 10, Confidence: 0.5, Passed: true}},
		{"out of range values clamped", "FINAL_VERDICT: approve score=42 confidence=-1", Verdict{Label: "approve", Score: 10, Confidence: 0, Passed: true}},
		{"non-finite values ignored", "FINAL_VERDICT: reject score=NaN confidence=Inf", Verdict{Label: "reject", Score: 0, Confidence: 1}},
		{"the last marker line wins", "FINAL_VERDICT: reject\nOn reflection:\nFINAL_VERDICT: approve score=9", Verdict{Label: "approve", Score: 9, Confidence: 1, Passed: true}},
		{"markdown emphasis and case", "  **final_verdict**: **LGTM**  ", Verdict{Label: "lgtm", Score: 10, Confidence: 1, Passed: true}},
		{"heading and quote marks", "> ### FINAL_VERDICT = yes", Verdict{Label: "yes", Score: 10, Confidence: 1, Passed: true}},
		{"dash separator", "FINAL_VERDICT - agree", Verdict{Label: "agree", Score: 10, Confidence: 1, Passed: true}},
		{"CRLF", "text\r\nFINAL_VERDICT: approve\r\n", Verdict{Label: "approve", Score: 10, Confidence: 1, Passed: true}},
		{"marker without label", "FINAL_VERDICT:", Verdict{Label: "", Score: 0, Confidence: 1}},
		{"score without label", "FINAL_VERDICT: score=6", Verdict{Label: "", Score: 6, Confidence: 1}},
		{"unknown label does not pass", "FINAL_VERDICT: maybe score=5", Verdict{Label: "maybe", Score: 5, Confidence: 1}},
		{"missing", "I approve of this.", Verdict{Missing: true}},
		{"a marker mid-line does not count", "I will give my FINAL_VERDICT: approve later", Verdict{Missing: true}},
		{"another word", "FINAL_VERDICTS: approve", Verdict{Missing: true}},
		{"empty text", "", Verdict{Missing: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := ParseVerdict("critic", c.text)
			c.want.Agent = "critic"
			assert.Equal(t, c.want, got)
		})
	}
}

func TestClaims(t *testing.T) {
	text := "We should use Postgres.  It scales!\n" +
		"- it SCALES!\n" +
		"1. The price is 3.5 EUR, e.g. for bulk?\n" +
		"---\n" +
		"**FINAL_VERDICT**: approve\n" +
		"   \n" +
		"Trailing claim without a stop"
	assert.Equal(t, []string{
		"we should use postgres",
		"it scales",
		"the price is 3.5 eur, e.g",
		"for bulk",
		"trailing claim without a stop",
	}, Claims(text))
	assert.Empty(t, Claims(""))
	assert.Empty(t, Claims("FINAL_VERDICT: approve\n1.\n***"))
}

func TestConverged(t *testing.T) {
	r1 := []Turn{
		{Round: 1, Agent: "pro", Text: "X is fast. X is cheap."},
		{Round: 1, Agent: "con", Text: "X is insecure."},
	}
	cases := []struct {
		name    string
		earlier []Turn
		round   []Turn
		want    bool
	}{
		{"first round never converges", nil, r1, false},
		{"empty round does not converge", r1, nil, false},
		{"restated claims only, in other words' case and punctuation", r1, []Turn{
			{Round: 2, Agent: "pro", Text: "x is FAST!  x is insecure...\nFINAL_VERDICT: approve score=6"},
			{Round: 2, Agent: "con", Text: "- X is cheap"},
		}, true},
		{"one new claim", r1, []Turn{
			{Round: 2, Agent: "pro", Text: "X is fast."},
			{Round: 2, Agent: "con", Text: "X is insecure. Y is safer."},
		}, false},
		{"a claim another agent made earlier is not new", r1, []Turn{{Round: 2, Agent: "con", Text: "X is fast."}}, true},
		{"only verdict lines add nothing", r1, []Turn{{Round: 2, Agent: "con", Text: "FINAL_VERDICT: reject"}}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, Converged(c.earlier, c.round))
		})
	}
}

func TestAggregate(t *testing.T) {
	vs := []Verdict{
		{Agent: "a", Label: "approve", Score: 8, Confidence: 0.9, Passed: true},
		{Agent: "b", Label: "approve", Score: 6, Confidence: 0.6, Passed: true},
		{Agent: "c", Label: "reject", Score: 2, Confidence: 1},
		{Agent: "d", Missing: true},
	}
	votes := []*negotiationroompb.NegotiationVote{
		{CriticId: "a", Score: 8, Confidence: 0.9, Passed: true},
		{CriticId: "b", Score: 6, Confidence: 0.6, Passed: true},
		{CriticId: "c", Score: 2, Confidence: 1},
	}
	for _, s := range voting.Strategies() {
		agg, majority := Aggregate(string(s), vs)
		want := voting.Aggregate(s, votes)
		assert.Equal(t, want.GetWeightedMean(), agg.GetWeightedMean(), "%s", s)
		assert.Equal(t, int32(3), agg.GetVoteCount(), "the missing verdict is left out")
		assert.Equal(t, "approve", majority)
	}
	// confidence_weighted by hand: (8*0.9 + 6*0.6 + 2*1) / (0.9+0.6+1) = 12.8/2.5 = 5.12.
	agg, _ := Aggregate("", vs)
	assert.InDelta(t, 5.12, agg.GetWeightedMean(), 1e-9)
	unknown, _ := Aggregate("plurality", vs)
	assert.Equal(t, agg.GetWeightedMean(), unknown.GetWeightedMean(), "an unknown strategy is the default")
}

func TestAggregateMajority(t *testing.T) {
	v := func(label string) Verdict { return Verdict{Agent: label, Label: label, Score: 5, Confidence: 1} }
	cases := []struct {
		name string
		vs   []Verdict
		want string
	}{
		{"none", nil, ""},
		{"tie", []Verdict{v("approve"), v("reject")}, ""},
		{"tie at the top despite a third", []Verdict{v("approve"), v("reject"), v("approve"), v("reject"), v("maybe")}, ""},
		{"clear", []Verdict{v("reject"), v("approve"), v("reject")}, "reject"},
		{"empty labels do not count", []Verdict{v(""), v(""), v("approve")}, "approve"},
		{"missing do not count", []Verdict{{Agent: "x", Label: "reject", Missing: true}, {Agent: "y", Label: "reject", Missing: true}, v("approve")}, "approve"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			agg, majority := Aggregate("", c.vs)
			assert.Equal(t, c.want, majority)
			assert.False(t, math.IsNaN(agg.GetWeightedMean()))
		})
	}
	agg, _ := Aggregate("", nil)
	assert.Equal(t, int32(0), agg.GetVoteCount())
}

func TestInstruction(t *testing.T) {
	first := Instruction(1, 3, false)
	assert.True(t, strings.HasPrefix(first, "Debate round 1 of 3."), first)
	assert.Contains(t, first, "next round")
	assert.NotContains(t, first, VerdictMarker)

	middle := Instruction(2, 3, false)
	assert.Contains(t, middle, "Debate round 2 of 3. Debate transcript so far")
	assert.NotContains(t, middle, VerdictMarker)

	final := Instruction(3, 3, true)
	assert.Contains(t, final, "Debate transcript so far")
	assert.Contains(t, final, `end your answer with one line of the form "FINAL_VERDICT: approve|reject score=<0-10> confidence=<0-1>"`)

	single := Instruction(1, 1, true)
	assert.NotContains(t, single, "next round")
	assert.Contains(t, single, VerdictMarker)

	parallel := Instruction(1, 0, true)
	assert.Contains(t, parallel, "in parallel")
	assert.Contains(t, parallel, VerdictMarker)
	assert.NotContains(t, parallel, "transcript")

	// The verdict format the instruction asks for is one ParseVerdict reads.
	assert.Equal(t, Verdict{Agent: "a", Label: "reject", Score: 4, Confidence: 0.5},
		ParseVerdict("a", "FINAL_VERDICT: reject score=4 confidence=0.5"))
}

// TestResultJSON pins the decide event's result shape.
func TestResultJSON(t *testing.T) {
	agg, majority := Aggregate("", []Verdict{{Agent: "a", Label: "approve", Score: 10, Confidence: 1, Passed: true}})
	r := Result{Mode: ModeDebate, RoundsRun: 2, StopReason: StopConverged,
		Transcript: []Turn{{Round: 1, Agent: "a", Text: "t"}},
		Verdicts:   []Verdict{{Agent: "a", Label: "approve", Score: 10, Confidence: 1, Passed: true}},
		Aggregate:  agg, Majority: majority}
	b, err := json.Marshal(r)
	require.NoError(t, err)
	assert.JSONEq(t, `{"mode":"debate","rounds_run":2,"stop_reason":"converged",
		"transcript":[{"round":1,"agent":"a","text":"t"}],
		"verdicts":[{"agent":"a","label":"approve","score":10,"confidence":1,"passed":true,"missing":false}],
		"aggregate":{"mean":10,"min_score":10,"max_score":10,"weighted_mean":10,"vote_count":1},
		"majority":"approve"}`, string(b))

	p := TurnParams{NegotiationID: "n", Topic: "t", Round: 1, Rounds: 2, Instruction: Instruction(1, 2, false)}
	b, err = json.Marshal(p)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "transcript", "empty transcript and summary are left out")
	assert.NotContains(t, string(b), "summary")
}

// FuzzParseVerdict: ParseVerdict and Claims never panic, and a verdict's numbers stay on their
// scales.
func FuzzParseVerdict(f *testing.F) {
	for _, s := range []string{
		"FINAL_VERDICT: approve", "FINAL_VERDICT: reject score=3 confidence=0.8",
		`FINAL_VERDICT: {"verdict":"approve","score":8,"confidence":0.9}`, "**FINAL_VERDICT** = yes score: 1e309",
		"FINAL_VERDICT", "FINAL_VERDICT: {", "no marker. at all!", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		v := ParseVerdict("a", text)
		if !(v.Score >= 0 && v.Score <= 10) || !(v.Confidence >= 0 && v.Confidence <= 1) {
			t.Fatalf("%+v off scale for %q", v, text)
		}
		if v.Missing && (v.Label != "" || v.Passed) {
			t.Fatalf("missing verdict with content: %+v", v)
		}
		for _, c := range Claims(text) {
			if c == "" || c != strings.TrimSpace(c) {
				t.Fatalf("claim %q of %q", c, text)
			}
		}
	})
}
