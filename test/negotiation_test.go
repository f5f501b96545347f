package test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/activitypb"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationpb"
	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	negotiationpkg "github.com/sw4rm/sw4rm-temporal/protocol/negotiation"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/sdk/negotiation"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// negotiator is an SDK agent with its negotiation client and inbox.
type negotiator struct {
	*sdk.Agent
	nc *negotiation.Client
	in *inbox
}

func dialNegotiator(t *testing.T, sys *system, name string) *negotiator {
	t.Helper()
	a := dialAgent(t, sys, name)
	return &negotiator{Agent: a, nc: negotiation.New(a), in: openInbox(t, a)}
}

// nextEvent waits for the next negotiation event of id on the agent's inbox.
func (n *negotiator) nextEvent(t *testing.T, id string) negotiation.Event {
	t.Helper()
	d := n.in.next(t, true, func(d *sdk.Delivery) bool {
		return d.Envelope.GetMessageType() == commonpb.MessageType_NEGOTIATION && d.Envelope.GetCorrelationId() == id
	})
	ev, ok, err := negotiation.ParseEvent(d.Envelope)
	require.True(t, ok)
	require.NoError(t, err)
	return ev
}

// events waits for n events of id and returns their kinds and the events.
func (n *negotiator) events(t *testing.T, id string, count int) ([]string, []negotiation.Event) {
	t.Helper()
	var kinds []string
	var evs []negotiation.Event
	for range count {
		ev := n.nextEvent(t, id)
		kinds, evs = append(kinds, ev.Kind), append(evs, ev)
	}
	return kinds, evs
}

func negotiationOf(t *testing.T, sys *system, id string) workflows.NegotiationState {
	t.Helper()
	v, err := sys.app.Temporal().QueryWorkflow(context.Background(), workflows.NegotiationWorkflowID(id), "", workflows.NegotiationStateQuery)
	require.NoError(t, err)
	var st workflows.NegotiationState
	require.NoError(t, v.Get(&st))
	return st
}

func waitNegotiation(t *testing.T, sys *system, id string, cond func(workflows.NegotiationState) bool, what string) workflows.NegotiationState {
	t.Helper()
	var st workflows.NegotiationState
	require.Eventually(t, func() bool {
		st = negotiationOf(t, sys, id)
		return cond(st)
	}, 30*time.Second, 50*time.Millisecond, "negotiation %s never %s (last status %s)", id, what, st.Status)
	return st
}

// waitClosed waits until the negotiation's workflow has completed.
func waitClosed(t *testing.T, sys *system, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var st workflows.NegotiationState
	require.NoError(t, sys.app.Temporal().GetWorkflow(ctx, workflows.NegotiationWorkflowID(id), "").Get(ctx, &st))
}

// contractSchema is the JSON Schema of the test's drafts: an API contract with a version
// and a price that must not be negative.
const contractSchema = `{"type":"object","required":["api","price"],"properties":{"api":{"type":"string"},"price":{"type":"number","minimum":0},"limits":{"type":"object"}}}`

