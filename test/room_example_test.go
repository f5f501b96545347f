package test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/examples/negotiation-room/codereview"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestRoomExample: on both stores, the negotiation room example (examples/negotiation-room,
// `make example-room`) does what its README says, through sdk/room's ServerStore end to end.
// The producer submits draft 1 as a CODE proposal to three critics; each receives it on its
// stream and votes (tests 3.0, style 5.5, security 4.0, none passing); the coordinator decides
// REVISION_REQUESTED under room-policy/v1 with the confidence-weighted mean and sends the
// decision to the producer and every critic. The producer's revision under the same
// artifact_id is reviewed again and APPROVED (9.0, 9.5, 9.5, all passing); nothing escalates
// to a human. GetProposal reads version 2 back from the ActivityService. The example ends by
// itself, well within its deadline, with every agent it registered deregistered (its
// lifecycle workflow ended), both coordinator runs completed and nothing in the DLQ. HITL
// operators are configured, as `make dev` configures one.
func TestRoomExample(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, hitlConfig(t, kind))
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			var out bytes.Buffer
			res, err := codereview.Run(ctx, sys.app.GRPCAddr(), codereview.Options{Out: &out, Wait: time.Minute})
			require.NoError(t, err, "example output:\n%s", out.String())
			require.NoError(t, ctx.Err(), "the example ends by itself")
			t.Logf("example output:\n%s", out.String())

			assert.Equal(t, codereview.DefaultRoom, res.Room)
			assert.Equal(t, "notify-webhook-"+res.Suffix, res.ArtifactID)
			critics := []string{"tests", "style", "security"}
			wantAgents := []string{res.Producer}
			for _, c := range critics {
				assert.Equal(t, "critic-"+c+"-"+res.Suffix, res.Critics[c])
				wantAgents = append(wantAgents, res.Critics[c])
			}
			assert.Equal(t, "producer-"+res.Suffix, res.Producer)
			assert.Equal(t, wantAgents, res.Agents, "the producer and three critics registered")

			type score struct {
				score, confidence float64
				passed            bool
			}
			want := []struct {
				outcome negotiationroompb.DecisionOutcome
				votes   map[string]score
				// the aggregate the README shows
				weightedMean, mean, minScore, maxScore, stdDev float64
				reason, shown                                  string
			}{
				{negotiationroompb.DecisionOutcome_REVISION_REQUESTED,
					map[string]score{"tests": {3, 0.9, false}, "style": {5.5, 0.8, false}, "security": {4, 0.9, false}},
					4.1154, 4.1667, 3, 5.5, 1.0274,
					"revision requested under policy room-policy/v1 (confidence_weighted) with 3 votes: weighted_mean 4.1154 < min_score 7",
					"weighted_mean 4.12, mean 4.17, min 3.0, max 5.5, std_dev 1.03, votes 3"},
				{negotiationroompb.DecisionOutcome_APPROVED,
					map[string]score{"tests": {9, 0.9, true}, "style": {9.5, 0.8, true}, "security": {9.5, 0.85, true}},
					9.3235, 9.3333, 9, 9.5, 0.2357,
					"approved under policy room-policy/v1 (confidence_weighted) with 3 votes: weighted_mean 9.3235 >= 7",
					"weighted_mean 9.32, mean 9.33, min 9.0, max 9.5, std_dev 0.24, votes 3"},
			}
			require.Len(t, res.Versions, len(want), "draft 1 sent back, the revision decided; output:\n%s", out.String())
			for i, w := range want {
				v := res.Versions[i]
				assert.Equal(t, i+1, v.Number)
				p := v.Proposal
				assert.Equal(t, res.ArtifactID, p.GetArtifactId(), "version %d: the revision keeps the artifact_id", v.Number)
				assert.Equal(t, negotiationroompb.ArtifactType_CODE, p.GetArtifactType())
				assert.Equal(t, codereview.Drafts[i], string(p.GetArtifact()))
				assert.Equal(t, wantAgents[1:], p.GetRequestedCritics())

				// What each critic cast is what the coordinator decided on.
				assert.Empty(t, v.Refused, "version %d: no vote refused", v.Number)
				require.Len(t, v.Votes, len(critics), "version %d: every critic voted", v.Number)
				var weighted, weights float64
				for _, c := range critics {
					cast := v.Votes[c]
					require.NotNil(t, cast, "version %d: %s voted", v.Number, c)
					assert.Equal(t, w.votes[c], score{cast.GetScore(), cast.GetConfidence(), cast.GetPassed()}, "version %d: %s's vote", v.Number, c)
					assert.NotEmpty(t, cast.GetStrengths(), "version %d: %s says why", v.Number, c)
					weighted += cast.GetScore() * cast.GetConfidence()
					weights += cast.GetConfidence()
				}
				d := v.Decision
				require.NotNil(t, d)
				assert.Equal(t, w.outcome, d.GetOutcome(), "version %d: %s", v.Number, d.GetReason())
				assert.Equal(t, res.ArtifactID, d.GetArtifactId())
				assert.Equal(t, res.Room, d.GetNegotiationRoomId())
				assert.Equal(t, "room-policy/v1", d.GetPolicyVersion())
				assert.Contains(t, d.GetReason(), w.reason)
				decided := map[string]score{}
				for _, dv := range d.GetVotes() {
					decided[dv.GetCriticId()] = score{dv.GetScore(), dv.GetConfidence(), dv.GetPassed()}
				}
				assert.Equal(t, map[string]score{res.Critics["tests"]: w.votes["tests"], res.Critics["style"]: w.votes["style"],
					res.Critics["security"]: w.votes["security"]}, decided, "version %d: the decision's votes", v.Number)
				a := d.GetAggregatedScore()
				assert.InDelta(t, weighted/weights, a.GetWeightedMean(), 1e-9, "version %d: the confidence-weighted mean of the votes", v.Number)
				assert.InDelta(t, w.weightedMean, a.GetWeightedMean(), 1e-4, "version %d", v.Number)
				assert.InDelta(t, w.mean, a.GetMean(), 1e-4, "version %d", v.Number)
				assert.InDelta(t, w.minScore, a.GetMinScore(), 1e-9, "version %d", v.Number)
				assert.InDelta(t, w.maxScore, a.GetMaxScore(), 1e-9, "version %d", v.Number)
				assert.InDelta(t, w.stdDev, a.GetStdDev(), 1e-4, "version %d", v.Number)
				assert.EqualValues(t, 3, a.GetVoteCount())
				assert.Equal(t, append([]string{"producer"}, critics...), v.ReceivedBy,
					"version %d: the decision reached the producer and every critic on their streams", v.Number)
				assert.Contains(t, out.String(), w.shown)
			}
			assert.Equal(t, negotiationroompb.DecisionOutcome_APPROVED, res.Outcome)
			require.NotNil(t, res.Latest, "GetProposal reads the proposal back")
			assert.Equal(t, codereview.Drafts[1], string(res.Latest.GetArtifact()), "the latest version is the revision")
			assert.Equal(t, res.Producer, res.Latest.GetProducerId())

			// The README's output, in its order.
			assertInOrder(t, out.String(),
				"Version 1: the producer submits "+res.ArtifactID+" (CODE: notify.go, 313 bytes) for review by 3 critics",
				"Decision on version 1\n  outcome    REVISION_REQUESTED",
				"  sent to    producer, tests, style, security (NEGOTIATION envelopes on their streams)",
				"Version 2: the producer submits its revision of "+res.ArtifactID+" (CODE: notify.go, notify_test.go, 1425 bytes) for review by 3 critics",
				"Decision on version 2\n  outcome    APPROVED",
				"GetProposal (ActivityService, negotiation_id room/code-review/"+res.ArtifactID+"): latest version has 1425 bytes",
				"Final outcome: APPROVED")
			for _, line := range []string{
				"  [tests] received the proposal; votes score 3.0, confidence 0.90, passed false",
				"      - no tests: no func Test anywhere in the change",
				"  [style] received the proposal; votes score 5.5, confidence 0.80, passed false",
				"  [security] received the proposal; votes score 4.0, confidence 0.90, passed false",
				"      - notify.go runs a shell command (exec.Command): command injection risk",
				"      - notify.go hard-codes a secret (sk_l...)",
			} {
				assert.Contains(t, out.String(), line)
			}
			assert.NotContains(t, out.String(), "could not deregister")
			assert.NotContains(t, out.String(), "stream ended")

			cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer ccancel()
			// Nothing escalated to a human.
			hitl, err := sys.app.Store().HITL().ListInvocations(cctx, store.HITLFilter{})
			require.NoError(t, err)
			assert.Empty(t, hitl, "no HITL invocation")
			// Both coordinator runs are over: the latest run of the artifact's workflow completed.
			require.NoError(t, sys.app.Temporal().GetWorkflow(cctx, workflows.RoomWorkflowID(res.Room, res.ArtifactID), "").Get(cctx, nil))

			// Cleanup: every agent the example registered is deregistered and its lifecycle over.
			for _, id := range res.Agents {
				_, err := sys.app.Store().Registry().GetAgent(cctx, id)
				assert.True(t, errors.Is(err, store.ErrNotFound), "%s is deregistered: %v", id, err)
				assert.NoError(t, sys.app.Temporal().GetWorkflow(cctx, workflows.AgentWorkflowID(id), "").Get(cctx, nil), "%s's lifecycle ends", id)
			}
			// The example's messages were all delivered and confirmed: no dead letter.
			dead, err := sys.app.Store().DLQ().ListDeadLetters(cctx, store.DLQFilter{IncludeRequeued: true})
			require.NoError(t, err)
			for _, e := range dead {
				t.Errorf("dead letter %d: %s → %s, %s %s: %s", e.ID, e.ProducerID, e.RecipientID, e.Class, e.ErrorCode, e.Reason)
			}
		})
	}
}

// assertInOrder checks that out contains each of parts, in order.
func assertInOrder(t *testing.T, out string, parts ...string) {
	t.Helper()
	rest := out
	for _, p := range parts {
		i := strings.Index(rest, p)
		if !assert.GreaterOrEqual(t, i, 0, "output has %q after the previous line; output:\n%s", p, out) {
			return
		}
		rest = rest[i+len(p):]
	}
}
