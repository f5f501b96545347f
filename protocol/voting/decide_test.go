package voting

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
)

const (
	approved  = negotiationroompb.DecisionOutcome_APPROVED
	revision  = negotiationroompb.DecisionOutcome_REVISION_REQUESTED
	escalated = negotiationroompb.DecisionOutcome_ESCALATED_TO_HITL
	pending   = negotiationroompb.DecisionOutcome_DECISION_OUTCOME_UNSPECIFIED
)

var fiveCritics = []string{"c1", "c2", "c3", "c4", "c5"}

// fiveVotes builds votes c1..c5 from parallel score/confidence/passed lists.
func fiveVotes(scores, confs []float64, passed []bool) []*negotiationroompb.NegotiationVote {
	out := make([]*negotiationroompb.NegotiationVote, len(scores))
	for i := range scores {
		out[i] = vt(fiveCritics[i], scores[i], confs[i], passed[i])
	}
	return out
}

func TestDefaultPolicy(t *testing.T) {
	assert.Equal(t, Policy{
		MinScore: 7.0, MinConfidence: 0.7, MinPassRatio: 0.8, MaxStdDev: 2.0,
		EscalateBelowConfidence: 0.3, EscalateAboveStdDev: 3.0,
		Strategy: StrategyConfidenceWeighted, Version: "room-policy/v1",
	}, DefaultPolicy())
	assert.NoError(t, DefaultPolicy().Validate())
}

