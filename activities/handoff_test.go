package activities

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// fakeHandoffs is the part of store.Handoffs the activities use, in memory; the stores'
// own implementations are tested by store/storetest.
type fakeHandoffs struct {
	store.Handoffs
	mu      sync.Mutex
	updates []string
	open    map[string]int
	fences  map[[2]string]store.Fence
}

func (f *fakeHandoffs) UpdateHandoff(_ context.Context, requestID string, status handoffpb.HandoffStatus, target, acceptedBy, endReason string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates = append(f.updates, requestID+" "+status.String()+" "+target+" "+acceptedBy+" "+endReason)
	return nil
}

func (f *fakeHandoffs) OpenDelegations(context.Context) (map[string]int, error) { return f.open, nil }

func (f *fakeHandoffs) Fence(_ context.Context, fe store.Fence) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fences[[2]string{fe.Correlation, fe.AgentID}] = fe
	return nil
}

func (f *fakeHandoffs) Fenced(_ context.Context, correlation, agentID string) (store.Fence, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fe, ok := f.fences[[2]string{correlation, agentID}]
	return fe, ok, nil
}

// handoffStore is the memory store with fakeHandoffs as its Handoffs.
type handoffStore struct {
	store.Store
	h *fakeHandoffs
}

func (s handoffStore) Handoffs() store.Handoffs { return s.h }

func handoffActivities(t *testing.T) (*Activities, *fakeHandoffs, store.Store) {
	t.Helper()
	mem := memory.New()
	t.Cleanup(mem.Close)
	h := &fakeHandoffs{open: map[string]int{}, fences: map[[2]string]store.Fence{}}
	st := handoffStore{Store: mem, h: h}
	sink := audit.New(nil, st.Audit())
	agents := map[string][]string{"a": {"billing"}, "b": {"billing"}, "c": {"billing", "refunds"}, "d": {"billing"}, "e": {"support"}}
	for id, caps := range agents {
		require.NoError(t, st.Registry().PutAgent(context.Background(), store.AgentRecord{
			Descriptor: &registrypb.AgentDescriptor{AgentId: id, Name: id, Capabilities: caps}, State: commonpb.AgentState_RUNNABLE}))
	}
	require.NoError(t, st.Registry().PutAgent(context.Background(), store.AgentRecord{
		Descriptor: &registrypb.AgentDescriptor{AgentId: "img", Name: "img", Capabilities: []string{"billing"}, ModalitiesSupported: []string{"image/*"}},
		State:      commonpb.AgentState_RUNNABLE}))
	return &Activities{Store: st, Router: router.New(st, router.Config{}, sink), Sink: sink}, h, st
}

// messagesFor returns the envelopes waiting in agentID's buffer.
func messagesFor(t *testing.T, st store.Store, agentID string) []*commonpb.Envelope {
	t.Helper()
	ds, err := st.Messages().Claim(context.Background(), store.ClaimRequest{AgentID: agentID, Limit: 100, Lease: time.Hour})
	require.NoError(t, err)
	var out []*commonpb.Envelope
	for _, d := range ds {
		out = append(out, d.Envelope)
	}
	return out
}

func TestRouteHandoffRanksByLoadAndSkipsFenced(t *testing.T) {
	a, h, _ := handoffActivities(t)
	ctx := context.Background()
	// b has three open delegations, c two messages waiting: c weighs less.
	h.open["b"] = 3
	for i := range 2 {
		require.NoError(t, a.NotifyHandoff(ctx, NotifyHandoffInput{RequestID: "other", Correlation: "x", To: "c", Event: HandoffEventAccepted, N: i + 1}))
	}
	// d would weigh nothing, but it handed corr-1 away already.
	require.NoError(t, a.FenceHandoff(ctx, FenceHandoffInput{Correlation: "corr-1", AgentID: "d", RequestID: "h-0", NewOwner: "a"}))

	in := RouteHandoffInput{RequestID: "h-1", Correlation: "corr-1", Capabilities: []string{"billing"}, ContentType: "application/json", Exclude: []string{"a"}}
	r, err := a.RouteHandoff(ctx, in)
	require.NoError(t, err)
	assert.Equal(t, "c", r.Agent)
	assert.Equal(t, "least loaded of 2 capable: load 2", r.Reason, "b and c: a is excluded, d fenced, e incapable, img takes no JSON")

	in.Exclude = []string{"a", "c"}
	r, err = a.RouteHandoff(ctx, in)
	require.NoError(t, err)
	assert.Equal(t, "b", r.Agent)

	in.Exclude = []string{"a", "b", "c"}
	r, err = a.RouteHandoff(ctx, in)
	require.NoError(t, err)
	assert.Empty(t, r.Agent)
	assert.Contains(t, r.Reason, "fenced on correlation corr-1")

	in.Capabilities = []string{"payroll"}
	r, err = a.RouteHandoff(ctx, in)
	require.NoError(t, err)
	assert.Empty(t, r.Agent)
	assert.Contains(t, r.Reason, "no capable agent left among 6 registered")
}

