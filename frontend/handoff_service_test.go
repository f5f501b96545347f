package frontend

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/bridge"
	"github.com/sw4rm/sw4rm-temporal/outbox"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// fakeHandoffs is an in-memory store.Handoffs for the service's unit tests; the stores'
// own implementations are tested by store/storetest.
type fakeHandoffs struct {
	mu      sync.Mutex
	recs    map[string]store.HandoffRecord
	order   []string
	fences  map[[2]string]store.Fence
	gen     int64
	outbox  []store.OutboxEntry
	created int
}

func newFakeHandoffs() *fakeHandoffs {
	return &fakeHandoffs{recs: map[string]store.HandoffRecord{}, fences: map[[2]string]store.Fence{}}
}

func (f *fakeHandoffs) CreateHandoff(_ context.Context, rec store.HandoffRecord, hs ...store.OutboxEntry) (store.HandoffRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if prev, ok := f.recs[rec.RequestID]; ok {
		return prev, store.ErrDuplicateHandoff
	}
	rec.CreatedAt, rec.UpdatedAt = time.Now(), time.Now()
	f.recs[rec.RequestID] = rec
	f.order = append(f.order, rec.RequestID)
	f.outbox = append(f.outbox, hs...)
	f.created++
	return rec, nil
}

func (f *fakeHandoffs) GetHandoff(_ context.Context, id string) (store.HandoffRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec, ok := f.recs[id]
	if !ok {
		return rec, store.ErrNotFound
	}
	return rec, nil
}

func (f *fakeHandoffs) UpdateHandoff(_ context.Context, id string, s handoffpb.HandoffStatus, target, acceptedBy, endReason string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec, ok := f.recs[id]
	if !ok {
		return store.ErrNotFound
	}
	rec.Status = s
	if target != "" {
		rec.Target = target
	}
	if acceptedBy != "" {
		rec.AcceptedBy = acceptedBy
	}
	f.recs[id] = rec
	return nil
}

func (f *fakeHandoffs) list(keep func(store.HandoffRecord) bool) []store.HandoffRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []store.HandoffRecord
	for _, id := range f.order {
		if keep(f.recs[id]) {
			out = append(out, f.recs[id])
		}
	}
	return out
}

func (f *fakeHandoffs) ListOfferedTo(_ context.Context, agent string) ([]store.HandoffRecord, error) {
	return f.list(func(r store.HandoffRecord) bool {
		return r.Status == handoffpb.HandoffStatus_PENDING && r.Target == agent
	}), nil
}

func (f *fakeHandoffs) ListAcceptedBy(_ context.Context, agent string) ([]store.HandoffRecord, error) {
	return f.list(func(r store.HandoffRecord) bool {
		return r.Status == handoffpb.HandoffStatus_ACCEPTED && cmp.Or(r.AcceptedBy, r.Target) == agent
	}), nil
}

func (f *fakeHandoffs) ListByCorrelation(_ context.Context, corr string) ([]store.HandoffRecord, error) {
	return f.list(func(r store.HandoffRecord) bool { return r.Correlation == corr }), nil
}

func (f *fakeHandoffs) OpenDelegations(context.Context) (map[string]int, error) { return nil, nil }

func (f *fakeHandoffs) Fence(_ context.Context, fe store.Fence) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fences[[2]string{fe.Correlation, fe.AgentID}] = fe
	f.gen++
	return nil
}

func (f *fakeHandoffs) Fenced(_ context.Context, corr, agent string) (store.Fence, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fe, ok := f.fences[[2]string{corr, agent}]
	return fe, ok, nil
}

func (f *fakeHandoffs) ListFences(context.Context) ([]store.Fence, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]store.Fence, 0, len(f.fences))
	for _, fe := range f.fences {
		out = append(out, fe)
	}
	return out, nil
}

func (f *fakeHandoffs) FencesGeneration(context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen, nil
}

// handoffStore is the memory store with a fakeHandoffs.
type handoffStore struct {
	*memory.Store
	h *fakeHandoffs
}

func (s handoffStore) Handoffs() store.Handoffs { return s.h }

type handoffHarness struct {
	st  handoffStore
	tc  *mocks.Client
	svc *handoffService
	// started holds the inputs of the workflows the relay started.
	started []workflows.HandoffInput
}