func TestDecideApprovalConditions(t *testing.T) {
	p := DefaultPolicy()
	all := []bool{false, true, true, true, true}
	cases := []struct {
		name    string
		votes   []*negotiationroompb.NegotiationVote
		outcome negotiationroompb.DecisionOutcome
		reason  []string // substrings the reason must contain
	}{
		{
			// scores 3, 8, 8, 8, 8: mean = 35/5 = 7; deviations -4, 1, 1, 1, 1 -> 20/5 = 4 ->
			// std_dev = 2; equal confidences -> weighted_mean = mean = 7; average confidence
			// 3.5/5 = 0.7; pass ratio 4/5 = 0.8. Every condition sits exactly on its threshold.
			name:    "all four conditions exactly at their thresholds",
			votes:   fiveVotes([]float64{3, 8, 8, 8, 8}, []float64{0.7, 0.7, 0.7, 0.7, 0.7}, all),
			outcome: approved,
			reason: []string{"approved under policy room-policy/v1 (confidence_weighted) with 5 votes",
				"weighted_mean 7 >= 7", "average confidence 0.7 >= 0.7", "pass ratio 0.8 (4/5) >= 0.8", "std_dev 2 <= 2"},
		},
		{
			// same scores; confidences 0.9 on the 3 and 0.65 on each 8: average
			// (0.9 + 4*0.65)/5 = 3.5/5 = 0.7 (still met), weighted_mean
			// (3*0.9 + 8*2.6)/3.5 = (2.7+20.8)/3.5 = 23.5/3.5 = 6.7143 < 7.
			name:    "weighted_mean below min_score alone",
			votes:   fiveVotes([]float64{3, 8, 8, 8, 8}, []float64{0.9, 0.65, 0.65, 0.65, 0.65}, all),
			outcome: revision,
			reason:  []string{"weighted_mean 6.7143 < min_score 7", "(met: average confidence 0.7 >= 0.7, pass ratio 0.8 (4/5) >= 0.8, std_dev 2 <= 2)"},
		},
		{
			// confidences all 0.69: average 0.69 < 0.7; weighted_mean = mean = 7 (met).
			name:    "average confidence below min_confidence alone",
			votes:   fiveVotes([]float64{3, 8, 8, 8, 8}, []float64{0.69, 0.69, 0.69, 0.69, 0.69}, all),
			outcome: revision,
			reason:  []string{"average confidence 0.69 < min_confidence 0.7", "(met: weighted_mean 7 >= 7, pass ratio"},
		},
		{
			// c2 fails too: pass ratio 3/5 = 0.6 < 0.8; everything else as at the thresholds.
			name:    "pass ratio below min_pass_ratio alone",
			votes:   fiveVotes([]float64{3, 8, 8, 8, 8}, []float64{0.7, 0.7, 0.7, 0.7, 0.7}, []bool{false, false, true, true, true}),
			outcome: revision,
			reason:  []string{"pass ratio 0.6 (3/5) < min_pass_ratio 0.8", "(met: weighted_mean 7 >= 7, average confidence 0.7 >= 0.7, std_dev 2 <= 2)"},
		},
		{
			// scores 2.5, 8, 8, 8, 8.5: mean 35/5 = 7; deviations -4.5, 1, 1, 1, 1.5 ->
			// 20.25+1+1+1+2.25 = 25.5; /5 = 5.1; sqrt = 2.2583 > 2 (but <= 3: no escalation).
			name:    "std_dev above max_std_dev alone",
			votes:   fiveVotes([]float64{2.5, 8, 8, 8, 8.5}, []float64{0.7, 0.7, 0.7, 0.7, 0.7}, all),
			outcome: revision,
			reason:  []string{"std_dev 2.2583 > max_std_dev 2", "(met: weighted_mean 7 >= 7, average confidence 0.7 >= 0.7, pass ratio 0.8 (4/5) >= 0.8)"},
		},
		{
			// scores 3, 8, 8, 2, 2: mean 23/5 = 4.6 = weighted_mean (equal confidences) < 7;
			// deviations -1.6, 3.4, 3.4, -2.6, -2.6 -> 2.56+11.56+11.56+6.76+6.76 = 39.2; /5 =
			// 7.84; sqrt = 2.8 > 2 (but <= 3: no escalation); confidences 0.5 (>= 0.3, average
			// 0.5 < 0.7); 2 of 5 passed = 0.4 < 0.8.
			name:    "every condition fails",
			votes:   fiveVotes([]float64{3, 8, 8, 2, 2}, []float64{0.5, 0.5, 0.5, 0.5, 0.5}, []bool{false, true, true, false, false}),
			outcome: revision,
			reason: []string{"weighted_mean 4.6 < min_score 7", "average confidence 0.5 < min_confidence 0.7",
				"pass ratio 0.4 (2/5) < min_pass_ratio 0.8", "std_dev 2.8 > max_std_dev 2"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := Decide(p, fiveCritics, tc.votes, false)
			assert.Equal(t, tc.outcome, v.Outcome, v.Reason)
			assert.Empty(t, v.Escalations)
			require.NotNil(t, v.Aggregate)
			assert.Equal(t, int32(5), v.Aggregate.GetVoteCount())
			for _, s := range tc.reason {
				assert.Contains(t, v.Reason, s)
			}
			if tc.outcome == approved {
				assert.NotContains(t, v.Reason, " < ")
				assert.NotContains(t, v.Reason, " > ")
			}
		})
	}
}

