package handoff_test

import (
	"context"
	"net"
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
	"google.golang.org/grpc/test/bufconn"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/sdk/handoff"
)

// fakeServer is an in-process HandoffService and RouterService: it records what the SDK
// sends and answers as the server does (headers included).
type fakeServer struct {
	handoffpb.UnimplementedHandoffServiceServer
	routerpb.UnimplementedRouterServiceServer
	mu        sync.Mutex
	requests  []*handoffpb.HandoffRequest
	md        []metadata.MD
	responses []*handoffpb.HandoffResponse
	pending   []*handoffpb.HandoffRequest
	stream    []*commonpb.Envelope
	confirmed []int64
}

func (f *fakeServer) RequestHandoff(ctx context.Context, r *handoffpb.HandoffRequest) (*commonpb.Empty, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	state := "PENDING"
	for _, prev := range f.requests {
		if prev.GetRequestId() == r.GetRequestId() {
			state = "ACCEPTED"
		}
	}
	f.requests, f.md = append(f.requests, r), append(f.md, md)
	_ = grpc.SetHeader(ctx, metadata.Pairs(wire.HandoffStateHeader, state))
	return &commonpb.Empty{}, nil
}

func (f *fakeServer) answer(ctx context.Context, r *handoffpb.HandoffResponse, state string) (*commonpb.Empty, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.GetRequestId() == "gone" {
		return nil, status.Error(codes.FailedPrecondition, "validation_error: handoff gone is not offered to b (state EXPIRED)")
	}
	f.responses = append(f.responses, r)
	_ = grpc.SetHeader(ctx, metadata.Pairs(wire.HandoffStateHeader, state))
	return &commonpb.Empty{}, nil
}

func (f *fakeServer) AcceptHandoff(ctx context.Context, r *handoffpb.HandoffResponse) (*commonpb.Empty, error) {
	return f.answer(ctx, r, "ACCEPTED")
}

func (f *fakeServer) RejectHandoff(ctx context.Context, r *handoffpb.HandoffResponse) (*commonpb.Empty, error) {
	return f.answer(ctx, r, "PENDING")
}

func (f *fakeServer) GetPendingHandoffs(ctx context.Context, r *handoffpb.GetPendingHandoffsRequest) (*handoffpb.GetPendingHandoffsResponse, error) {
	md := metadata.MD{}
	for range f.pending {
		md.Append(wire.ContextContentTypeKey, "text/plain")
		md.Append(wire.CorrelationIDKey, "ticket-7")
	}
	_ = grpc.SetHeader(ctx, md)
	return &handoffpb.GetPendingHandoffsResponse{PendingRequests: f.pending}, nil
}

func (f *fakeServer) CompleteHandoff(_ context.Context, r *handoffpb.CompleteHandoffRequest) (*handoffpb.CompleteHandoffResponse, error) {
	return &handoffpb.CompleteHandoffResponse{Success: true, Message: "handoff " + r.GetRequestId() + " is " + r.GetStatus().String()}, nil
}

func (f *fakeServer) StreamIncoming(_ *routerpb.StreamRequest, s grpc.ServerStreamingServer[routerpb.StreamItem]) error {
	for i, env := range f.stream {
		if err := s.Send(&routerpb.StreamItem{Msg: env, Seq: int64(i + 1)}); err != nil {
			return err
		}
	}
	<-s.Context().Done()
	return nil
}

func (f *fakeServer) AckDelivery(_ context.Context, r *routerpb.DeliveryAckRequest) (*routerpb.DeliveryAckResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.confirmed = append(f.confirmed, r.GetSeq())
	return &routerpb.DeliveryAckResponse{Recorded: true}, nil
}

func dial(t *testing.T, f *fakeServer, id string) *handoff.Client {
	t.Helper()
	l := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	handoffpb.RegisterHandoffServiceServer(g, f)
	routerpb.RegisterRouterServiceServer(g, f)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	a, err := sdk.Dial("passthrough:///bufnet", id, sdk.WithoutSigning(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return l.DialContext(ctx) }))
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	return handoff.New(a)
}

func TestRequestSendsMetadataAndReadsState(t *testing.T) {
	f := &fakeServer{}
	c := dial(t, f, "triage")
	tk, err := c.Request(t.Context(), handoff.Request{ID: "h1", Capabilities: []string{"billing"}, Context: []byte("ticket 7")},
		handoff.WithCorrelation("ticket-7"), handoff.WithContentType("text/plain"))
	require.NoError(t, err)
	assert.Equal(t, handoff.Ticket{RequestID: "h1", Correlation: "ticket-7", State: handoffpb.HandoffStatus_PENDING}, tk)
	require.Len(t, f.requests, 1)
	r := f.requests[0]
	assert.Equal(t, "triage", r.GetFromAgent())
	assert.Equal(t, handoff.DefaultTimeout, r.GetTimeout().AsDuration())
	assert.Equal(t, []string{"ticket-7"}, f.md[0].Get(wire.CorrelationIDKey))
	assert.Equal(t, []string{"text/plain"}, f.md[0].Get(wire.ContextContentTypeKey))

	tk, err = c.Request(t.Context(), handoff.Request{ID: "h1", To: "billing"})
	require.NoError(t, err)
	assert.Equal(t, handoffpb.HandoffStatus_ACCEPTED, tk.State, "a reuse reports the existing state")
	assert.Equal(t, "h1", tk.Correlation, "the request_id is the default correlation")
	assert.Empty(t, f.md[1].Get(wire.CorrelationIDKey))
}