func newHandoffHarness(t *testing.T, agents map[string][]string) *handoffHarness {
	t.Helper()
	st := handoffStore{Store: memory.New(), h: newFakeHandoffs()}
	t.Cleanup(st.Close)
	for id, modalities := range agents {
		require.NoError(t, st.Registry().PutAgent(t.Context(), store.AgentRecord{
			Descriptor: &registrypb.AgentDescriptor{AgentId: id, Name: id, ModalitiesSupported: modalities}, State: commonpb.AgentState_RUNNABLE}))
	}
	h := &handoffHarness{st: st, tc: &mocks.Client{}}
	h.tc.On("ExecuteWorkflow", mock.Anything, mock.Anything, mock.Anything, mock.Anything).Return(
		func(_ context.Context, o client.StartWorkflowOptions, _ any, args ...any) (client.WorkflowRun, error) {
			in := args[0].(workflows.HandoffInput)
			require.Equal(t, workflows.HandoffWorkflowID(in.RequestID), o.ID)
			h.started = append(h.started, in)
			return &mocks.WorkflowRun{}, nil
		})
	log := slog.New(slog.DiscardHandler)
	sink := audit.New(log, st.Audit())
	rel := outbox.New(st.Outbox(), outbox.Config{}, log, sink)
	bridge.RegisterOutboxHandlers(rel, h.tc, st, nil, "q")
	r := router.New(st, router.Config{}, sink)
	h.svc = &handoffService{s: &Server{store: st, router: r, temporal: h.tc, relay: rel, sink: sink, log: log, cfg: Config{TaskQueue: "q"}}}
	return h
}

// headerStream captures the headers a unary handler sets.
type headerStream struct {
	grpc.ServerTransportStream
	md metadata.MD
}

func (s *headerStream) Method() string                  { return "/test" }
func (s *headerStream) SetHeader(md metadata.MD) error  { s.md = metadata.Join(s.md, md); return nil }
func (s *headerStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *headerStream) SetTrailer(metadata.MD) error    { return nil }

func callCtx(t *testing.T, p auth.Principal, md ...string) (context.Context, *headerStream) {
	hs := &headerStream{}
	ctx := grpc.NewContextWithServerTransportStream(t.Context(), hs)
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(md...))
	return auth.WithPrincipal(ctx, p), hs
}

func handoffReq(id, from, to string) *handoffpb.HandoffRequest {
	return &handoffpb.HandoffRequest{RequestId: id, FromAgent: from, ToAgent: to, Reason: "needs review",
		ContextSnapshot: []byte(`{"ticket":42}`), Timeout: durationpb.New(time.Minute)}
}

// TestRequestHandoffStoresAndStarts: a valid request is stored with its snapshot and its
// correlation, and its workflow is started through the outbox entry with an input that
// holds no snapshot; a reuse answers the existing state and starts nothing.
func TestRequestHandoffStoresAndStarts(t *testing.T) {
	h := newHandoffHarness(t, map[string][]string{"a": nil, "b": nil})
	ctx, hs := callCtx(t, auth.Principal{Agent: "a"}, wire.CorrelationIDKey, "ticket-42", wire.ContextContentTypeKey, "text/plain")
	_, err := h.svc.RequestHandoff(ctx, handoffReq("h1", "a", "b"))
	require.NoError(t, err)
	assert.Equal(t, []string{"PENDING"}, hs.md.Get(wire.HandoffStateHeader))
	rec, err := h.st.h.GetHandoff(t.Context(), "h1")
	require.NoError(t, err)
	assert.Equal(t, "ticket-42", rec.Correlation)
	assert.Equal(t, "text/plain", rec.ContextContentType)
	var stored handoffpb.HandoffRequest
	require.NoError(t, proto.Unmarshal(rec.Request, &stored))
	assert.Equal(t, `{"ticket":42}`, string(stored.GetContextSnapshot()))
	require.Len(t, h.started, 1)
	in := h.started[0]
	assert.Equal(t, "ticket-42", in.Correlation)
	assert.Equal(t, len(`{"ticket":42}`), in.ContextSize)
	assert.Len(t, in.ContextSHA256, 64)
	payload, _ := json.Marshal(in)
	assert.NotContains(t, string(payload), "ticket\\\":42", "the snapshot never enters the workflow's input")

	h.st.h.mu.Lock()
	r := h.st.h.recs["h1"]
	r.Status = handoffpb.HandoffStatus_ACCEPTED
	h.st.h.recs["h1"] = r
	h.st.h.mu.Unlock()
	ctx, hs = callCtx(t, auth.Principal{Agent: "a"})
	_, err = h.svc.RequestHandoff(ctx, handoffReq("h1", "a", "b"))
	require.NoError(t, err)
	assert.Equal(t, []string{"ACCEPTED"}, hs.md.Get(wire.HandoffStateHeader), "a reuse answers the existing state")
	assert.Equal(t, 1, h.st.h.created)
	assert.Len(t, h.started, 1)

	ctx, _ = callCtx(t, auth.Principal{Agent: "b"})
	_, err = h.svc.RequestHandoff(ctx, handoffReq("h1", "b", "a"))
	assert.Equal(t, codes.PermissionDenied, status.Code(toStatus(ctx, err).Err()), "another agent's request_id")
}

