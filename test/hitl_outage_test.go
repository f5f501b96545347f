package test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/app"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitlpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// startBehindProxy runs the server with its Temporal client behind proxy and the worker
// connected directly, both on one store, so that Temporal can be taken from the server alone.
func startBehindProxy(t *testing.T, cfg app.Config, proxy *temporalProxy) (srv, wrk *app.App) {
	t.Helper()
	ctx := context.Background()
	st, err := app.OpenStore(ctx, cfg, testLogger())
	require.NoError(t, err)
	wcfg := cfg
	wcfg.GRPCAddr, wcfg.HTTPAddr = "", ""
	wrk, err = app.StartWithStore(ctx, wcfg, app.Roles{Worker: true}, testLogger(), st)
	require.NoError(t, err)
	t.Cleanup(wrk.Stop)
	scfg := cfg
	scfg.TemporalAddress = proxy.addr
	srv, err = app.StartWithStore(ctx, scfg, app.Roles{Server: true}, testLogger(), st)
	require.NoError(t, err)
	t.Cleanup(srv.Stop) // stops before the worker: cleanups run last-in first-out
	return srv, wrk
}

// hitlCaller calls the canonical HitlService.Decide as an agent would, with an idempotency key.
type hitlCaller struct {
	t   *testing.T
	c   hitlpb.HitlServiceClient
	srv *app.App
	wrk *app.App
}

// keyedResult is one Decide call's answer and the invocation its header named.
type keyedResult struct {
	dec *hitlpb.HitlDecision
	id  string
	err error
}

func (h hitlCaller) decide(key string, req *hitlpb.HitlInvocation, timeout time.Duration) keyedResult {
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "sw4rm-idempotency-key", key), timeout)
	defer cancel()
	var md metadata.MD
	dec, err := h.c.Decide(ctx, req, grpc.Header(&md))
	r := keyedResult{dec: dec, err: err}
	if v := md.Get(wire.HITLInvocationIDHeader); len(v) > 0 {
		r.id = v[0]
	}
	return r
}

func (h hitlCaller) inBackground(key string, req *hitlpb.HitlInvocation) chan keyedResult {
	res := make(chan keyedResult, 1)
	go func() { res <- h.decide(key, req, 2*time.Minute) }()
	return res
}

func (h hitlCaller) await(res chan keyedResult, what string) keyedResult {
	h.t.Helper()
	select {
	case r := <-res:
		return r
	case <-time.After(time.Minute):
		h.t.Fatalf("Decide did not return %s", what)
		return keyedResult{}
	}
}

// pending waits for the one pending invocation and returns its id.
func (h hitlCaller) pending() string {
	h.t.Helper()
	var id string
	require.Eventually(h.t, func() bool {
		recs, err := h.srv.Store().HITL().ListInvocations(context.Background(), store.HITLFilter{Status: store.HITLPending})
		if err != nil || len(recs) != 1 {
			return false
		}
		id = recs[0].InvocationID
		return true
	}, 20*time.Second, 50*time.Millisecond)
	return id
}

// approve signals alice's approval, signed with her key, straight to Temporal, as the raw
// signal door does.
func (h hitlCaller) approve(id, rationale string) {
	h.t.Helper()
	require.NoError(h.t, workflows.SignalHITLDecision(context.Background(), h.wrk.Temporal(), signedBy(h.t, hitl.Decision{
		InvocationID: id, Decision: hitl.Approve, Rationale: rationale, Operator: "alice",
	}, aliceKey)))
}

// lostWait asserts the answer of a call whose wait Temporal's restart interrupted.
func (h hitlCaller) lostWait(r keyedResult, id string) {
	h.t.Helper()
	require.Error(h.t, r.err)
	st := status.Convert(r.err)
	assert.Equal(h.t, codes.Unavailable, st.Code(), "a lost wait is retryable: %s", st.Message())
	assert.Contains(h.t, st.Message(), "sw4rm-idempotency-key", "the answer says how to retry")
	assert.Contains(h.t, st.Message(), id)
	assert.Equal(h.t, id, r.id, "the invocation id header was sent before the wait")
}

// approved asserts that r is alice's approval of invocation id.
func (h hitlCaller) approved(r keyedResult, id, rationale, when string) {
	h.t.Helper()
	require.NoError(h.t, r.err, when)
	assert.Equal(h.t, "approve", r.dec.GetAction(), when)
	assert.Equal(h.t, rationale, r.dec.GetRationale(), when)
	assert.Equal(h.t, id, r.id, when)
	var o hitl.Outcome
	require.NoError(h.t, json.Unmarshal(r.dec.GetDecisionPayload(), &o), when)
	assert.Equal(h.t, "alice", o.DecidedBy, when)
}

