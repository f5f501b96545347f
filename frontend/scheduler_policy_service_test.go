package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/negotiation"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

var _ schedulerpb.SchedulerPolicyServiceServer = (*schedulerPolicyService)(nil)

func newPolicyService(t *testing.T) (*schedulerPolicyService, store.Store) {
	t.Helper()
	st := memory.New()
	t.Cleanup(st.Close)
	log := slog.New(slog.DiscardHandler)
	return &schedulerPolicyService{s: &Server{store: st, sink: audit.New(log, st.Audit()), log: log}}, st
}

// opsContext is the context of a call proven to come from operator ops.
func opsContext(t *testing.T) context.Context {
	return auth.WithPrincipal(t.Context(), auth.Principal{Operator: "ops"})
}

// auditOf returns the details of the audit rows of type typ, oldest first.
func auditOf(t *testing.T, st store.Store, typ string) []map[string]any {
	t.Helper()
	evs, err := st.Audit().List(t.Context(), store.AuditFilter{TypePrefix: typ})
	require.NoError(t, err)
	var out []map[string]any
	for _, e := range evs {
		if e.Type != typ {
			continue
		}
		var d map[string]any
		require.NoError(t, json.Unmarshal(e.Details, &d))
		d["actor"] = e.Actor
		out = append(out, d)
	}
	return out
}

func fullPolicy() *policypb.NegotiationPolicy {
	return &policypb.NegotiationPolicy{
		MaxRounds: 6, ScoreThreshold: 0.8, DiffTolerance: 0.1, RoundTimeoutMs: 60000, TokenBudgetPerRound: 2000,
		TotalTokenBudget: 10000, OscillationLimit: 2, Hitl: &policypb.NegotiationPolicy_Hitl{Mode: "PauseBetweenRounds"},
		Scoring: &policypb.NegotiationPolicy_Scoring{RequireSchemaValid: true, LlmWeight: 0.25},
	}
}

func TestSetAndGetNegotiationPolicy(t *testing.T) {
	ps, st := newPolicyService(t)
	ctx := opsContext(t)
	got, err := ps.GetNegotiationPolicy(ctx, &schedulerpb.GetNegotiationPolicyRequest{})
	require.NoError(t, err)
	assert.Nil(t, got.GetPolicy(), "never set")

	resp, err := ps.SetNegotiationPolicy(ctx, &schedulerpb.SetNegotiationPolicyRequest{Policy: fullPolicy()})
	require.NoError(t, err)
	require.True(t, resp.GetOk(), resp.GetReason())
	assert.Empty(t, resp.GetReason())
	got, err = ps.GetNegotiationPolicy(ctx, &schedulerpb.GetNegotiationPolicyRequest{})
	require.NoError(t, err)
	assert.True(t, proto.Equal(fullPolicy(), got.GetPolicy()), "%v", got.GetPolicy())

	sets := auditOf(t, st, AuditNegotiationPolicySet)
	require.Len(t, sets, 1)
	assert.Equal(t, "operator:ops", sets[0]["actor"])
	assert.Equal(t, "base", sets[0]["scope"])
	assert.Equal(t, map[string]any{"mode": "PauseBetweenRounds"}, sets[0]["policy"].(map[string]any)["hitl"], "the audit row shows the values set")
}