// TestRequestHandoffRefusals: each refusal carries the spec's error code and stores nothing.
func TestRequestHandoffRefusals(t *testing.T) {
	h := newHandoffHarness(t, map[string][]string{"a": nil, "b": nil, "img": {"image/*"}})
	require.NoError(t, h.st.h.Fence(t.Context(), store.Fence{Correlation: "c1", AgentID: "a", RequestID: "h0", NewOwner: "b"}))
	for name, tc := range map[string]struct {
		req  *handoffpb.HandoffRequest
		md   []string
		code codes.Code
		msg  string
	}{
		"invalid": {handoffReq("h1", "a", "a"), nil, codes.InvalidArgument, "validation_error: "},
		"depth": {func() *handoffpb.HandoffRequest {
			r := handoffReq("h1", "a", "b")
			r.Budget = &handoffpb.BudgetEnvelope{CurrentDepth: 2, MaxDelegationDepth: 2}
			return r
		}(), nil, codes.InvalidArgument, "delegation depth 2 reaches max 2"},
		"unknown from": {handoffReq("h1", "x", "b"), nil, codes.NotFound, "no_route: from_agent"},
		"unknown to":   {handoffReq("h1", "a", "x"), nil, codes.NotFound, "no_route: to_agent"},
		"modality":     {handoffReq("h1", "a", "img"), nil, codes.InvalidArgument, "modalities"},
		"lacks capabilities": {func() *handoffpb.HandoffRequest {
			r := handoffReq("h1", "a", "b")
			r.CapabilitiesRequired = []string{"billing", "refunds"}
			return r
		}(), nil, codes.FailedPrecondition, `validation_error: to_agent "b" lacks capabilities_required [billing refunds]`},
		"bad content type":      {handoffReq("h1", "a", "b"), []string{wire.ContextContentTypeKey, "image/png"}, codes.InvalidArgument, "content type"},
		"fenced originator":     {handoffReq("h1", "a", "b"), []string{wire.CorrelationIDKey, "c1"}, codes.PermissionDenied, "permission_denied: fenced: correlation c1 was handed to b by handoff h0"},
		"ping-pong":             {handoffReq("h1", "b", "a"), []string{wire.CorrelationIDKey, "c1"}, codes.PermissionDenied, "no ping-pong"},
		"other correlation oks": {handoffReq("h9", "b", "a"), []string{wire.CorrelationIDKey, "c2"}, codes.OK, ""},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, _ := callCtx(t, auth.Principal{}, tc.md...)
			_, err := h.svc.RequestHandoff(ctx, tc.req)
			st := toStatus(ctx, err)
			if err == nil {
				st = status.New(codes.OK, "")
			}
			assert.Equal(t, tc.code, st.Code(), st.Message())
			assert.Contains(t, st.Message(), tc.msg)
		})
	}
	assert.Equal(t, 1, h.st.h.created, "only the valid request was stored")
}