func TestAnswers(t *testing.T) {
	f := &fakeServer{}
	c := dial(t, f, "billing")
	st, err := c.Accept(t.Context(), "h1")
	require.NoError(t, err)
	assert.Equal(t, handoffpb.HandoffStatus_ACCEPTED, st)
	_, err = c.Reject(t.Context(), "h2", handoff.Overloaded("queue full", 1500*time.Millisecond))
	require.NoError(t, err)
	_, err = c.Reject(t.Context(), "h3", handoff.Redirect("billing-eu", "EU customer"))
	require.NoError(t, err)
	_, err = c.Reject(t.Context(), "h4", handoff.Decline("not mine"))
	require.NoError(t, err)
	require.Len(t, f.responses, 4)
	assert.True(t, f.responses[0].GetAccepted())
	assert.Equal(t, "billing", f.responses[0].GetAcceptingAgent())
	assert.Equal(t, commonpb.ErrorCode_OVERLOADED, f.responses[1].GetRejectionCode())
	assert.EqualValues(t, 1500, f.responses[1].GetRetryAfterMs())
	assert.Equal(t, commonpb.ErrorCode_REDIRECT, f.responses[2].GetRejectionCode())
	assert.Equal(t, "billing-eu", f.responses[2].GetRedirectToAgentId())
	assert.Equal(t, "not mine", f.responses[3].GetRejectionReason())
	assert.Equal(t, commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED, f.responses[3].GetRejectionCode())

	_, err = c.Accept(t.Context(), "gone")
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "the server's refusal is kept: %v", err)

	msg, err := c.Complete(t.Context(), "h1")
	require.NoError(t, err)
	assert.Equal(t, "handoff h1 is COMPLETED", msg)
}

func TestPendingAndFetch(t *testing.T) {
	f := &fakeServer{pending: []*handoffpb.HandoffRequest{{RequestId: "h1", FromAgent: "triage", ContextSnapshot: []byte("ticket 7")}}}
	c := dial(t, f, "billing")
	ps, err := c.Pending(t.Context())
	require.NoError(t, err)
	require.Len(t, ps, 1)
	assert.Equal(t, "text/plain", ps[0].ContentType)
	assert.Equal(t, "ticket-7", ps[0].Correlation)
	p, ok, err := c.Fetch(t.Context(), "h1")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "ticket 7", string(p.Request.GetContextSnapshot()))
	_, ok, err = c.Fetch(t.Context(), "h9")
	require.NoError(t, err)
	assert.False(t, ok)
}

func notification(corr, payload string) *commonpb.Envelope {
	return &commonpb.Envelope{MessageId: "m-" + corr, ProducerId: "scheduler", CorrelationId: corr, MessageType: commonpb.MessageType_NOTIFICATION,
		ContentType: "application/json", Payload: []byte(payload)}
}

func TestParseEvent(t *testing.T) {
	e, ok := handoff.ParseEvent(notification("ticket-7", `{"event":"handoff_offered","request_id":"h1","from_agent":"triage","reason":"billing question",
		"capabilities_required":["billing"],"priority":3,"context_content_type":"text/plain","context_bytes":8,"expires_at":"2030-01-02T03:04:05Z"}`))
	require.True(t, ok)
	assert.Equal(t, handoff.EventOffered, e.Kind)
	assert.Equal(t, "ticket-7", e.Correlation)
	require.NotNil(t, e.Offer)
	assert.Equal(t, handoff.Offer{RequestID: "h1", From: "triage", Reason: "billing question", Capabilities: []string{"billing"}, Priority: 3,
		ContentType: "text/plain", ContextBytes: 8, ExpiresAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}, *e.Offer)

	e, ok = handoff.ParseEvent(notification("c", `{"event":"handoff_offered","request_id":"h2","expires_at":1700000000000}`))
	require.True(t, ok)
	assert.Equal(t, time.UnixMilli(1700000000000), e.Offer.ExpiresAt)

	e, ok = handoff.ParseEvent(notification("c", `{"event":"handoff_expired","request_id":"h3","reason":"no capable agent left"}`))
	require.True(t, ok)
	assert.Nil(t, e.Offer)
	assert.Equal(t, "no capable agent left", e.String("reason"))

	for _, env := range []*commonpb.Envelope{
		notification("c", `{"event":"agent_joined"}`),
		notification("c", `not json`),
		{MessageType: commonpb.MessageType_DATA, Payload: []byte(`{"event":"handoff_offered"}`)},
	} {
		_, ok := handoff.ParseEvent(env)
		assert.False(t, ok, "%s", env.GetPayload())
	}
}

func TestWatchConfirmsAndDeliversEvents(t *testing.T) {
	f := &fakeServer{stream: []*commonpb.Envelope{
		notification("a", `{"event":"handoff_offered","request_id":"h1"}`),
		{MessageId: "d", ProducerId: "x", CorrelationId: "b", MessageType: commonpb.MessageType_DATA, Payload: []byte(`{}`)},
		notification("c", `{"event":"handoff_completed","request_id":"h0"}`),
	}}
	c := dial(t, f, "billing")
	ctx, cancel := context.WithCancel(t.Context())
	var got []string
	done := make(chan error, 1)
	go func() {
		done <- c.Watch(ctx, func(_ context.Context, e handoff.Event) {
			got = append(got, e.Kind+":"+e.RequestID)
			if len(got) == 2 {
				cancel()
			}
		})
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return")
	}
	assert.Equal(t, []string{"handoff_offered:h1", "handoff_completed:h0"}, got)
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Equal(t, []int64{1, 2, 3}, f.confirmed, "every delivery is confirmed, handoff event or not")
}