// TestNegotiationContract: on both stores, two agents negotiate a contract over gRPC: an
// invalid draft is refused with its reasons and consumes no round; drafts out of turn, from
// outsiders, and bad evaluations are refused with their codes; a proposal, a counter and an
// evaluation reach acceptance, decided by consensus. Both participants receive every event
// in one order with the draft's bytes preserved; the effective policy, the contracts, the
// diff and the reports are readable through the canonical services.
func TestNegotiationContract(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			a, b, c := dialNegotiator(t, sys, "buyer"), dialNegotiator(t, sys, "seller"), dialNegotiator(t, sys, "outsider")
			id := uniq(t, "neg")
			require.NoError(t, a.nc.Open(ctx, negotiation.Options{ID: id, Topic: "/api/v3/orders", Participants: []string{a.ID(), b.ID()},
				Intensity: commonpb.DebateIntensity_LOW, Timeout: time.Minute, Schema: json.RawMessage(contractSchema)}))

			// Retrying the same Open is fine; another Open of the id is not.
			require.NoError(t, a.nc.Open(ctx, negotiation.Options{ID: id, Topic: "/api/v3/orders", Participants: []string{a.ID(), b.ID()},
				Intensity: commonpb.DebateIntensity_LOW, Schema: json.RawMessage(contractSchema)}))
			err := a.nc.Open(ctx, negotiation.Options{ID: id, Topic: "something else", Participants: []string{a.ID(), b.ID()}})
			assert.Equal(t, codes.AlreadyExists, status.Code(err), "%v", err)

			eff, err := a.nc.EffectivePolicy(ctx, id)
			require.NoError(t, err)
			require.NotNil(t, eff.GetPolicy())
			assert.Positive(t, eff.GetPolicy().GetMaxRounds())

			// Refusals: schema, turn, outsider.
			err = a.nc.Propose(ctx, id, "application/json", []byte(`{"api":"orders","price":-5}`))
			assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			assert.Contains(t, err.Error(), "/price", "the reason names the failing path")
			err = b.nc.Counter(ctx, id, "application/json", []byte(`{"api":"orders","price":5}`))
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "no counter before a proposal: %v", err)
			err = c.nc.Propose(ctx, id, "application/json", []byte(`{"api":"orders","price":5}`))
			assert.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
			err = b.nc.Propose(ctx, id, "application/json", []byte(`{"api":"orders","price":5}`))
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "the buyer, listed first, proposes first: %v", err)
			err = a.nc.Evaluate(ctx, id, 0.5, "nothing yet")
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)

			v1 := []byte(`{"api":"orders","price":120,"limits":{"rps":100,"burst":200,"regions":["eu","us"],"sla":"99.9"}}`)
			require.NoError(t, a.nc.Propose(ctx, id, "application/json", v1))
			assert.Len(t, negotiationOf(t, sys, id).Versions, 1, "the refused draft consumed no round")
			// An outsider is refused as one before anything else, so it learns nothing of the
			// negotiation's progress (no "already has a proposal", no turn).
			for name, call := range map[string]func() error{
				"Propose":  func() error { return c.nc.Propose(ctx, id, "application/json", v1) },
				"Counter":  func() error { return c.nc.Counter(ctx, id, "application/json", v1) },
				"Evaluate": func() error { return c.nc.Evaluate(ctx, id, 0.5, "peeking") },
			} {
				err := call()
				assert.Equal(t, codes.PermissionDenied, status.Code(err), "outsider's %s: %v", name, err)
				assert.NotContains(t, err.Error(), "proposal", "outsider's %s", name)
				assert.NotContains(t, err.Error(), "turn", "outsider's %s", name)
			}
			err = a.nc.Counter(ctx, id, "application/json", v1)
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "out of turn: %v", err)
			err = b.nc.Evaluate(ctx, id, 1.5, "too sure")
			assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)

			v2 := []byte(`{"api":"orders","price":110,"limits":{"rps":100,"burst":200,"regions":["eu","us"],"sla":"99.9"}}`)
			require.NoError(t, b.nc.Counter(ctx, id, "application/json", v2))
			require.NoError(t, a.nc.Evaluate(ctx, id, 0.97, "fair price"))

			st := waitNegotiation(t, sys, id, func(s workflows.NegotiationState) bool { return s.Status == workflows.NegotiationDecided }, "decided")
			assert.Equal(t, "consensus", st.Decision.GetDecidedBy())
			assert.Equal(t, "threshold_met", st.Decision.GetStopReason())
			assert.Equal(t, v2, st.Result)
			require.Len(t, st.Versions, 2)
			assert.Equal(t, []string{"/price"}, st.Versions[1].Delta.GetChangedPaths())

			want := []string{"open", "policy", "propose", "counter", "evaluate", "decide"}
			kindsA, evA := a.events(t, id, len(want))
			kindsB, evB := b.events(t, id, len(want))
			assert.Equal(t, want, kindsA)
			assert.Equal(t, want, kindsB, "every participant sees one order")
			for i := range evA {
				assert.Equal(t, i+1, evA[i].Seq)
				assert.Equal(t, evA[i].Seq, evB[i].Seq)
			}
			p, err := evB[2].Payload()
			require.NoError(t, err)
			assert.Equal(t, v1, p, "raw payload bytes preserved (§17.1)")
			assert.Equal(t, a.ID(), evB[2].From)
			res, err := evA[5].Result()
			require.NoError(t, err)
			assert.Equal(t, v2, res)

			conn, err := grpc.NewClient(sys.app.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			require.NoError(t, err)
			defer conn.Close()
			arts, err := activitypb.NewActivityServiceClient(conn).ListArtifacts(ctx, &activitypb.ListArtifactsRequest{NegotiationId: id})
			require.NoError(t, err)
			have := map[string]bool{}
			for _, x := range arts.GetItems() {
				have[x.GetKind()+"/"+x.GetVersion()] = true
			}
			for _, k := range []string{"policy/effective", "contract/v1", "contract/v2", "diff/v1_to_v2", "evaluation/v2/" + a.ID(), "decision/final"} {
				assert.True(t, have[k], "artifact %s listed (have %v)", k, have)
			}
			waitClosed(t, sys, id)
			recordHistory(t, sys.app.Temporal(), workflows.NegotiationWorkflowID(id), "negotiation_contract_"+kind)
		})
	}
}