func TestDecideEscalationRules(t *testing.T) {
	p := DefaultPolicy()
	three := []string{"c1", "c2", "c3"}
	good := func(c string) *negotiationroompb.NegotiationVote { return vt(c, 9, 0.9, true) }
	cases := []struct {
		name      string
		requested []string
		votes     []*negotiationroompb.NegotiationVote
		timedOut  bool
		outcome   negotiationroompb.DecisionOutcome
		ids       []string
		reason    []string
	}{
		{
			// baseline: 9, 9, 9 at 0.9, all passed -> weighted_mean 9, avg 0.9, ratio 1, std 0.
			name: "baseline approves", requested: three,
			votes:   []*negotiationroompb.NegotiationVote{good("c1"), good("c2"), good("c3")},
			outcome: approved,
			reason:  []string{"weighted_mean 9 >= 7", "average confidence 0.9 >= 0.7", "pass ratio 1 (3/3) >= 0.8", "std_dev 0 <= 2"},
		},
		{
			// c3 confidence 0.25 < 0.3 -> rule 1, nothing else fires (std 0, no recs, all voted).
			name: "low confidence alone", requested: three,
			votes:   []*negotiationroompb.NegotiationVote{good("c1"), good("c2"), vt("c3", 9, 0.25, true)},
			outcome: escalated, ids: []string{EscalationLowConfidence},
			reason: []string{"escalated to HITL under policy room-policy/v1 (confidence_weighted)", `critic "c3" confidence 0.25 < 0.3`},
		},
		{
			// confidence exactly 0.3 is not < 0.3; average (0.9+0.9+0.3)/3 = 2.1/3 = 0.7 >= 0.7.
			name: "confidence exactly 0.3 does not escalate", requested: three,
			votes:   []*negotiationroompb.NegotiationVote{good("c1"), good("c2"), vt("c3", 9, 0.3, true)},
			outcome: approved,
			reason:  []string{"average confidence 0.7 >= 0.7"},
		},
		{
			// scores 10, 10, 2: mean 22/3 = 7.3333; deviations 8/3, 8/3, -16/3 ->
			// (64+64+256)/9 = 384/9; /3 = 128/9; sqrt = 3.7712 > 3 -> rule 2 alone.
			name: "extreme disagreement alone", requested: three,
			votes:   []*negotiationroompb.NegotiationVote{vt("c1", 10, 0.9, true), vt("c2", 10, 0.9, true), vt("c3", 2, 0.9, true)},
			outcome: escalated, ids: []string{EscalationExtremeDisagreement},
			reason: []string{"extreme disagreement: std_dev 3.7712 > 3"},
		},
		{
			// scores 10, 4: mean 7, deviations +3, -3 -> std_dev exactly 3, not > 3; but > 2,
			// so the artifact goes back for revision instead.
			name: "std_dev exactly 3 does not escalate", requested: []string{"c1", "c2"},
			votes:   []*negotiationroompb.NegotiationVote{vt("c1", 10, 0.9, true), vt("c2", 4, 0.9, true)},
			outcome: revision,
			reason:  []string{"std_dev 3 > max_std_dev 2"},
		},
		{
			name: "critic requests escalation alone", requested: three,
			votes: []*negotiationroompb.NegotiationVote{
				good("c1"), vt("c2", 9, 0.9, true, "Add retries", "ESCALATE: licence of vendored code unclear"), good("c3"),
			},
			outcome: escalated, ids: []string{EscalationCriticRequested},
			reason: []string{`critic "c2" recommends "ESCALATE: licence of vendored code unclear"`},
		},
		{
			name: "ordinary recommendations do not escalate", requested: three,
			votes: []*negotiationroompb.NegotiationVote{
				vt("c1", 9, 0.9, true, "Add unit tests"), vt("c2", 9, 0.9, true, "Escalation path is documented"), good("c3"),
			},
			outcome: approved,
		},
		{
			name: "timeout with a missing vote alone", requested: []string{"c1", "c2", "c3", "c4"},
			votes:    []*negotiationroompb.NegotiationVote{good("c1"), good("c2"), good("c3")},
			timedOut: true,
			outcome:  escalated, ids: []string{EscalationTimeoutMissingVotes},
			reason: []string{"timeout expired with 1 of 4 requested critics not voted: c4"},
		},
		{
			name: "timeout with no votes at all", requested: three,
			timedOut: true,
			outcome:  escalated, ids: []string{EscalationTimeoutMissingVotes},
			reason: []string{"timeout expired with 3 of 3 requested critics not voted: c1, c2, c3"},
		},
		{
			name: "timeout after every critic voted decides normally", requested: three,
			votes:    []*negotiationroompb.NegotiationVote{good("c1"), good("c2"), good("c3")},
			timedOut: true,
			outcome:  approved,
		},
		{
			// c1 conf 0.1 (rule 1); scores 10, 10, 0 -> mean 20/3, deviations 10/3, 10/3, -20/3 ->
			// (100+100+400)/9/3 = 600/27 -> std 4.714 (rule 2); c2 asks for a human (rule 3);
			// c4 missing at timeout (rule 4).
			name: "every rule fires, reported in rule order", requested: []string{"c1", "c2", "c3", "c4"},
			votes: []*negotiationroompb.NegotiationVote{
				vt("c3", 0, 0.9, false), vt("c1", 10, 0.1, true), vt("c2", 10, 0.9, true, "Needs human review of the migration"),
			},
			timedOut: true,
			outcome:  escalated,
			ids:      []string{EscalationLowConfidence, EscalationExtremeDisagreement, EscalationCriticRequested, EscalationTimeoutMissingVotes},
			reason: []string{`critic "c1" confidence 0.1 < 0.3`, "std_dev 4.714 > 3",
				`critic "c2" recommends "Needs human review of the migration"`, "not voted: c4"},
		},
		{
			// a decision is not due: c4 has not voted and the timeout has not expired. Even
			// though c3's confidence would already escalate, nothing is applied early.
			name: "missing vote before timeout is pending", requested: []string{"c1", "c2", "c3", "c4"},
			votes:   []*negotiationroompb.NegotiationVote{good("c1"), good("c2"), vt("c3", 9, 0.1, true)},
			outcome: pending,
			reason:  []string{"no decision yet under policy room-policy/v1 (confidence_weighted): waiting for 1 of 4 requested critics: c4"},
		},
		{
			// a vote with a NaN score is unusable, so its critic still counts as missing.
			name: "unusable vote leaves its critic missing", requested: []string{"c1", "c2"},
			votes:   []*negotiationroompb.NegotiationVote{good("c1"), vt("c2", math.NaN(), 0.9, true)},
			outcome: pending,
			reason:  []string{"waiting for 1 of 2 requested critics: c2"},
		},
		{
			name: "no critics requested and no votes", requested: nil,
			outcome: revision,
			reason:  []string{"no votes were cast"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := Decide(p, tc.requested, tc.votes, tc.timedOut)
			assert.Equal(t, tc.outcome, v.Outcome, v.Reason)
			assert.Equal(t, tc.ids, v.Escalations)
			require.NotNil(t, v.Aggregate)
			for _, s := range tc.reason {
				assert.Contains(t, v.Reason, s)
			}
		})
	}
}

