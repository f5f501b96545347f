package inference

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
)

func TestDecide(t *testing.T) {
	down := errors.New("connection refused")
	conflict := commonpb.HitlReasonType_CONFLICT
	none := commonpb.HitlReasonType_HITL_REASON_UNSPECIFIED
	cases := []struct {
		name      string
		a         Assessment
		threshold float64
		err       error
		policy    UnavailablePolicy
		parallel  bool
		escalate  bool
		fallback  UnavailablePolicy
		reason    []string
	}{
		{"above threshold runs in parallel", Assessment{Confidence: 0.95, Rule: RuleDifferentRepos}, 0.7, nil, "", true, false, "",
			[]string{"confidence 0.95 (rule different_repos) meets the threshold 0.7"}},
		{"exactly at threshold runs in parallel", Assessment{Confidence: 0.7}, 0.7, nil, "", true, false, "",
			[]string{"confidence 0.7 meets the threshold 0.7"}},
		{"below threshold escalates with CONFLICT", Assessment{Confidence: 0.2, Rule: RuleOverlappingPaths}, 0.7, nil, "", false, true, "",
			[]string{"confidence 0.2 (rule overlapping_paths) is below the threshold 0.7", "HITL with reason CONFLICT (§9.3)"}},
		{"just below threshold escalates", Assessment{Confidence: 0.6999}, 0.7, nil, UnavailableAllow, false, true, "", nil},
		{"configured threshold is honoured", Assessment{Confidence: 0.8}, 0.9, nil, "", false, true, "", []string{"below the threshold 0.9"}},
		{"low configured threshold", Assessment{Confidence: 0.5}, 0.4, nil, "", true, false, "", nil},
		{"zero threshold means the default", Assessment{Confidence: 0.6}, 0, nil, "", false, true, "", []string{"below the threshold 0.7"}},
		{"negative threshold means the default", Assessment{Confidence: 0.75}, -1, nil, "", true, false, "", []string{"meets the threshold 0.7"}},
		{"NaN threshold means the default", Assessment{Confidence: 0.6}, math.NaN(), nil, "", false, true, "", []string{"threshold 0.7"}},
		{"threshold above 1 escalates everything", Assessment{Confidence: 1}, 1.01, nil, "", false, true, "", nil},
		{"NaN confidence escalates", Assessment{Confidence: math.NaN()}, 0.7, nil, "", false, true, "", []string{"not a valid score in [0, 1]"}},
		{"confidence above 1 escalates", Assessment{Confidence: 1.5}, 0.7, nil, "", false, true, "", []string{"not a valid score"}},
		{"negative confidence escalates", Assessment{Confidence: -0.1}, 0.7, nil, "", false, true, "", []string{"not a valid score"}},
		{"unavailable, default policy serializes", Assessment{Confidence: 0.99}, 0.7, down, "", false, false, UnavailableSerialize,
			[]string{"inference engine unavailable (connection refused)", "serializing per unavailable policy serialize"}},
		{"unavailable, serialize", Assessment{}, 0.7, down, UnavailableSerialize, false, false, UnavailableSerialize, []string{"serializing"}},
		{"unavailable, hitl escalates with CONFLICT", Assessment{}, 0.7, down, UnavailableHITL, false, true, UnavailableHITL,
			[]string{"escalating to HITL with reason CONFLICT per unavailable policy hitl"}},
		{"unavailable, policy is case-insensitive", Assessment{}, 0.7, down, "HITL", false, true, UnavailableHITL, nil},
		{"unavailable, explicit allow", Assessment{}, 0.7, down, UnavailableAllow, true, false, UnavailableAllow,
			[]string{"explicitly configured as allow"}},
		{"unavailable, unknown policy serializes", Assessment{Confidence: 1}, 0.7, down, "yolo", false, false, UnavailableSerialize,
			[]string{`unknown policy "yolo" treated as serialize`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := Decide(tc.a, tc.threshold, tc.err, tc.policy)
			assert.Equal(t, tc.parallel, v.Parallel, "Parallel; reason %q", v.Reason)
			assert.Equal(t, tc.escalate, v.Escalate, "Escalate; reason %q", v.Reason)
			assert.False(t, v.Parallel && v.Escalate, "never both")
			want := none
			if tc.escalate {
				want = conflict
			}
			assert.Equal(t, want, v.ReasonType)
			assert.Equal(t, tc.fallback, v.Fallback)
			assert.NotEmpty(t, v.Reason)
			for _, r := range tc.reason {
				assert.Contains(t, v.Reason, r)
			}
		})
	}
}

func TestParseUnavailablePolicy(t *testing.T) {
	for in, want := range map[string]UnavailablePolicy{
		"": UnavailableSerialize, "serialize": UnavailableSerialize, " Serialize ": UnavailableSerialize,
		"hitl": UnavailableHITL, "HITL": UnavailableHITL, "allow": UnavailableAllow,
	} {
		got, err := ParseUnavailablePolicy(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	_, err := ParseUnavailablePolicy("parallel")
	assert.ErrorContains(t, err, `unknown inference-unavailable policy "parallel" (want serialize, hitl or allow)`)
}

// The default table and threshold end to end: only different_repos and disjoint run in
// parallel; every other rule escalates to HITL with CONFLICT.
func TestDefaultsEndToEnd(t *testing.T) {
	e := &RuleEngine{}
	parallel := map[string]bool{RuleDifferentRepos: true, RuleDisjoint: true}
	for _, r := range ruleOrder {
		v := Decide(Assessment{Confidence: DefaultConfidences().For(r), Rule: r}, DefaultThreshold, nil, "")
		assert.Equal(t, parallel[r], v.Parallel, r)
		assert.Equal(t, !parallel[r], v.Escalate, r)
	}
	a, err := e.CheckParallelism(mustScope(t, "repo:r path:src/ui/**"), mustScope(t, "repo:r path:src/ui/button.go"))
	require.NoError(t, err)
	v := Decide(a, DefaultThreshold, nil, "")
	assert.True(t, v.Escalate)
	assert.Equal(t, commonpb.HitlReasonType_CONFLICT, v.ReasonType)
	assert.Contains(t, v.Reason, "rule overlapping_paths")
}
