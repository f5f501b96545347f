package storetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// This file tests NegotiationPolicies: the base policy (unset, set, replaced), profiles
// replaced all at once and listed by name, refusals that change nothing, copies, and that
// concurrent replacements never leave a mix of two sets (§17.2).

// testPolicy is a policy with every field set, floats included (float32 values must come
// back exactly).
func testPolicy(rounds uint32) *policypb.NegotiationPolicy {
	return &policypb.NegotiationPolicy{
		MaxRounds: rounds, ScoreThreshold: 0.7, DiffTolerance: 0.15, RoundTimeoutMs: 30000,
		TokenBudgetPerRound: 4096, TotalTokenBudget: 20000, OscillationLimit: 2,
		Hitl:    &policypb.NegotiationPolicy_Hitl{Mode: "PauseOnFinalAccept"},
		Scoring: &policypb.NegotiationPolicy_Scoring{RequireSchemaValid: true, RequireExamplesPass: true, LlmWeight: 0.3},
	}
}

func profileNames(ps []*policypb.PolicyProfile) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.GetName()
	}
	return out
}

func listProfileNames(t *testing.T, n store.NegotiationPolicies) []string {
	t.Helper()
	ps, err := n.ListProfiles(t.Context())
	require.NoError(t, err)
	require.NotNil(t, ps, "none is an empty slice")
	return profileNames(ps)
}

func runNegotiationPolicies(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("BasePolicy", func(t *testing.T) {
		n := newStore(t).NegotiationPolicies()
		ctx := t.Context()
		got, err := n.GetBasePolicy(ctx)
		require.NoError(t, err)
		require.Nil(t, got, "never set")

		p := testPolicy(5)
		require.NoError(t, n.SetBasePolicy(ctx, p, "operator:ops"))
		got, err = n.GetBasePolicy(ctx)
		require.NoError(t, err)
		requireProtoEqual(t, p, got)

		// The caller's messages are its own: changing them changes nothing stored.
		p.MaxRounds = 99
		got.Hitl.Mode = "None"
		again, err := n.GetBasePolicy(ctx)
		require.NoError(t, err)
		requireProtoEqual(t, testPolicy(5), again)

		// Set replaces; an empty policy (every field unset) is a policy, not "none".
		require.NoError(t, n.SetBasePolicy(ctx, testPolicy(8), "operator:other"))
		got, err = n.GetBasePolicy(ctx)
		require.NoError(t, err)
		requireProtoEqual(t, testPolicy(8), got)
		require.NoError(t, n.SetBasePolicy(ctx, &policypb.NegotiationPolicy{}, "operator:ops"))
		got, err = n.GetBasePolicy(ctx)
		require.NoError(t, err)
		require.NotNil(t, got)
		requireProtoEqual(t, &policypb.NegotiationPolicy{}, got)

		require.Error(t, n.SetBasePolicy(ctx, nil, "operator:ops"), "a nil policy is refused")
		got, err = n.GetBasePolicy(ctx)
		require.NoError(t, err)
		requireProtoEqual(t, &policypb.NegotiationPolicy{}, got) // a refused set changes nothing
	})

	t.Run("Profiles", func(t *testing.T) {
		n := newStore(t).NegotiationPolicies()
		ctx := t.Context()
		require.Empty(t, listProfileNames(t, n))
		_, err := n.GetProfile(ctx, "fast")
		require.ErrorIs(t, err, store.ErrNotFound)

		profiles := []*policypb.PolicyProfile{
			{Name: "thorough", Policy: testPolicy(10)},
			{Name: "fast", Policy: &policypb.NegotiationPolicy{MaxRounds: 2}},
			{Name: "Zeta"}, // no policy: it overrides nothing
			{Name: "élan", Policy: testPolicy(3)},
		}
		require.NoError(t, n.SetProfiles(ctx, profiles, "operator:ops"))
		require.Equal(t, []string{"Zeta", "fast", "thorough", "élan"}, listProfileNames(t, n), "sorted by name, byte order")
		for _, want := range profiles {
			got, err := n.GetProfile(ctx, want.GetName())
			require.NoError(t, err)
			requireProtoEqual(t, want, got)
		}
		_, err = n.GetProfile(ctx, "FAST")
		require.ErrorIs(t, err, store.ErrNotFound, "names are case-sensitive")

		// Copies both ways.
		profiles[0].Policy.MaxRounds = 1
		got, err := n.GetProfile(ctx, "thorough")
		require.NoError(t, err)
		require.Equal(t, uint32(10), got.GetPolicy().GetMaxRounds())
		got.Policy.MaxRounds = 2
		listed, err := n.ListProfiles(ctx)
		require.NoError(t, err)
		listed[2].Policy.MaxRounds = 3
		got, err = n.GetProfile(ctx, "thorough")
		require.NoError(t, err)
		require.Equal(t, uint32(10), got.GetPolicy().GetMaxRounds())

		// Set replaces every profile: the old ones are gone.
		require.NoError(t, n.SetProfiles(ctx, []*policypb.PolicyProfile{{Name: "only", Policy: testPolicy(4)}}, "operator:other"))
		require.Equal(t, []string{"only"}, listProfileNames(t, n))
		_, err = n.GetProfile(ctx, "fast")
		require.ErrorIs(t, err, store.ErrNotFound)

		// Refused replacements change nothing.
		for name, bad := range map[string][]*policypb.PolicyProfile{
			"duplicate name": {{Name: "a"}, {Name: "b"}, {Name: "a"}},
			"empty name":     {{Name: "a"}, {Name: ""}},
			"nil profile":    {{Name: "a"}, nil},
		} {
			require.Error(t, n.SetProfiles(ctx, bad, "operator:ops"), name)
			require.Equal(t, []string{"only"}, listProfileNames(t, n), name)
		}

		// An empty list removes every profile.
		require.NoError(t, n.SetProfiles(ctx, nil, "operator:ops"))
		require.Empty(t, listProfileNames(t, n))
		_, err = n.GetProfile(ctx, "only")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("ConcurrentReplacementsNeverMix", func(t *testing.T) {
		n := newStore(t).NegotiationPolicies()
		ctx := t.Context()
		sets := [][]*policypb.PolicyProfile{
			{{Name: "a1"}, {Name: "a2"}, {Name: "a3"}},
			{{Name: "b1"}, {Name: "b2"}},
			{{Name: "a1"}, {Name: "b1"}}, // shares names with both
		}
		valid := map[string]bool{fmt.Sprint([]string{}): true} // before the first replacement
		for _, set := range sets {
			valid[fmt.Sprint(profileNames(set))] = true
		}
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 15 {
					if err := n.SetProfiles(ctx, sets[(w+i)%len(sets)], fmt.Sprintf("writer-%d", w)); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 30 {
					ps, err := n.ListProfiles(ctx)
					if err != nil {
						errs <- err
						return
					}
					if names := profileNames(ps); !valid[fmt.Sprint(names)] {
						errs <- fmt.Errorf("a reader saw a mix of two sets: %v", names)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.True(t, valid[fmt.Sprint(listProfileNames(t, n))], "the last replacement stands whole")
	})
}