// TestNegotiationProposeRightAfterOpen: on both stores, an opener that proposes as soon as
// Open returns reaches the workflow before its first workflow task has run; Temporal hands
// the update over with that task and the SDK runs its handler as soon as it is registered.
// The events are still open, policy, propose (§17.1), numbered 1, 2, 3.
func TestNegotiationProposeRightAfterOpen(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			a, b := dialNegotiator(t, sys, "buyer"), dialNegotiator(t, sys, "seller")
			for i := range 3 {
				id := uniq(t, fmt.Sprintf("quick%d", i))
				require.NoError(t, a.nc.Open(ctx, negotiation.Options{ID: id, Topic: "/api/v3/orders", Participants: []string{a.ID(), b.ID()},
					Intensity: commonpb.DebateIntensity_LOW, Timeout: time.Minute}))
				require.NoError(t, a.nc.Propose(ctx, id, "application/json", []byte(`{"api":"orders","price":120}`)))
				for _, n := range []*negotiator{a, b} {
					kinds, evs := n.events(t, id, 3)
					assert.Equal(t, []string{"open", "policy", "propose"}, kinds, "negotiation %d", i)
					for j, ev := range evs {
						assert.Equal(t, j+1, ev.Seq, "negotiation %d: %s", i, ev.Kind)
					}
				}
				require.NoError(t, a.nc.Abort(ctx, id, "done"))
			}
		})
	}
}

// TestNegotiationRetryWithIdempotencyKey: on both stores, a participant's call repeated with
// the same sw4rm-idempotency-key and request — a retry after an answer was lost — is answered
// with the first attempt's outcome and applied once: a repeated Propose or Counter is not
// refused as out of turn, a repeated Evaluate publishes one evaluate event, and a repeat
// after the negotiation decided still gets the first answer. The same key with another
// request is another call; without a key a repeat is a new call; a malformed key is refused.
func TestNegotiationRetryWithIdempotencyKey(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			a, b := dialNegotiator(t, sys, "buyer"), dialNegotiator(t, sys, "seller")
			id := uniq(t, "keyed")
			require.NoError(t, a.nc.Open(ctx, negotiation.Options{ID: id, Topic: "/api/v3/orders", Participants: []string{a.ID(), b.ID()},
				Intensity: commonpb.DebateIntensity_LOW, Timeout: time.Minute}))
			v1 := []byte(`{"api":"orders","price":120,"limits":{"rps":100,"burst":200,"regions":["eu","us"],"sla":"99.9"}}`)
			v2 := []byte(`{"api":"orders","price":110,"limits":{"rps":100,"burst":200,"regions":["eu","us"],"sla":"99.9"}}`)
			k1 := negotiation.WithIdempotencyKey(ctx, "propose-1")
			require.NoError(t, a.nc.Propose(k1, id, "application/json", v1))
			require.NoError(t, a.nc.Propose(k1, id, "application/json", v1), "the retry gets the first answer")
			err := a.nc.Propose(ctx, id, "application/json", v1)
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "without the key a repeat is a new call: %v", err)
			err = a.nc.Propose(k1, id, "application/json", v2)
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "the key with another request is another call: %v", err)

			k2 := negotiation.WithIdempotencyKey(ctx, "counter-1")
			require.NoError(t, b.nc.Counter(k2, id, "application/json", v2))
			require.NoError(t, b.nc.Counter(k2, id, "application/json", v2))
			assert.Len(t, negotiationOf(t, sys, id).Versions, 2)

			k3 := negotiation.WithIdempotencyKey(ctx, "evaluate-1")
			require.NoError(t, a.nc.Evaluate(k3, id, 0.97, "fair price"))
			st := waitNegotiation(t, sys, id, func(s workflows.NegotiationState) bool { return s.Status == workflows.NegotiationDecided }, "decided")
			assert.Equal(t, "consensus", st.Decision.GetDecidedBy())
			waitClosed(t, sys, id)
			require.NoError(t, a.nc.Evaluate(k3, id, 0.97, "fair price"), "a retry after the close still gets the first answer")
			err = a.nc.Evaluate(ctx, id, 0.97, "fair price")
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "a new call on a closed negotiation: %v", err)

			kinds, evs := b.events(t, id, 6)
			assert.Equal(t, []string{"open", "policy", "propose", "counter", "evaluate", "decide"}, kinds)
			for i, ev := range evs {
				assert.Equal(t, i+1, ev.Seq)
			}
			assert.Equal(t, 6, negotiationOf(t, sys, id).Events, "nothing was applied twice")

			err = a.nc.Abort(negotiation.WithIdempotencyKey(ctx, strings.Repeat("k", 300)), id, "x")
			assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		})
	}
}

