package test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/sw4rm/sw4rm-temporal/examples/debate/deliberation"
)

// TestDebateExample: on both stores, the debate example (examples/debate, `make
// example-debate`) does what its README says. The contract negotiation refuses the invalid
// draft with a reason per failing path, takes the seller's preferences into the effective
// policy, publishes every §17.1 event to the opener in order, and is decided by consensus on
// the counter. The A/B harness runs every fixture as a two-round debate and as the parallel
// vote on the same three reviewers and gets the deterministic table: debate 5/6, vote 4/6, a
// lift of 16.7 points. HITL operators are configured, as `make dev` configures one: a debate
// turn's admission must not wait for a human because the other participants' turns of the
// same round are running. The example ends by itself, well within its deadline, and cleans
// up: every agent it registered (buyer, seller, moderator, three reviewers) is deregistered
// with its lifecycle ended, and it leaves no dead letter.
func TestDebateExample(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, hitlConfig(t, kind))
			// The deadline is what would end a run that hangs.
			ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
			defer cancel()
			var out bytes.Buffer
			res, err := deliberation.Run(ctx, sys.app.GRPCAddr(), deliberation.Options{Out: &out, Wait: time.Minute})
			require.NoError(t, err, "example output:\n%s", out.String())
			require.NoError(t, ctx.Err(), "the example ends by itself")

			c := res.Contract
			assert.Equal(t, codes.InvalidArgument, c.RefusalCode)
			for _, path := range []string{"/version", "/price_per_1k_calls", "/sla"} {
				assert.Contains(t, c.Refusal, path, "the refusal names each failing path")
			}
			assert.EqualValues(t, 3, c.Effective.GetPolicy().GetMaxRounds(), "the seller's preference lowers LOW's 4 rounds")
			assert.InDelta(t, 0.75, c.Effective.GetPolicy().GetScoreThreshold(), 1e-6, "and raises its threshold")
			assert.Contains(t, c.Effective.GetApplied(), c.Seller)
			assert.Equal(t, []string{"open", "policy", "propose", "evaluate", "counter", "evaluate", "decide"}, c.Kinds,
				"the opener receives every event, in order, and the refused draft made none")
			assert.Equal(t, "consensus", c.DecidedBy)
			assert.Equal(t, "consensus", c.Decision.GetDecidedBy())
			assert.Equal(t, "threshold_met", c.Decision.GetStopReason())
			assert.Equal(t, deliberation.DraftCounter, c.Result)

			h := res.Harness
			require.Len(t, h.Rows, len(deliberation.Fixtures))
			want := map[string]struct{ debate, vote string }{
				"payments": {deliberation.Good, deliberation.Good},
				"orders":   {deliberation.Bad, deliberation.Good},
				"webhooks": {deliberation.Good, deliberation.Bad},
				"reports":  {deliberation.Bad, deliberation.Bad},
				"docs":     {deliberation.Good, deliberation.Good},
				"billing":  {deliberation.Good, deliberation.Bad},
			}
			for _, r := range h.Rows {
				name := r.Fixture.Name
				assert.Equal(t, want[name].debate, r.Debate.Verdict, "%s in debate", name)
				assert.Equal(t, want[name].vote, r.Vote.Verdict, "%s in the vote", name)
				assert.Equal(t, "debate", r.Debate.Mode, name)
				assert.Equal(t, deliberation.DebateRounds, r.Debate.RoundsRun, name)
				assert.Len(t, r.Debate.Transcript, 2*len(deliberation.Roles), "%s: every reviewer spoke in both rounds", name)
				assert.Equal(t, "parallel", r.Vote.Mode, name)
				assert.Equal(t, 1, r.Vote.RoundsRun, name)
				assert.Len(t, r.Vote.Transcript, len(deliberation.Roles), name)
				assert.NotContains(t, r.Vote.Labels, "-", "%s: every reviewer voted", name)
			}
			// On orders the advocate and the pragmatist approved in round 1 and were turned by the
			// skeptic's risk: the same agents that approved in the parallel vote.
			orders := h.Rows[1]
			require.Equal(t, "orders", orders.Fixture.Name)
			assert.Equal(t, []string{"approve", "reject", "approve"}, orders.Debate.Positions)
			assert.Equal(t, []string{"reject", "reject", "reject"}, orders.Debate.Labels)
			assert.Equal(t, []string{"approve", "reject", "approve"}, orders.Vote.Labels)

			assert.Equal(t, 5, h.DebateCorrect)
			assert.Equal(t, 4, h.VoteCorrect)
			assert.InDelta(t, 100*5/6.0, h.DebateAccuracy, 1e-9)
			assert.InDelta(t, 100*4/6.0, h.VoteAccuracy, 1e-9)
			assert.InDelta(t, 100/6.0, h.Lift, 1e-9)
			assert.Contains(t, out.String(), "accuracy          5/6 83.3%   4/6 66.7%")
			assert.True(t, strings.Contains(out.String(), "+16.7 points (ADR-011 defers debate mode below 10): keep debate mode"), "output:\n%s", out.String())

			// The cleanup, and no dead letter.
			assert.Len(t, res.Registered, 6, "buyer, seller, moderator and three reviewers: %v", res.Registered)
			assertNoDeadLetters(t, assertExampleCleanedUp(ctx, t, sys, res.Registered, res.Deregistered))
		})
	}
}