// TestAnswerRefusedIsFailedPrecondition: an accept the workflow's validator refuses, or one
// for a handoff whose workflow has ended, answers FailedPrecondition with the state; an
// accepted one answers the new state.
func TestAnswerRefusedIsFailedPrecondition(t *testing.T) {
	h := newHandoffHarness(t, map[string][]string{"a": nil, "b": nil, "c": nil})
	ctx, _ := callCtx(t, auth.Principal{Agent: "a"})
	_, err := h.svc.RequestHandoff(ctx, handoffReq("h1", "a", "b"))
	require.NoError(t, err)

	h.tc.On("UpdateWorkflow", mock.Anything, mock.MatchedBy(func(o client.UpdateWorkflowOptions) bool {
		return o.Args[0].(workflows.HandoffAnswer).Agent == "c"
	})).Return(nil, temporal.NewApplicationError("not offered", "HandoffRefused")).Once()
	ctx, _ = callCtx(t, auth.Principal{Agent: "c"})
	_, err = h.svc.AcceptHandoff(ctx, &handoffpb.HandoffResponse{RequestId: "h1", AcceptingAgent: "c", Accepted: true})
	st := toStatus(ctx, err)
	assert.Equal(t, codes.FailedPrecondition, st.Code())
	assert.Equal(t, "validation_error: handoff h1 is not offered to c (state PENDING)", st.Message())

	handle := &mocks.WorkflowUpdateHandle{}
	handle.On("Get", mock.Anything, mock.Anything).Return(func(_ context.Context, out any) error {
		*out.(*workflows.HandoffState) = workflows.HandoffState{RequestID: "h1", Status: handoffpb.HandoffStatus_ACCEPTED, AcceptedBy: "b"}
		return nil
	})
	h.tc.On("UpdateWorkflow", mock.Anything, mock.MatchedBy(func(o client.UpdateWorkflowOptions) bool {
		return o.UpdateName == workflows.HandoffAcceptUpdate && o.WorkflowID == "handoff/h1" && o.WaitForStage == client.WorkflowUpdateStageCompleted
	})).Return(handle, nil).Once()
	ctx, hs := callCtx(t, auth.Principal{Agent: "b"})
	_, err = h.svc.AcceptHandoff(ctx, &handoffpb.HandoffResponse{RequestId: "h1", AcceptingAgent: "b", Accepted: true})
	require.NoError(t, err)
	assert.Equal(t, []string{"ACCEPTED"}, hs.md.Get(wire.HandoffStateHeader))

	ctx, _ = callCtx(t, auth.Principal{Agent: "b"})
	_, err = h.svc.RejectHandoff(ctx, &handoffpb.HandoffResponse{RequestId: "h1", AcceptingAgent: "b", RejectionCode: commonpb.ErrorCode_REDIRECT,
		RedirectToAgentId: "no such id!"})
	assert.Equal(t, codes.InvalidArgument, toStatus(ctx, err).Code(), "a garbled REDIRECT target goes back to the target (a blank one ends the handoff)")
}

// TestCancelDelegation: only the originator (or an operator) cancels a correlation's open
// handoffs; each gets the cancel signal with the grace period.
func TestCancelDelegation(t *testing.T) {
	h := newHandoffHarness(t, map[string][]string{"a": nil, "b": nil})
	for _, id := range []string{"h1", "h2"} {
		ctx, _ := callCtx(t, auth.Principal{Agent: "a"}, wire.CorrelationIDKey, "job")
		_, err := h.svc.RequestHandoff(ctx, handoffReq(id, "a", "b"))
		require.NoError(t, err)
	}
	var signalled []string
	h.tc.On("SignalWorkflow", mock.Anything, mock.Anything, "", workflows.HandoffCancelSignal, mock.Anything).Return(
		func(_ context.Context, wid, _, _ string, arg any) error {
			c := arg.(workflows.HandoffCancel)
			assert.Equal(t, 2*time.Second, c.GracePeriod)
			assert.Equal(t, "changed plans", c.Reason)
			signalled = append(signalled, wid)
			return nil
		})
	req := &handoffpb.CancelDelegation{CorrelationId: "job", Reason: "changed plans", GracePeriodMs: 2000}
	ctx, _ := callCtx(t, auth.Principal{Agent: "b"})
	_, err := h.svc.CancelDelegation(ctx, req)
	assert.Equal(t, codes.PermissionDenied, toStatus(ctx, err).Code())
	assert.Empty(t, signalled)

	ctx, _ = callCtx(t, auth.Principal{Agent: "a"})
	resp, err := h.svc.CancelDelegation(ctx, req)
	require.NoError(t, err)
	assert.True(t, resp.GetAcknowledged())
	assert.Contains(t, resp.GetMessage(), "cancelled 2")
	assert.Equal(t, []string{"handoff/h1", "handoff/h2"}, signalled)

	ctx, _ = callCtx(t, auth.Principal{Agent: "a"})
	_, err = h.svc.CancelDelegation(ctx, &handoffpb.CancelDelegation{CorrelationId: "none"})
	assert.Equal(t, codes.NotFound, toStatus(ctx, err).Code())
}

