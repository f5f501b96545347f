package test

import (
	"context"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitlpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk/negotiation"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// failingHitl is an external HITL component that is down in the way a broken deployment is:
// its health check answers SERVING, but every Decide fails with Unavailable. It counts the
// questions it was asked, by invocation (the sw4rm-idempotency-key of each forward).
type failingHitl struct {
	hitlpb.UnimplementedHitlServiceServer
	mu    sync.Mutex
	asked map[string]int
}

func (f *failingHitl) Decide(ctx context.Context, _ *hitlpb.HitlInvocation) (*hitlpb.HitlDecision, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range md.Get(wire.IdempotencyKey) {
		f.asked[id]++
	}
	return nil, status.Error(codes.Unavailable, "approval backend is down")
}

func (f *failingHitl) times(invocationID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked[invocationID]
}

// startFailingHitl serves a failingHitl on a loopback port and returns it with its address.
func startFailingHitl(t *testing.T) (*failingHitl, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	f := &failingHitl{asked: map[string]int{}}
	hitlpb.RegisterHitlServiceServer(srv, f)
	healthpb.RegisterHealthServer(srv, health.NewServer()) // SERVING
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return f, lis.Addr().String()
}

// deadAddress is a loopback address where nothing listens.
func deadAddress(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	return addr
}

// deadlockPair is two negotiators of their own (so that each reads only its negotiation's
// events) on a system whose "judged" profile counts the participants' judgement alone.
type deadlockPair struct {
	a, b *negotiator
	id   string
}

// judgedProfile stores the policy profile under which a version's score is its evaluations'.
func judgedProfile(t *testing.T, sys *system) {
	t.Helper()
	pol := schedulerpb.NewSchedulerPolicyServiceClient(dialRaw(t, sys))
	set, err := pol.SetPolicyProfiles(opsCtx(), &schedulerpb.SetPolicyProfilesRequest{Profiles: []*policypb.PolicyProfile{{
		Name: "judged", Policy: &policypb.NegotiationPolicy{Scoring: &policypb.NegotiationPolicy_Scoring{LlmWeight: 1}}}}})
	require.NoError(t, err)
	require.True(t, set.GetOk(), set.GetReason())
}

// openDeadlock opens a negotiation with the metadata md that deadlocks: a proposal evaluated
// 0.1 (its score), a round of LOWEST's shortest timeout that nobody counters, a best version
// below the threshold — a DEBATE_DEADLOCK escalation (§15.4 "a negotiation timeout fires and
// requires HITL escalation").
func openDeadlock(t *testing.T, sys *system, name string, md ...string) deadlockPair {
	t.Helper()
	p := deadlockPair{a: dialNegotiator(t, sys, name+"-a"), b: dialNegotiator(t, sys, name+"-b"), id: uniq(t, name)}
	ctx := metadata.AppendToOutgoingContext(context.Background(), md...)
	require.NoError(t, p.a.nc.Open(ctx, negotiation.Options{ID: p.id, Topic: "naming", Participants: []string{p.a.ID(), p.b.ID()},
		Intensity: commonpb.DebateIntensity_LOWEST, Profile: "judged",
		Preferences: map[string]*policypb.AgentPreferences{p.b.ID(): {RoundTimeoutMs: 1}}}))
	require.NoError(t, p.a.nc.Propose(context.Background(), p.id, "text/plain", []byte("call it sw4rm")))
	require.NoError(t, p.b.nc.Evaluate(context.Background(), p.id, 0.1, "no"))
	return p
}

// end waits for the negotiation to end and returns its state and the final event (abort or
// decide) as the participant b received it.
func (p deadlockPair) end(t *testing.T, sys *system) (workflows.NegotiationState, negotiation.Event) {
	t.Helper()
	st := waitNegotiation(t, sys, p.id, func(s workflows.NegotiationState) bool {
		return s.Status == workflows.NegotiationDecided || s.Status == workflows.NegotiationAborted
	}, "ended")
	for {
		ev := p.b.nextEvent(t, p.id)
		if ev.Kind == "abort" || ev.Kind == "decide" {
			return st, ev
		}
	}
}

// hitlOutcomeOf is the outcome of the negotiation's one HITL wait, as the audit log's
// hitl.decided event and the store's invocation record have it.
func hitlOutcomeOf(t *testing.T, sys *system, negotiationID string) (hitl.Invocation, hitl.Outcome) {
	t.Helper()
	var ev store.Event
	require.Eventually(t, func() bool {
		evs, err := sys.app.Store().Audit().List(context.Background(), store.AuditFilter{CorrelationID: negotiationID, TypePrefix: "hitl.decided"})
		if err != nil || len(evs) != 1 {
			return false
		}
		ev = evs[0]
		return true
	}, 20*time.Second, 50*time.Millisecond, "the HITL wait of %s was decided and audited", negotiationID)
	var details struct {
		InvocationID string `json:"invocation_id"`
	}
	require.NoError(t, json.Unmarshal(ev.Details, &details))
	rec, err := sys.app.Store().HITL().GetInvocation(context.Background(), details.InvocationID)
	require.NoError(t, err)
	require.Equal(t, store.HITLDecided, rec.Status)
	var inv hitl.Invocation
	require.NoError(t, json.Unmarshal(rec.Invocation, &inv))
	var o hitl.Outcome
	require.NoError(t, json.Unmarshal(rec.Outcome, &o))
	return inv, o
}

func auditEvents(t *testing.T, sys *system, correlationID, typ string) int {
	t.Helper()
	evs, err := sys.app.Store().Audit().List(context.Background(), store.AuditFilter{CorrelationID: correlationID, TypePrefix: typ})
	require.NoError(t, err)
	return len(evs)
}

// TestHitlUnavailablePolicyEndToEnd: on both stores, with SW4RM_HITL_EXTERNAL pointing at a
// HITL component that is down, negotiation and room escalations are decided by the configured
// hitl_unavailable_policy (§15.4), over gRPC:
//
//   - the deployment's SW4RM_HITL_UNAVAILABLE_POLICY=EXTEND_TIMEOUT with
//     SW4RM_HITL_MAX_EXTENSIONS=2 asks the component again after each of two extensions
//     (audited hitl.deadline_extended), then denies: the negotiation aborts with
//     error_code=hitl_unavailable;
//   - a negotiation's own AUTO_DECIDE_THRESHOLD (Open's sw4rm-hitl-unavailable-policy and
//     sw4rm-hitl-auto-threshold) decides the best version when its score reaches the threshold
//     and aborts when it does not; its own DENY_BY_DEFAULT denies at the first failure;
//   - a room proposal's own AUTO_DECIDE_THRESHOLD (SubmitProposal's metadata) approves a split
//     vote whose weighted mean reaches it;
//   - malformed policy metadata is refused with InvalidArgument and VALIDATION_ERROR;
//   - every stored invocation shows the fallback applied, and its outcome says it was due to
//     HITL unavailability.
func TestHitlUnavailablePolicyEndToEnd(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			component, addr := startFailingHitl(t)
			cfg := hitlConfig(t, kind)
			cfg.HITLExternal = addr
			cfg.HITLUnavailablePolicy, cfg.HITLMaxExtensions = hitl.ExtendTimeout, 2
			sys := start(t, cfg)
			judgedProfile(t, sys)

			extend := openDeadlock(t, sys, "extend")
			autoYes := openDeadlock(t, sys, "auto-yes", wire.HITLUnavailablePolicyKey, "auto_decide_threshold", wire.HITLAutoThresholdKey, "0.05")
			autoNo := openDeadlock(t, sys, "auto-no", wire.HITLUnavailablePolicyKey, hitl.AutoDecideThreshold, wire.HITLAutoThresholdKey, "0.9")
			deny := openDeadlock(t, sys, "deny", wire.HITLUnavailablePolicyKey, hitl.DenyByDefault)

			// The deployment's EXTEND_TIMEOUT: asked three times, extended twice, then denied.
			st, ev := extend.end(t, sys)
			assert.Equal(t, workflows.NegotiationAborted, st.Status)
			assert.Equal(t, hitl.UnavailableCode, st.AbortCode)
			assert.Equal(t, "abort", ev.Kind)
			assert.Equal(t, hitl.UnavailableCode, ev.ErrorCode, "the participants are told why (§15.4)")
			assert.Contains(t, ev.Reason, "fallback EXTEND_TIMEOUT (extensions_exhausted)")
			inv, o := hitlOutcomeOf(t, sys, extend.id)
			assert.Equal(t, hitl.Fallback{Policy: hitl.ExtendTimeout, MaxExtensions: 2, Score: float64(st.Versions[0].Score)}, inv.Fallback,
				"the stored invocation shows the deployment's fallback")
			assert.Equal(t, hitl.Deny, o.Decision)
			assert.True(t, o.Fallback)
			assert.True(t, o.HitlUnavailable)
			assert.Equal(t, "extensions_exhausted", o.FallbackReason)
			assert.Equal(t, 2, o.Extensions)
			assert.Equal(t, 3, component.times(inv.InvocationID), "asked once, then again after each extension")
			assert.Equal(t, 2, auditEvents(t, sys, extend.id, "hitl.deadline_extended"))
			assert.Equal(t, 3, auditEvents(t, sys, extend.id, "hitl.unavailable"))

			// The negotiation's own AUTO_DECIDE_THRESHOLD, reached: the best version is decided.
			st, ev = autoYes.end(t, sys)
			assert.Equal(t, workflows.NegotiationDecided, st.Status)
			assert.Equal(t, "decide", ev.Kind)
			assert.Equal(t, "hitl", st.Decision.GetDecidedBy())
			assert.Contains(t, st.Decision.GetRationale(), "fallback AUTO_DECIDE_THRESHOLD (hitl_unavailable)")
			assert.Equal(t, []byte("call it sw4rm"), st.Result)
			require.NotNil(t, st.HITLFallback)
			assert.Equal(t, hitl.Fallback{Policy: hitl.AutoDecideThreshold, Threshold: 0.05}, *st.HITLFallback)
			inv, o = hitlOutcomeOf(t, sys, autoYes.id)
			assert.Equal(t, hitl.AutoDecideThreshold, inv.Fallback.Policy)
			assert.InDelta(t, 0.05, inv.Fallback.Threshold, 1e-9)
			assert.InDelta(t, 0.1, inv.Fallback.Score, 0.01, "the best version's score")
			assert.Equal(t, hitl.Approve, o.Decision)
			assert.True(t, o.HitlUnavailable)
			assert.Equal(t, 1, component.times(inv.InvocationID))

			// Not reached: aborted with error_code=hitl_unavailable.
			st, ev = autoNo.end(t, sys)
			assert.Equal(t, workflows.NegotiationAborted, st.Status)
			assert.Equal(t, hitl.UnavailableCode, ev.ErrorCode)
			assert.Contains(t, ev.Reason, "auto-denied")
			_, o = hitlOutcomeOf(t, sys, autoNo.id)
			assert.Equal(t, hitl.AutoDecideThreshold, o.FallbackPolicy)
			assert.Equal(t, hitl.Deny, o.Decision)

			// The negotiation's own DENY_BY_DEFAULT over the deployment's EXTEND_TIMEOUT.
			st, ev = deny.end(t, sys)
			assert.Equal(t, workflows.NegotiationAborted, st.Status)
			assert.Equal(t, hitl.UnavailableCode, ev.ErrorCode)
			inv, o = hitlOutcomeOf(t, sys, deny.id)
			assert.Equal(t, hitl.DenyByDefault, inv.Fallback.Policy)
			assert.Equal(t, "hitl_unavailable", o.FallbackReason)
			assert.Zero(t, o.Extensions)
			assert.Equal(t, 1, component.times(inv.InvocationID))
			assert.Zero(t, auditEvents(t, sys, deny.id, "hitl.deadline_extended"))

			// A room proposal's own AUTO_DECIDE_THRESHOLD: the split vote's weighted mean, 6.5
			// of 10, reaches 0.6.
			r := newRoom(t, sys)
			pctx := metadata.AppendToOutgoingContext(context.Background(), wire.HITLUnavailablePolicyKey, hitl.AutoDecideThreshold, wire.HITLAutoThresholdKey, "0.6")
			_, err := r.rc.SubmitProposal(pctx, &negotiationroompb.SubmitProposalRequest{Proposal: &negotiationroompb.NegotiationProposal{
				ArtifactType: negotiationroompb.ArtifactType_CODE, ArtifactId: "deploy-8", ProducerId: r.producer.ID(),
				Artifact: []byte("rollout: 10%"), ArtifactContentType: "text/plain", RequestedCritics: r.criticIDs(), NegotiationRoomId: r.roomID,
			}})
			require.NoError(t, err)
			require.NoError(t, r.vote(t, 0, "deploy-8", 9.5, 0.9, true))
			require.NoError(t, r.vote(t, 1, "deploy-8", 1.0, 0.9, false))
			require.NoError(t, r.vote(t, 2, "deploy-8", 9.0, 0.9, true))
			d := r.wait(t, "deploy-8")
			assert.Equal(t, negotiationroompb.DecisionOutcome_APPROVED, d.GetOutcome(), d.GetReason())
			assert.Contains(t, d.GetReason(), "fallback AUTO_DECIDE_THRESHOLD")
			assert.Contains(t, d.GetReason(), "auto-approved: score 0.650 reaches threshold 0.600")

			// Malformed metadata is refused before anything starts.
			conn := dialRaw(t, sys)
			for _, md := range [][]string{
				{wire.HITLUnavailablePolicyKey, "ASK_LATER"},
				{wire.HITLUnavailablePolicyKey, hitl.AutoDecideThreshold},
				{wire.HITLUnavailablePolicyKey, hitl.ExtendTimeout, wire.HITLMaxExtensionsKey, "4"},
				{wire.HITLAutoThresholdKey, "0.5"},
			} {
				var trailer metadata.MD
				_, err := negotiationpb.NewNegotiationServiceClient(conn).Open(metadata.AppendToOutgoingContext(context.Background(), md...),
					&negotiationpb.NegotiationOpen{NegotiationId: uniq(t, "bad"), Topic: "x", Participants: []string{extend.a.ID(), extend.b.ID()},
						Intensity: commonpb.DebateIntensity_LOWEST}, grpc.Trailer(&trailer))
				assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v: %v", md, err)
				assert.Equal(t, []string{"VALIDATION_ERROR"}, trailer.Get(wire.ErrorCodeTrailer), "%v", md)
				_, err = r.rc.SubmitProposal(metadata.AppendToOutgoingContext(context.Background(), md...), &negotiationroompb.SubmitProposalRequest{
					Proposal: &negotiationroompb.NegotiationProposal{ArtifactType: negotiationroompb.ArtifactType_CODE, ArtifactId: uniq(t, "bad"),
						ProducerId: r.producer.ID(), Artifact: []byte("x"), ArtifactContentType: "text/plain", RequestedCritics: r.criticIDs(), NegotiationRoomId: r.roomID}})
				assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v: %v", md, err)
			}
		})
	}
}