func TestDecideUsesPolicyStrategy(t *testing.T) {
	// 6.5, 6.5, 6.5, all passed at 0.9: confidence_weighted -> 6.5 < 7 (revision);
	// majority_vote -> all passed -> 10 >= 7 (approved); the other conditions hold for both
	// (average confidence 0.9, pass ratio 1, std_dev 0).
	votes := []*negotiationroompb.NegotiationVote{vt("c1", 6.5, 0.9, true), vt("c2", 6.5, 0.9, true), vt("c3", 6.5, 0.9, true)}
	critics := []string{"c1", "c2", "c3"}

	p := DefaultPolicy()
	v := Decide(p, critics, votes, false)
	assert.Equal(t, revision, v.Outcome, v.Reason)
	assert.InDelta(t, 6.5, v.Aggregate.GetWeightedMean(), tol)

	p.Strategy = StrategyMajorityVote
	p.Version = "room-policy/majority"
	v = Decide(p, critics, votes, false)
	assert.Equal(t, approved, v.Outcome, v.Reason)
	assert.InDelta(t, 10, v.Aggregate.GetWeightedMean(), tol)
	assert.InDelta(t, 6.5, v.Aggregate.GetMean(), tol)
	assert.Contains(t, v.Reason, "policy room-policy/majority (majority_vote)")
}

func TestDecide003Example(t *testing.T) {
	// 8.5/0.9/passed and 6.5/0.6/failed under the default policy: weighted_mean 7.7 >= 7,
	// average confidence 1.5/2 = 0.75 >= 0.7, std_dev 1 <= 2, but pass ratio 1/2 = 0.5 < 0.8.
	votes := []*negotiationroompb.NegotiationVote{vt("critic-1", 8.5, 0.9, true), vt("critic-2", 6.5, 0.6, false)}
	v := Decide(DefaultPolicy(), []string{"critic-1", "critic-2"}, votes, false)
	assert.Equal(t, revision, v.Outcome, v.Reason)
	assert.Empty(t, v.Escalations)
	assert.Equal(t, "revision requested under policy room-policy/v1 (confidence_weighted) with 2 votes: "+
		"pass ratio 0.5 (1/2) < min_pass_ratio 0.8 "+
		"(met: weighted_mean 7.7 >= 7, average confidence 0.75 >= 0.7, std_dev 1 <= 2)", v.Reason)
}