// TestGetPendingHandoffs lists what is offered to the agent, with the snapshot, and its
// content types and correlations in the headers.
func TestGetPendingHandoffs(t *testing.T) {
	h := newHandoffHarness(t, map[string][]string{"a": nil, "b": nil})
	ctx, _ := callCtx(t, auth.Principal{Agent: "a"}, wire.CorrelationIDKey, "job", wire.ContextContentTypeKey, "text/plain")
	_, err := h.svc.RequestHandoff(ctx, handoffReq("h1", "a", "b"))
	require.NoError(t, err)
	ctx, hs := callCtx(t, auth.Principal{Agent: "b"})
	resp, err := h.svc.GetPendingHandoffs(ctx, &handoffpb.GetPendingHandoffsRequest{AgentId: "b"})
	require.NoError(t, err)
	require.Len(t, resp.GetPendingRequests(), 1)
	assert.Equal(t, `{"ticket":42}`, string(resp.GetPendingRequests()[0].GetContextSnapshot()))
	assert.Equal(t, []string{"text/plain"}, hs.md.Get(wire.ContextContentTypeKey))
	assert.Equal(t, []string{"job"}, hs.md.Get(wire.CorrelationIDKey))
}

// TestAcceptHandoffAgain: an AcceptHandoff sent again by the agent that accepted — after
// a restart, or a retry whose answer was lost — answers OK with the state and the completion
// deadline, as the workflow's state query gives them; the validator's refusal of the
// repeated update does not reach the agent. Another agent's accept is still refused, without
// asking the workflow.
func TestAcceptHandoffAgain(t *testing.T) {
	h := newHandoffHarness(t, map[string][]string{"a": nil, "b": nil, "c": nil})
	ctx, _ := callCtx(t, auth.Principal{Agent: "a"})
	_, err := h.svc.RequestHandoff(ctx, handoffReq("h1", "a", "b"))
	require.NoError(t, err)
	require.NoError(t, h.st.h.UpdateHandoff(t.Context(), "h1", handoffpb.HandoffStatus_ACCEPTED, "b", "b", ""))

	h.tc.On("UpdateWorkflow", mock.Anything, mock.Anything).Return(nil, temporal.NewApplicationError("not offered", workflows.HandoffUpdateRefused))
	completeBy := time.Date(2030, 1, 1, 13, 0, 0, 0, time.UTC)
	value := &mocks.Value{}
	value.On("Get", mock.Anything).Return(func(out any) error {
		*out.(*workflows.HandoffState) = workflows.HandoffState{RequestID: "h1", Status: handoffpb.HandoffStatus_ACCEPTED, AcceptedBy: "b", CompleteBy: completeBy}
		return nil
	})
	h.tc.On("QueryWorkflow", mock.Anything, "handoff/h1", "", workflows.HandoffStateQuery).Return(value, nil)

	ctx, hs := callCtx(t, auth.Principal{Agent: "b"})
	_, err = h.svc.AcceptHandoff(ctx, &handoffpb.HandoffResponse{RequestId: "h1", AcceptingAgent: "b", Accepted: true})
	require.NoError(t, err)
	assert.Equal(t, []string{"ACCEPTED"}, hs.md.Get(wire.HandoffStateHeader))
	assert.Equal(t, []string{"2030-01-01T13:00:00Z"}, hs.md.Get(wire.HandoffCompleteByHeader))

	ctx, _ = callCtx(t, auth.Principal{Agent: "c"})
	_, err = h.svc.AcceptHandoff(ctx, &handoffpb.HandoffResponse{RequestId: "h1", AcceptingAgent: "c", Accepted: true})
	assert.Equal(t, codes.FailedPrecondition, toStatus(ctx, err).Code())
	h.tc.AssertNumberOfCalls(t, "QueryWorkflow", 1)
}