func TestRouteHandoffChecksARedirect(t *testing.T) {
	a, _, _ := handoffActivities(t)
	ctx := context.Background()
	require.NoError(t, a.FenceHandoff(ctx, FenceHandoffInput{Correlation: "corr-1", AgentID: "d", RequestID: "h-0", NewOwner: "a"}))
	check := func(only string, caps ...string) HandoffRoute {
		r, err := a.RouteHandoff(ctx, RouteHandoffInput{RequestID: "h-1", Correlation: "corr-1", Capabilities: caps, ContentType: "application/json",
			Exclude: []string{"a", "b"}, Only: only})
		require.NoError(t, err)
		return r
	}
	assert.Equal(t, "e", check("e").Agent, "no capabilities_required: any registered agent qualifies")
	assert.Equal(t, "c", check("c", "billing", "refunds").Agent)
	for only, why := range map[string]string{"d": "fenced on correlation corr-1 since handoff h-0", "zz": "not registered", "b": "already refused",
		"img": "does not accept application/json", "e": "it lacks capabilities_required [billing] (§17.6)"} {
		r := check(only, "billing")
		assert.Empty(t, r.Agent, only)
		assert.Contains(t, r.Reason, why, only)
	}
	assert.Contains(t, check("d", "billing", "refunds").Reason, "lacks capabilities_required [refunds]", "only the missing ones are named")
}

func TestOfferHandoffRecordsAndNotifiesOnce(t *testing.T) {
	a, h, st := handoffActivities(t)
	ctx := context.Background()
	expires := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	in := OfferHandoffInput{RequestID: "h-1", Correlation: "corr-1", From: "a", Target: "b", Reason: "needs billing", ChoiceReason: "named",
		Capabilities: []string{"billing"}, Priority: -3, ContextContentType: "text/plain", ContextSize: 12, ExpiresAt: expires, Offer: 1}
	require.NoError(t, a.OfferHandoff(ctx, in))
	require.NoError(t, a.OfferHandoff(ctx, in), "a retried activity")
	msgs := messagesFor(t, st, "b")
	require.Len(t, msgs, 1, "the retry found its message admitted")
	env := msgs[0]
	assert.Equal(t, commonpb.MessageType_NOTIFICATION, env.GetMessageType())
	assert.Equal(t, "corr-1", env.GetCorrelationId())
	assert.Equal(t, HandoffMessageID("h-1", "offer", 1), env.GetMessageId())
	var got map[string]any
	require.NoError(t, json.Unmarshal(env.GetPayload(), &got))
	assert.Equal(t, map[string]any{"event": "handoff_offered", "request_id": "h-1", "from_agent": "a", "reason": "needs billing",
		"capabilities_required": []any{"billing"}, "priority": float64(-3), "context_content_type": "text/plain", "context_bytes": float64(12),
		"expires_at": "2030-01-01T12:00:00Z"}, got)
	assert.Equal(t, []string{"h-1 PENDING b  ", "h-1 PENDING b  "}, h.updates)

	in.Offer = 2
	require.NoError(t, a.OfferHandoff(ctx, in))
	assert.Len(t, messagesFor(t, st, "b"), 1, "a re-offer is a new message (the first is leased by the claim above)")
}

func TestNotifyRecordAndFenceHandoff(t *testing.T) {
	a, h, st := handoffActivities(t)
	ctx := context.Background()
	n := NotifyHandoffInput{RequestID: "h-1", Correlation: "corr-1", To: "a", Event: HandoffEventCancelled, N: 3, From: "a", Target: "b",
		State: handoffpb.HandoffStatus_ACCEPTED, Reason: "cancelled: stop", GracePeriod: 2 * time.Second}
	require.NoError(t, a.NotifyHandoff(ctx, n))
	require.NoError(t, a.NotifyHandoff(ctx, n))
	msgs := messagesFor(t, st, "a")
	require.Len(t, msgs, 1)
	var ev HandoffEvent
	require.NoError(t, json.Unmarshal(msgs[0].GetPayload(), &ev))
	assert.Equal(t, HandoffEvent{Event: "handoff_cancelled", RequestID: "h-1", State: "ACCEPTED", FromAgent: "a", ToAgent: "b", Reason: "cancelled: stop", GracePeriodMs: 2000}, ev)

	// A REDIRECT not followed reaches the originator as HandoffResponse would carry it.
	require.NoError(t, a.NotifyHandoff(ctx, NotifyHandoffInput{RequestID: "h-1", Correlation: "corr-1", To: "c", Event: HandoffEventRejected, N: 4, From: "a",
		Target: "b", State: handoffpb.HandoffStatus_REJECTED, Reason: "not followed", Code: commonpb.ErrorCode_REDIRECT, RedirectTo: "d"}))
	var rej map[string]any
	require.NoError(t, json.Unmarshal(messagesFor(t, st, "c")[0].GetPayload(), &rej))
	assert.Equal(t, "REDIRECT", rej["rejection_code"])
	assert.Equal(t, "d", rej["redirect_to_agent_id"])

	require.NoError(t, a.RecordHandoff(ctx, RecordHandoffInput{RequestID: "h-1", Correlation: "corr-1", From: "a", Status: handoffpb.HandoffStatus_ACCEPTED, Target: "b", AcceptedBy: "b"}))
	assert.Equal(t, []string{"h-1 ACCEPTED b b "}, h.updates)
	require.NoError(t, a.FenceHandoff(ctx, FenceHandoffInput{Correlation: "corr-1", AgentID: "a", RequestID: "h-1", NewOwner: "b"}))
	f, ok, err := h.Fenced(ctx, "corr-1", "a")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "b", f.NewOwner)

	a.Sink.Close()
	evs, err := st.Audit().List(ctx, store.AuditFilter{CorrelationID: "corr-1", TypePrefix: "handoff."})
	require.NoError(t, err)
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	assert.Equal(t, []string{"handoff.accepted", "handoff.fenced"}, types)
}