func TestDecideIsOrderIndependent(t *testing.T) {
	a := []*negotiationroompb.NegotiationVote{vt("c1", 3, 0.7, false), vt("c2", 8, 0.7, true), vt("c3", 8, 0.7, true), vt("c4", 8, 0.7, true), vt("c5", 8, 0.7, true)}
	b := []*negotiationroompb.NegotiationVote{a[4], a[2], a[0], a[3], a[1]}
	va, vb := Decide(DefaultPolicy(), fiveCritics, a, false), Decide(DefaultPolicy(), fiveCritics, b, false)
	assert.Equal(t, va.Outcome, vb.Outcome)
	assert.Equal(t, va.Reason, vb.Reason)
	assert.Equal(t, va.Aggregate.GetWeightedMean(), vb.Aggregate.GetWeightedMean())
}

func TestRequestsEscalation(t *testing.T) {
	cases := []struct {
		rec  string
		want bool
	}{
		{"Escalate", true},
		{"ESCALATE: licence unclear", true},
		{"  escalate   to the security team ", true},
		{"escalate-to-hitl", true},
		{"Please escalate to HITL before merging", true},
		{"We should escalate to a human reviewer", true},
		{"escalate to human", true},
		{"Human review required before deploy", true},
		{"This change requires human review", true},
		{"needs \t human\nreview", true},
		{"I request human review of the schema", true},
		{"", false},
		{"   ", false},
		{"Add unit tests", false},
		{"escalated earlier and resolved", false},
		{"Escalation path is documented", false},
		{"escalates nothing", false},
		{"de-escalate the retry storm", false},
		{"Consider human reviewers for copy", false},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, RequestsEscalation(tc.rec), "recommendation %q", tc.rec)
	}
}

func TestPolicyValidate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Policy)
		msg    string
	}{
		{"min_score above 10", func(p *Policy) { p.MinScore = 11 }, "min_score 11 is outside [0, 10]"},
		{"min_score NaN", func(p *Policy) { p.MinScore = math.NaN() }, "min_score is NaN, not a finite number"},
		{"min_confidence negative", func(p *Policy) { p.MinConfidence = -0.1 }, "min_confidence -0.1 is outside [0, 1]"},
		{"min_pass_ratio above 1", func(p *Policy) { p.MinPassRatio = 1.5 }, "min_pass_ratio 1.5 is outside [0, 1]"},
		{"max_std_dev negative", func(p *Policy) { p.MaxStdDev = -1 }, "max_std_dev -1 is outside [0, 10]"},
		{"max_std_dev infinite", func(p *Policy) { p.MaxStdDev = math.Inf(1) }, "max_std_dev is +Inf, not a finite number"},
		{"escalation confidence looser than the spec", func(p *Policy) { p.EscalateBelowConfidence = 0.2 },
			"escalate_below_confidence 0.2 is outside [0.3, 1]"},
		{"escalation std_dev looser than the spec", func(p *Policy) { p.EscalateAboveStdDev = 3.5 },
			"escalate_above_std_dev 3.5 is outside [0, 3]"},
		{"unknown strategy", func(p *Policy) { p.Strategy = "median" }, `unknown voting strategy "median"`},
		{"empty strategy", func(p *Policy) { p.Strategy = "" }, "strategy is empty"},
		{"empty version", func(p *Policy) { p.Version = " " }, "version is empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultPolicy()
			tc.mutate(&p)
			err := p.Validate()
			require.ErrorIs(t, err, ErrInvalidPolicy)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}

	// stricter-than-spec escalation limits are fine
	p := DefaultPolicy()
	p.EscalateBelowConfidence, p.EscalateAboveStdDev = 0.5, 2.5
	assert.NoError(t, p.Validate())

	// every problem is listed, in field order
	p = DefaultPolicy()
	p.MinScore, p.Version = -1, ""
	assert.EqualError(t, p.Validate(),
		`invalid negotiation room policy "": min_score -1 is outside [0, 10]; version is empty (RFC §17.5: decisions MUST carry policy_version)`)
}