// TestGetPendingHandoffsIncludeAccepted: with sw4rm-handoff-include-accepted: true the
// agent's accepted, uncompleted handoffs follow its pending offers, with their snapshots and
// each request's state in sw4rm-handoff-state; without it only offers are listed; a value
// that is not a boolean is refused.
func TestGetPendingHandoffsIncludeAccepted(t *testing.T) {
	h := newHandoffHarness(t, map[string][]string{"a": nil, "b": nil})
	for _, id := range []string{"h1", "h2", "h3"} {
		ctx, _ := callCtx(t, auth.Principal{Agent: "a"}, wire.CorrelationIDKey, "job-"+id)
		_, err := h.svc.RequestHandoff(ctx, handoffReq(id, "a", "b"))
		require.NoError(t, err)
	}
	require.NoError(t, h.st.h.UpdateHandoff(t.Context(), "h1", handoffpb.HandoffStatus_ACCEPTED, "b", "b", ""))
	require.NoError(t, h.st.h.UpdateHandoff(t.Context(), "h3", handoffpb.HandoffStatus_COMPLETED, "b", "b", ""))
	ids := func(resp *handoffpb.GetPendingHandoffsResponse) []string {
		var out []string
		for _, r := range resp.GetPendingRequests() {
			out = append(out, r.GetRequestId())
		}
		return out
	}

	ctx, hs := callCtx(t, auth.Principal{Agent: "b"})
	resp, err := h.svc.GetPendingHandoffs(ctx, &handoffpb.GetPendingHandoffsRequest{AgentId: "b"})
	require.NoError(t, err)
	assert.Equal(t, []string{"h2"}, ids(resp), "by default, offers only")
	assert.Equal(t, []string{"PENDING"}, hs.md.Get(wire.HandoffStateHeader))

	ctx, hs = callCtx(t, auth.Principal{Agent: "b"}, wire.HandoffIncludeAcceptedKey, "true")
	resp, err = h.svc.GetPendingHandoffs(ctx, &handoffpb.GetPendingHandoffsRequest{AgentId: "b"})
	require.NoError(t, err)
	assert.Equal(t, []string{"h2", "h1"}, ids(resp), "offers, then the accepted handoffs; not the completed one")
	assert.Equal(t, `{"ticket":42}`, string(resp.GetPendingRequests()[1].GetContextSnapshot()), "the accepted handoff's snapshot again")
	assert.Equal(t, []string{"PENDING", "ACCEPTED"}, hs.md.Get(wire.HandoffStateHeader))
	assert.Equal(t, []string{"job-h2", "job-h1"}, hs.md.Get(wire.CorrelationIDKey))

	ctx, _ = callCtx(t, auth.Principal{Agent: "b"}, wire.HandoffIncludeAcceptedKey, "yes please")
	_, err = h.svc.GetPendingHandoffs(ctx, &handoffpb.GetPendingHandoffsRequest{AgentId: "b"})
	st := toStatus(ctx, err)
	assert.Equal(t, codes.InvalidArgument, st.Code())
	assert.Contains(t, st.Message(), "validation_error: metadata sw4rm-handoff-include-accepted")
}

// TestHandoffRules: the per-method rules of the handoff service.
func TestHandoffRules(t *testing.T) {
	a := NewAuthenticator(AuthConfig{Mode: auth.Required})
	defer a.Close()
	alice, ops := auth.Principal{Agent: "alice"}, auth.Principal{Operator: "ops"}
	deny := func(method string, req any, p auth.Principal) { assert.Error(t, a.authorize(method, req, p), method) }
	allow := func(method string, req any, p auth.Principal) { assert.NoError(t, a.authorize(method, req, p), method) }
	allow(handoffpb.HandoffService_RequestHandoff_FullMethodName, &handoffpb.HandoffRequest{FromAgent: "alice"}, alice)
	deny(handoffpb.HandoffService_RequestHandoff_FullMethodName, &handoffpb.HandoffRequest{FromAgent: "bob"}, alice)
	deny(handoffpb.HandoffService_RequestHandoff_FullMethodName, &handoffpb.HandoffRequest{FromAgent: "bob"}, ops)
	allow(handoffpb.HandoffService_AcceptHandoff_FullMethodName, &handoffpb.HandoffResponse{AcceptingAgent: "alice"}, alice)
	deny(handoffpb.HandoffService_RejectHandoff_FullMethodName, &handoffpb.HandoffResponse{AcceptingAgent: "bob"}, alice)
	allow(handoffpb.HandoffService_GetPendingHandoffs_FullMethodName, &handoffpb.GetPendingHandoffsRequest{AgentId: "bob"}, ops)
	deny(handoffpb.HandoffService_GetPendingHandoffs_FullMethodName, &handoffpb.GetPendingHandoffsRequest{AgentId: "bob"}, alice)
	allow(handoffpb.HandoffService_CompleteHandoff_FullMethodName, &handoffpb.CompleteHandoffRequest{}, alice)
	deny(handoffpb.HandoffService_CancelDelegation_FullMethodName, &handoffpb.CancelDelegation{}, auth.Principal{})
}