// opsCtx carries the HITL operator's token.
func opsCtx() context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer alice-token")
}

// TestNegotiationDeadlockGoesToHuman: on both stores, a participant's preference outside the
// guardrails is clamped and shown by GetEffectivePolicy; a round that times out below the
// threshold escalates with DEBATE_DEADLOCK; the operator approves through
// SchedulerPolicyService.HitlAction and the best version is decided by the human. A second
// one is aborted by a participant, and HitlAction on it has nothing to decide.
func TestNegotiationDeadlockGoesToHuman(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, hitlConfig(t, kind))
			ctx := context.Background()
			a, b := dialNegotiator(t, sys, "left"), dialNegotiator(t, sys, "right")
			conn, err := grpc.NewClient(sys.app.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			require.NoError(t, err)
			defer conn.Close()
			pol := schedulerpb.NewSchedulerPolicyServiceClient(conn)
			// The participants' judgement is all that counts.
			set, err := pol.SetPolicyProfiles(opsCtx(), &schedulerpb.SetPolicyProfilesRequest{Profiles: []*policypb.PolicyProfile{{
				Name: "judged", Policy: &policypb.NegotiationPolicy{Scoring: &policypb.NegotiationPolicy_Scoring{LlmWeight: 1}}}}})
			require.NoError(t, err)
			require.True(t, set.GetOk(), set.GetReason())

			id := uniq(t, "deadlock")
			// right asks for a 1 ms round: outside LOWEST's guardrails, clamped to its minimum.
			require.NoError(t, a.nc.Open(ctx, negotiation.Options{ID: id, Topic: "naming", Participants: []string{a.ID(), b.ID()},
				Intensity: commonpb.DebateIntensity_LOWEST, Profile: "judged",
				Preferences: map[string]*policypb.AgentPreferences{b.ID(): {RoundTimeoutMs: 1}}}))
			eff, err := a.nc.EffectivePolicy(ctx, id)
			require.NoError(t, err)
			g, err := negotiationpkg.GuardrailsFor(commonpb.DebateIntensity_LOWEST)
			require.NoError(t, err)
			assert.EqualValues(t, g.RoundTimeout[0].Milliseconds(), eff.GetPolicy().GetRoundTimeoutMs(), "the preference is clamped to the guardrail")
			assert.EqualValues(t, g.RoundTimeout[0].Milliseconds(), eff.GetApplied()[b.ID()].GetRoundTimeoutMs(), "the clamped preference is shown")
			assert.InDelta(t, 1, eff.GetPolicy().GetScoring().GetLlmWeight(), 1e-6, "the profile's scoring")
			require.NoError(t, a.nc.Propose(ctx, id, "text/plain", []byte("call it sw4rm")))
			require.NoError(t, b.nc.Evaluate(ctx, id, 0.1, "no"))
			// Nobody counters: the round's durable timer ends it, below the threshold.
			st := waitNegotiation(t, sys, id, func(s workflows.NegotiationState) bool { return s.HITLInvocationID != "" }, "escalated")
			assert.Equal(t, workflows.NegotiationPaused, st.Status)
			err = b.nc.Counter(ctx, id, "text/plain", []byte("call it swarm"))
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "drafts wait for the human: %v", err)

			// Agents are not operators.
			_, err = pol.HitlAction(ctx, &schedulerpb.HitlActionRequest{NegotiationId: id, Action: "approve", Rationale: "me"})
			require.Error(t, err)
			resp, err := pol.HitlAction(opsCtx(), &schedulerpb.HitlActionRequest{NegotiationId: id, Action: "approve", Rationale: "ship the name"})
			require.NoError(t, err)
			require.True(t, resp.GetOk(), resp.GetReason())
			st = waitNegotiation(t, sys, id, func(s workflows.NegotiationState) bool { return s.Status == workflows.NegotiationDecided }, "decided")
			assert.Equal(t, "hitl", st.Decision.GetDecidedBy())
			assert.Equal(t, "timeout", st.Decision.GetStopReason())
			assert.Contains(t, st.Decision.GetRationale(), "DEBATE_DEADLOCK")
			assert.Equal(t, []byte("call it sw4rm"), st.Result)
			waitClosed(t, sys, id)
			recordHistory(t, sys.app.Temporal(), workflows.NegotiationWorkflowID(id), "negotiation_deadlock_"+kind)

			// Abort by a participant; then HitlAction has nothing to decide.
			id2 := uniq(t, "abort")
			require.NoError(t, a.nc.Open(ctx, negotiation.Options{ID: id2, Topic: "colour", Participants: []string{a.ID(), b.ID()}}))
			require.NoError(t, b.nc.Abort(ctx, id2, "out of scope"))
			st = waitNegotiation(t, sys, id2, func(s workflows.NegotiationState) bool { return s.Status == workflows.NegotiationAborted }, "aborted")
			assert.Equal(t, "out of scope", st.AbortReason)
			_, err = negotiationpb.NewNegotiationServiceClient(conn).Propose(ctx, &negotiationpb.Proposal{NegotiationId: id2, FromAgent: a.ID(), ContentType: "text/plain", Payload: []byte("x")})
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "a closed negotiation takes no drafts: %v", err)
			err = a.nc.Propose(ctx, "no-such-negotiation", "text/plain", []byte("x"))
			assert.Equal(t, codes.NotFound, status.Code(err), "%v", err)
		})
	}
}