// TestHitlUnavailableDefaultDenies: on both stores, with SW4RM_HITL_EXTERNAL pointing at an
// address where nothing listens and no hitl_unavailable_policy configured, a negotiation's
// deadlock is denied by default once the component is found unavailable — within the 5 s
// detection bound, not after the hour-long HITL deadline — and the negotiation aborts with
// error_code=hitl_unavailable (§15.4).
func TestHitlUnavailableDefaultDenies(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := hitlConfig(t, kind)
			cfg.HITLExternal = deadAddress(t)
			sys := start(t, cfg)
			judgedProfile(t, sys)
			p := openDeadlock(t, sys, "default")
			st, ev := p.end(t, sys)
			assert.Equal(t, workflows.NegotiationAborted, st.Status)
			assert.Equal(t, hitl.UnavailableCode, ev.ErrorCode)
			assert.Contains(t, ev.Reason, "fallback DENY_BY_DEFAULT (hitl_unavailable)")
			inv, o := hitlOutcomeOf(t, sys, p.id)
			assert.Equal(t, hitl.DenyByDefault, inv.Fallback.Policy, "the stored invocation shows the fallback applied")
			assert.Equal(t, hitl.Deny, o.Decision)
			assert.True(t, o.HitlUnavailable)
			assert.Equal(t, 1, auditEvents(t, sys, p.id, "hitl.unavailable"))
		})
	}
}