// TestHitlDecideRetryAfterTemporalOutage: a caller waits in HitlService.Decide, with an
// idempotency key, when Temporal goes away from the server as in a restart.
//
//   - An operator's decision is applied meanwhile and the hitl/ workflow completes. The
//     interrupted call answers Unavailable — not Internal — naming the invocation and saying
//     that a retry with the same key returns it; the retry gets that invocation's outcome
//     while Temporal is still away (from the store) and once it is back.
//   - The wait is lost before any decision: the retry attaches to the open invocation and
//     returns its decision.
//   - The same key with a different question is refused.
//   - A run that really ended without a decision (terminated) answers Aborted, and so does its
//     retry; no retry raised an invocation of its own.
func TestHitlDecideRetryAfterTemporalOutage(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			proxy := newTemporalProxy(t)
			srv, wrk := startBehindProxy(t, hitlConfig(t, kind), proxy)
			h := hitlCaller{t: t, c: hitlpb.NewHitlServiceClient(dialRaw(t, &system{app: srv})), srv: srv, wrk: wrk}
			ctxJSON, _ := json.Marshal(hitl.Context{Facts: []string{"agent wants prod credentials"}})
			req := &hitlpb.HitlInvocation{ReasonType: commonpb.HitlReasonType_SECURITY_APPROVAL, Context: ctxJSON, ProposedActions: []string{"approve", "deny"}, Priority: -5}

			key := uniq(t, "approval")
			first := h.inBackground(key, req)
			id := h.pending()
			proxy.cut(restarting)
			h.approve(id, "approved during the outage")
			h.lostWait(h.await(first, "after Temporal went away"), id)
			require.Eventually(t, func() bool {
				rec, err := srv.Store().HITL().GetInvocation(context.Background(), id)
				return err == nil && rec.Status == store.HITLDecided
			}, 20*time.Second, 50*time.Millisecond, "the decision was applied")
			h.approved(h.decide(key, req, 20*time.Second), id, "approved during the outage", "retry while Temporal is away")
			proxy.restore()
			h.approved(h.decide(key, req, 20*time.Second), id, "approved during the outage", "retry once Temporal is back")

			key2 := uniq(t, "second")
			first = h.inBackground(key2, req)
			id2 := h.pending()
			proxy.cut(restarting)
			h.lostWait(h.await(first, "after Temporal went away"), id2)
			proxy.restore()
			retry := h.inBackground(key2, req)
			select {
			case r := <-retry:
				t.Fatalf("the retry returned before any decision: %+v", r)
			case <-time.After(time.Second):
			}
			h.approve(id2, "approved after the outage")
			h.approved(h.await(retry, "after the decision"), id2, "approved after the outage", "retry of an open invocation")

			other := &hitlpb.HitlInvocation{ReasonType: req.GetReasonType(), Context: req.GetContext(), ProposedActions: req.GetProposedActions(), Priority: 3}
			r := h.decide(key2, other, 20*time.Second)
			assert.Equal(t, codes.AlreadyExists, status.Code(r.err), "a key names one question: %v", r.err)

			key3 := uniq(t, "terminated")
			first = h.inBackground(key3, req)
			id3 := h.pending()
			require.NoError(t, wrk.Temporal().TerminateWorkflow(context.Background(), hitl.WorkflowID(id3), "", "ended by an operator"))
			r = h.await(first, "after the invocation was terminated")
			assert.Equal(t, codes.Aborted, status.Code(r.err), "a run that really ended is final: %v", r.err)
			r = h.decide(key3, req, 20*time.Second)
			assert.Equal(t, codes.Aborted, status.Code(r.err), "the retry gets the same ended run: %v", r.err)

			recs, err := srv.Store().HITL().ListInvocations(context.Background(), store.HITLFilter{})
			require.NoError(t, err)
			assert.Len(t, recs, 3, "no retry raised an invocation of its own")
		})
	}
}

// TestHitlAdminDecideDuringTemporalRestart: an operator decides through HitlAdminService while
// Temporal, restarting, answers that the invocation's workflow is not found. The invocation
// is still waiting, so the operator is told to retry (Unavailable) — not that it is "no
// longer waiting" — and the same decision, repeated once Temporal is back, is applied.
func TestHitlAdminDecideDuringTemporalRestart(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			proxy := newTemporalProxy(t)
			srv, wrk := startBehindProxy(t, hitlConfig(t, kind), proxy)
			conn := dialRaw(t, &system{app: srv})
			h := hitlCaller{t: t, c: hitlpb.NewHitlServiceClient(conn), srv: srv, wrk: wrk}
			admin := hitladminpb.NewHitlAdminServiceClient(conn)
			key := uniq(t, "admin")
			req := &hitlpb.HitlInvocation{ReasonType: commonpb.HitlReasonType_TASK_ESCALATION, ProposedActions: []string{"approve", "deny"}}
			res := h.inBackground(key, req)
			id := h.pending()

			proxy.cut(func(string) *status.Status {
				return status.New(codes.NotFound, "workflow execution not found (the server is restarting)")
			})
			ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer alice-token"), 30*time.Second)
			defer cancel()
			decision := &hitladminpb.DecideRequest{InvocationId: id, Decision: "approve", Rationale: "approved across the restart"}
			_, err := admin.Decide(ctx, decision)
			st := status.Convert(err)
			assert.Equal(t, codes.Unavailable, st.Code(), "the invocation is still waiting: %s", st.Message())
			rec, err := srv.Store().HITL().GetInvocation(context.Background(), id)
			require.NoError(t, err)
			assert.Equal(t, store.HITLPending, rec.Status)

			proxy.restore()
			resp, err := admin.Decide(ctx, decision)
			require.NoError(t, err)
			assert.False(t, resp.GetAlreadyDecided())
			assert.Contains(t, resp.GetOutcomeJson(), "approved across the restart")
			// The requester's own wait was cut too; as told, it retries with its key.
			h.lostWait(h.await(res, "after Temporal went away"), id)
			h.approved(h.decide(key, req, 20*time.Second), id, "approved across the restart", "the requester's retry")
		})
	}
}