// debater serves debate turns: round 1 states its position, later rounds repeat it (so the
// debate converges), the final round ends with its verdict; it counts its turns.
type debater struct {
	mu      sync.Mutex
	turns   int
	sawPrev bool
}

func (d *debater) counts() (int, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.turns, d.sawPrev
}

func (d *debater) serve(t *testing.T, a *sdk.Agent, position, verdict string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Serve(ctx, func(_ context.Context, run *sdk.TaskRun) ([]byte, error) {
			p, ok, err := negotiation.Turn(run.Task())
			if !ok || err != nil {
				return nil, fmt.Errorf("not a debate turn: %v", err)
			}
			d.mu.Lock()
			d.turns++
			if p.Round > 1 && len(p.Transcript) > 0 {
				d.sawPrev = true
			}
			d.mu.Unlock()
			text := position + "."
			if p.Final {
				text += "\n" + negotiation.FinalVerdict(verdict, map[string]float64{"approve": 8, "reject": 3}[verdict], 0.9)
			}
			return []byte(text), nil
		}, nil)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// TestNegotiationDebate: on both stores, ADR-011's debate runs its turns as scheduler tasks
// with the transcript, converges early when a round adds nothing, and decides the transcript
// and the aggregated verdicts; rounds=0 is the parallel vote on the same agents.
func TestNegotiationDebate(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			parent := dialNegotiator(t, sys, "parent")
			var ds [3]debater
			var ids []string
			for i, v := range []string{"approve", "approve", "reject"} {
				a := dialAgent(t, sys, fmt.Sprintf("debater%d", i))
				ds[i].serve(t, a, fmt.Sprintf("Agent %d holds position %d", i, i), v)
				ids = append(ids, a.ID())
			}
			id := uniq(t, "debate")
			require.NoError(t, parent.nc.Open(ctx, negotiation.Options{ID: id, Topic: "Adopt the new cache layer?", Participants: ids,
				Debate: true, Rounds: 4, Timeout: 2 * time.Minute}))
			st := waitNegotiation(t, sys, id, func(s workflows.NegotiationState) bool { return s.Status == workflows.NegotiationDecided }, "decided")
			var res struct {
				Mode       string `json:"mode"`
				RoundsRun  int    `json:"rounds_run"`
				StopReason string `json:"stop_reason"`
				Majority   string `json:"majority"`
				Verdicts   []struct {
					Agent string `json:"agent"`
					Label string `json:"label"`
				} `json:"verdicts"`
			}
			require.NoError(t, json.Unmarshal(st.Result, &res), string(st.Result))
			assert.Equal(t, "debate", res.Mode)
			assert.Equal(t, 3, res.RoundsRun, "round 2 added no claim, so round 3 was the last")
			assert.Equal(t, "converged", res.StopReason)
			assert.Equal(t, "approve", res.Majority)
			assert.Len(t, res.Verdicts, 3)
			for i := range ds {
				turns, sawPrev := ds[i].counts()
				assert.Equal(t, 3, turns, "one turn per round")
				assert.True(t, sawPrev, "later rounds carry the transcript")
			}
			// The parent receives the decision with the transcript and verdicts.
			var dec negotiation.Event
			for {
				if dec = parent.nextEvent(t, id); dec.Kind == "decide" {
					break
				}
			}
			dr, err := dec.DebateResult()
			require.NoError(t, err)
			assert.Len(t, dr.Transcript, 9)

			// The plain parallel vote on the same agents.
			id2 := uniq(t, "vote")
			require.NoError(t, parent.nc.Open(ctx, negotiation.Options{ID: id2, Topic: "Adopt the new cache layer?", Participants: ids, Debate: true, Rounds: 0}))
			st = waitNegotiation(t, sys, id2, func(s workflows.NegotiationState) bool { return s.Status == workflows.NegotiationDecided }, "decided")
			require.NoError(t, json.Unmarshal(st.Result, &res), string(st.Result))
			assert.Equal(t, "parallel", res.Mode)
			assert.Equal(t, 1, res.RoundsRun)
			assert.Equal(t, "approve", res.Majority)
			for i := range ds {
				turns, _ := ds[i].counts()
				assert.Equal(t, 4, turns, "one more turn each")
			}
			waitClosed(t, sys, id)
			recordHistory(t, sys.app.Temporal(), workflows.NegotiationWorkflowID(id), "negotiation_debate_"+kind)
		})
	}
}