func TestSetNegotiationPolicyRefusals(t *testing.T) {
	cases := []struct {
		name   string
		policy *policypb.NegotiationPolicy
		parts  []string
	}{
		{"threshold above 1", &policypb.NegotiationPolicy{ScoreThreshold: 1.5}, []string{"score_threshold 1.5 is outside 0..1"}},
		{"negative tolerance", &policypb.NegotiationPolicy{DiffTolerance: -0.1}, []string{"diff_tolerance -0.1 is outside 0..1"}},
		{"NaN llm_weight", &policypb.NegotiationPolicy{Scoring: &policypb.NegotiationPolicy_Scoring{LlmWeight: float32(math.NaN())}},
			[]string{"scoring.llm_weight NaN is outside 0..1"}},
		{"unknown hitl mode", &policypb.NegotiationPolicy{Hitl: &policypb.NegotiationPolicy_Hitl{Mode: "pausebetweenrounds"}},
			[]string{`hitl.mode "pausebetweenrounds" is not one of None, PauseBetweenRounds, PauseOnFinalAccept`}},
		{"huge round timeout", &policypb.NegotiationPolicy{RoundTimeoutMs: math.MaxUint64}, []string{"round_timeout_ms", "too large"}},
		{"every problem at once", &policypb.NegotiationPolicy{ScoreThreshold: 2, DiffTolerance: 3, Hitl: &policypb.NegotiationPolicy_Hitl{Mode: "Sometimes"}},
			[]string{"score_threshold 2", "; diff_tolerance 3", `; hitl.mode "Sometimes"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ps, st := newPolicyService(t)
			ctx := opsContext(t)
			require.NoError(t, st.NegotiationPolicies().SetBasePolicy(ctx, fullPolicy(), "before"))
			resp, err := ps.SetNegotiationPolicy(ctx, &schedulerpb.SetNegotiationPolicyRequest{Policy: tc.policy})
			require.NoError(t, err, "a policy that breaks the rules is answered ok=false, not an error status")
			assert.False(t, resp.GetOk())
			assert.True(t, strings.HasPrefix(resp.GetReason(), "validation_error: "), resp.GetReason())
			for _, p := range tc.parts {
				assert.Contains(t, resp.GetReason(), p)
			}
			got, err := st.NegotiationPolicies().GetBasePolicy(ctx)
			require.NoError(t, err)
			assert.True(t, proto.Equal(fullPolicy(), got), "nothing is stored")
			refused := auditOf(t, st, AuditNegotiationPolicyRefused)
			require.Len(t, refused, 1)
			assert.Equal(t, resp.GetReason(), refused[0]["reason"])
			assert.Empty(t, auditOf(t, st, AuditNegotiationPolicySet))
		})
	}

	t.Run("zero fields are unset, not refused", func(t *testing.T) {
		ps, _ := newPolicyService(t)
		for _, p := range []*policypb.NegotiationPolicy{{}, {ScoreThreshold: 1, DiffTolerance: 0}, {Hitl: &policypb.NegotiationPolicy_Hitl{Mode: "None"}}} {
			resp, err := ps.SetNegotiationPolicy(opsContext(t), &schedulerpb.SetNegotiationPolicyRequest{Policy: p})
			require.NoError(t, err)
			assert.True(t, resp.GetOk(), "%v: %s", p, resp.GetReason())
		}
	})

	t.Run("a request without a policy is malformed", func(t *testing.T) {
		ps, st := newPolicyService(t)
		_, err := ps.SetNegotiationPolicy(opsContext(t), &schedulerpb.SetNegotiationPolicyRequest{})
		st2 := toStatus(t.Context(), err)
		assert.Equal(t, codes.InvalidArgument, st2.Code(), "%v", err)
		assert.True(t, strings.HasPrefix(st2.Message(), "validation_error: policy is required"), st2.Message())
		got, err := st.NegotiationPolicies().GetBasePolicy(t.Context())
		require.NoError(t, err)
		assert.Nil(t, got)
	})
}

func TestSetAndListPolicyProfiles(t *testing.T) {
	ps, st := newPolicyService(t)
	ctx := opsContext(t)
	list, err := ps.ListPolicyProfiles(ctx, &schedulerpb.ListPolicyProfilesRequest{})
	require.NoError(t, err)
	assert.Empty(t, list.GetProfiles())

	profiles := []*policypb.PolicyProfile{{Name: "thorough", Policy: fullPolicy()}, {Name: "fast", Policy: &policypb.NegotiationPolicy{MaxRounds: 2}}}
	resp, err := ps.SetPolicyProfiles(ctx, &schedulerpb.SetPolicyProfilesRequest{Profiles: profiles})
	require.NoError(t, err)
	require.True(t, resp.GetOk(), resp.GetReason())
	list, err = ps.ListPolicyProfiles(ctx, &schedulerpb.ListPolicyProfilesRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetProfiles(), 2)
	assert.Equal(t, "fast", list.GetProfiles()[0].GetName(), "sorted by name")
	assert.True(t, proto.Equal(profiles[0], list.GetProfiles()[1]))

	sets := auditOf(t, st, AuditNegotiationPolicySet)
	require.Len(t, sets, 1)
	assert.Equal(t, "profiles", sets[0]["scope"])
	assert.Equal(t, []any{"thorough", "fast"}, sets[0]["profiles"])

	// An empty list removes every profile.
	resp, err = ps.SetPolicyProfiles(ctx, &schedulerpb.SetPolicyProfilesRequest{})
	require.NoError(t, err)
	require.True(t, resp.GetOk(), resp.GetReason())
	list, err = ps.ListPolicyProfiles(ctx, &schedulerpb.ListPolicyProfilesRequest{})
	require.NoError(t, err)
	assert.Empty(t, list.GetProfiles())
}

func TestSetPolicyProfilesRefusals(t *testing.T) {
	long := strings.Repeat("é", negotiation.MaxProfileNameLength+1)
	cases := []struct {
		name     string
		profiles []*policypb.PolicyProfile
		parts    []string
	}{
		{"blank name", []*policypb.PolicyProfile{{Name: "ok"}, {Name: "  "}}, []string{"profile 1 has no name"}},
		{"duplicate", []*policypb.PolicyProfile{{Name: "a"}, {Name: "b"}, {Name: "a"}}, []string{`profile "a" is given twice`}},
		{"too long", []*policypb.PolicyProfile{{Name: long}}, []string{"longer than 64 characters"}},
		{"bad policy", []*policypb.PolicyProfile{{Name: "fast", Policy: &policypb.NegotiationPolicy{ScoreThreshold: 7}}},
			[]string{`profile "fast": invalid negotiation policy: score_threshold 7 is outside 0..1`}},
		{"every problem", []*policypb.PolicyProfile{{Name: "", Policy: &policypb.NegotiationPolicy{DiffTolerance: 2}}, {Name: "x"}, {Name: "x"}},
			[]string{"profile 0 has no name", "profile 0: invalid negotiation policy: diff_tolerance 2", `profile "x" is given twice`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ps, st := newPolicyService(t)
			ctx := opsContext(t)
			require.NoError(t, st.NegotiationPolicies().SetProfiles(ctx, []*policypb.PolicyProfile{{Name: "kept"}}, "before"))
			resp, err := ps.SetPolicyProfiles(ctx, &schedulerpb.SetPolicyProfilesRequest{Profiles: tc.profiles})
			require.NoError(t, err)
			assert.False(t, resp.GetOk())
			assert.True(t, strings.HasPrefix(resp.GetReason(), "validation_error: "), resp.GetReason())
			for _, p := range tc.parts {
				assert.Contains(t, resp.GetReason(), p)
			}
			list, err := st.NegotiationPolicies().ListProfiles(ctx)
			require.NoError(t, err)
			require.Len(t, list, 1, "nothing changed")
			assert.Equal(t, "kept", list[0].GetName())
			assert.Len(t, auditOf(t, st, AuditNegotiationPolicyRefused), 1)
		})
	}
	// 64 characters is allowed (characters, not bytes).
	ps, _ := newPolicyService(t)
	resp, err := ps.SetPolicyProfiles(opsContext(t), &schedulerpb.SetPolicyProfilesRequest{Profiles: []*policypb.PolicyProfile{{Name: long[2:]}}})
	require.NoError(t, err)
	assert.True(t, resp.GetOk(), resp.GetReason())
}

// failingPolicies is a NegotiationPolicies whose every call fails like an unreachable store.
type failingPolicies struct{}

var errStoreDown = errors.New("connection refused")

func (failingPolicies) GetBasePolicy(context.Context) (*policypb.NegotiationPolicy, error) {
	return nil, errStoreDown
}
func (failingPolicies) SetBasePolicy(context.Context, *policypb.NegotiationPolicy, string) error {
	return errStoreDown
}
func (failingPolicies) SetProfiles(context.Context, []*policypb.PolicyProfile, string) error {
	return errStoreDown
}
func (failingPolicies) ListProfiles(context.Context) ([]*policypb.PolicyProfile, error) {
	return nil, errStoreDown
}
func (failingPolicies) GetProfile(context.Context, string) (*policypb.PolicyProfile, error) {
	return nil, errStoreDown
}

type failingPolicyStore struct{ store.Store }

func (failingPolicyStore) NegotiationPolicies() store.NegotiationPolicies { return failingPolicies{} }

func TestPolicyStoreFailuresAreUnavailable(t *testing.T) {
	st := failingPolicyStore{memory.New()}
	ps := &schedulerPolicyService{s: &Server{store: st, sink: audit.New(slog.New(slog.DiscardHandler), st.Audit())}}
	ctx := opsContext(t)
	_, err1 := ps.SetNegotiationPolicy(ctx, &schedulerpb.SetNegotiationPolicyRequest{Policy: fullPolicy()})
	_, err2 := ps.GetNegotiationPolicy(ctx, &schedulerpb.GetNegotiationPolicyRequest{})
	_, err3 := ps.SetPolicyProfiles(ctx, &schedulerpb.SetPolicyProfilesRequest{})
	_, err4 := ps.ListPolicyProfiles(ctx, &schedulerpb.ListPolicyProfilesRequest{})
	for _, err := range []error{err1, err2, err3, err4} {
		st := toStatus(t.Context(), err)
		assert.Equal(t, codes.Unavailable, st.Code(), "%v", err)
		assert.Contains(t, st.Message(), "connection refused")
		assert.Contains(t, st.Message(), "; retry")
	}
	assert.Equal(t, codes.Unavailable, status.Code(toStatus(t.Context(), err1).Err()))
}