// TestNegotiationOscillation: on both stores, two parties that keep swapping the same two
// drafts are stopped by the oscillation rule, and the tie-break decides.
func TestNegotiationOscillation(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			a, b := dialNegotiator(t, sys, "ping"), dialNegotiator(t, sys, "pong")
			id := uniq(t, "osc")
			require.NoError(t, a.nc.Open(ctx, negotiation.Options{ID: id, Topic: "ports", Participants: []string{a.ID(), b.ID()}, Intensity: commonpb.DebateIntensity_MEDIUM}))
			eff, err := a.nc.EffectivePolicy(ctx, id)
			require.NoError(t, err)
			limit := int(eff.GetPolicy().GetOscillationLimit())
			x, y := []byte(`{"port":8080}`), []byte(`{"port":9090}`)
			require.NoError(t, a.nc.Propose(ctx, id, "application/json", x))
			// v3 onwards each repeats an earlier version; the limit+1-th repeat stops it.
			drafts := limit + 3
			for v := 2; v <= drafts; v++ {
				if v%2 == 0 {
					require.NoError(t, b.nc.Counter(ctx, id, "application/json", y), "v%d", v)
				} else {
					require.NoError(t, a.nc.Counter(ctx, id, "application/json", x), "v%d", v)
				}
			}
			st := waitNegotiation(t, sys, id, func(s workflows.NegotiationState) bool { return s.Status == workflows.NegotiationDecided }, "decided")
			assert.Equal(t, "oscillation", st.Decision.GetStopReason())
			assert.Equal(t, "policy", st.Decision.GetDecidedBy(), st.Decision.GetRationale())
			assert.Len(t, st.Versions, drafts)
			err = b.nc.Counter(ctx, id, "application/json", y)
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "a decided negotiation takes no drafts: %v", err)
		})
	}
}
