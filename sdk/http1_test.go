package sdk_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/vanguard/vanguardgrpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/signing"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/sdk/tool"
)

// fakeServices answer the SDK's calls the way the server's frontend would, and record what
// reached them.
type fakeServices struct {
	registrypb.UnimplementedRegistryServiceServer
	routerpb.UnimplementedRouterServiceServer
	toolpb.UnimplementedToolServiceServer

	mu       sync.Mutex
	md       []metadata.MD // incoming metadata of each call
	deadline bool          // whether the last Heartbeat had a deadline
}

func (f *fakeServices) record(ctx context.Context) metadata.MD {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.md = append(f.md, md)
	return md
}

func (f *fakeServices) lastMD() metadata.MD {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.md[len(f.md)-1]
}

func (f *fakeServices) RegisterAgent(ctx context.Context, req *registrypb.RegisterAgentRequest) (*registrypb.RegisterAgentResponse, error) {
	f.record(ctx)
	if req.GetAgent().GetName() == "refuse" {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(wire.ErrorCodeTrailer, "VALIDATION_ERROR"))
		st, err := status.New(codes.InvalidArgument, "validation_error: the name is refused").
			WithDetails(&toolpb.ToolError{ErrorCode: "VALIDATION_ERROR", Message: "a detail"})
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-head", "h1", "x-raw-bin", "\x00\x01\xff"))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-tail", "t1"))
	return &registrypb.RegisterAgentResponse{Accepted: true}, nil
}

func (f *fakeServices) Heartbeat(ctx context.Context, _ *registrypb.HeartbeatRequest) (*registrypb.HeartbeatResponse, error) {
	f.record(ctx)
	_, ok := ctx.Deadline()
	f.mu.Lock()
	f.deadline = ok
	f.mu.Unlock()
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// holdFirst is how long StreamIncoming with x-hold stays silent before its first delivery.
const holdFirst = 500 * time.Millisecond

// StreamIncoming sends two deliveries with keep-alives (seq 0, no msg) around them, or, with
// the x-hold header, one delivery after holdFirst and then nothing until the call ends.
func (f *fakeServices) StreamIncoming(req *routerpb.StreamRequest, ss grpc.ServerStreamingServer[routerpb.StreamItem]) error {
	md := f.record(ss.Context())
	item := func(seq int64) *routerpb.StreamItem {
		return &routerpb.StreamItem{Seq: seq, Msg: &commonpb.Envelope{MessageId: "m" + string(rune('0'+seq)), ProducerId: "p", MessageType: commonpb.MessageType_DATA}}
	}
	if len(md.Get("x-hold")) > 0 {
		time.Sleep(holdFirst) // silent at first, as an idle inbox is
		if err := ss.Send(item(1)); err != nil {
			return err
		}
		<-ss.Context().Done()
		return nil
	}
	for _, it := range []*routerpb.StreamItem{{}, item(1), {}, {}, item(2), {}} {
		if err := ss.Send(it); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeServices) CallStream(req *toolpb.ToolCall, ss grpc.ServerStreamingServer[toolpb.ToolFrame]) error {
	f.record(ss.Context())
	for _, fr := range []*toolpb.ToolFrame{{}, {CallId: req.GetCallId(), FrameNo: 1, Data: []byte("a")}, {}, {CallId: req.GetCallId(), FrameNo: 2, Final: true}} {
		if err := ss.Send(fr); err != nil {
			return err
		}
	}
	return nil
}

// wireCall is a request as it arrived over HTTP.
type wireCall struct {
	proto  int
	path   string
	ct     string
	header http.Header
	body   []byte
}

// http1Server serves the fake services as Connect (through vanguard, as the server does) and
// records every request; tlsOn serves TLS offering h2 and http/1.1.
type http1Server struct {
	*httptest.Server
	svc   *fakeServices
	mu    sync.Mutex
	calls []wireCall
}

func newHTTP1Server(t *testing.T, tlsOn bool) *http1Server {
	t.Helper()
	g := grpc.NewServer()
	svc := &fakeServices{}
	registrypb.RegisterRegistryServiceServer(g, svc)
	routerpb.RegisterRouterServiceServer(g, svc)
	toolpb.RegisterToolServiceServer(g, svc)
	tc, err := vanguardgrpc.NewTranscoder(g)
	require.NoError(t, err)
	s := &http1Server{svc: svc}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		s.mu.Lock()
		s.calls = append(s.calls, wireCall{proto: r.ProtoMajor, path: r.URL.Path, ct: r.Header.Get("Content-Type"), header: r.Header.Clone(), body: body})
		s.mu.Unlock()
		tc.ServeHTTP(w, r)
	}))
	if tlsOn {
		s.EnableHTTP2 = true // offered; the client must still choose HTTP/1.1
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

func (s *http1Server) wire() []wireCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]wireCall(nil), s.calls...)
}

func (s *http1Server) addr() string {
	return strings.TrimPrefix(strings.TrimPrefix(s.URL, "http://"), "https://")
}

// message is the request message's bytes in a call's body: the body of a unary call, the
// payload of the first envelope of a stream.
func (c wireCall) message(t *testing.T) []byte {
	t.Helper()
	if !strings.HasPrefix(c.ct, "application/connect+") {
		return c.body
	}
	require.GreaterOrEqual(t, len(c.body), 5)
	require.Zero(t, c.body[0], "the request is not compressed")
	n := binary.BigEndian.Uint32(c.body[1:5])
	require.GreaterOrEqual(t, len(c.body)-5, int(n))
	return c.body[5 : 5+n]
}

func dialHTTP1(t *testing.T, addr string, opts ...grpc.DialOption) *sdk.Agent {
	t.Helper()
	a, err := sdk.Dial(addr, "agent-1", append([]grpc.DialOption{sdk.WithHTTP1(), sdk.WithoutSigning()}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// TestHTTP1SignsTheBytesItSends: every call of an agent dialled WithHTTP1 travels over
// HTTP/1.1 as Connect with binary protobuf, and its signature verifies over exactly the
// message bytes the server received — the body of a unary call, the first envelope's payload
// of a stream — with the agent's key.
func TestHTTP1SignsTheBytesItSends(t *testing.T) {
	srv := newHTTP1Server(t, false)
	pub, priv, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	a := dialHTTP1(t, srv.addr(), sdk.WithSigningKey(priv))
	ctx := context.Background()
	assert.Nil(t, a.Conn(), "no gRPC connection over HTTP/1.1")

	require.NoError(t, a.Register(ctx, &registrypb.AgentDescriptor{Name: "one"}))
	st, err := a.Receive(ctx)
	require.NoError(t, err)
	for range 2 {
		_, err := st.Next()
		require.NoError(t, err)
	}
	ts, err := tool.New(a).Stream(ctx, tool.Call{ProviderID: "builtin", ToolName: "echo"})
	require.NoError(t, err)
	for {
		if _, err := ts.Recv(); err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
	}

	calls := srv.wire()
	require.Len(t, calls, 3)
	for _, c := range calls {
		assert.Equal(t, 1, c.proto, "%s over HTTP/1.1", c.path)
		assert.Contains(t, []string{"application/proto", "application/connect+proto"}, c.ct, c.path)
		call, sig, err := signing.Parse(c.header.Get)
		require.NoError(t, err, c.path)
		call.Method, call.Body = c.path, c.message(t)
		assert.Equal(t, "agent-1", call.AgentID)
		assert.NoError(t, signing.Verify(pub, call, sig), "the signature of %s covers the bytes sent", c.path)
	}
	assert.Equal(t, "/sw4rm.registry.RegistryService/RegisterAgent", calls[0].path)
	assert.Equal(t, "application/proto", calls[0].ct)
	assert.Equal(t, "application/connect+proto", calls[1].ct, "StreamIncoming is a Connect stream")
}

// TestHTTP1MetadataHeadersTrailers: outgoing metadata (binary too) reach the server as its
// metadata, and grpc.Header and grpc.Trailer get the server's header and trailer.
func TestHTTP1MetadataHeadersTrailers(t *testing.T) {
	srv := newHTTP1Server(t, false)
	a := dialHTTP1(t, srv.addr())
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-echo", "e1", "x-bin-bin", "\x00\xfe")
	var header, trailer metadata.MD
	resp, err := registrypb.NewRegistryServiceClient(a.ClientConn()).RegisterAgent(ctx,
		&registrypb.RegisterAgentRequest{Agent: &registrypb.AgentDescriptor{AgentId: "agent-1", Name: "one"}}, grpc.Header(&header), grpc.Trailer(&trailer))
	require.NoError(t, err)
	assert.True(t, resp.GetAccepted())
	md := srv.svc.lastMD()
	assert.Equal(t, []string{"e1"}, md.Get("x-echo"))
	assert.Equal(t, []string{"\x00\xfe"}, md.Get("x-bin-bin"))
	assert.Equal(t, []string{"h1"}, header.Get("x-head"))
	assert.Equal(t, []string{"\x00\x01\xff"}, header.Get("x-raw-bin"))
	assert.Equal(t, []string{"t1"}, trailer.Get("x-tail"))
	assert.Empty(t, header.Get("content-type"), "the protocol's own headers are not metadata")
}

// TestHTTP1ErrorsAreGRPCStatuses: a refusal is the gRPC status it was on the server — code,
// message, details — and its trailer carries sw4rm-error-code; a deadline reaches the
// server and ends the call with DeadlineExceeded.
func TestHTTP1ErrorsAreGRPCStatuses(t *testing.T) {
	srv := newHTTP1Server(t, false)
	a := dialHTTP1(t, srv.addr())
	var trailer metadata.MD
	_, err := registrypb.NewRegistryServiceClient(a.ClientConn()).RegisterAgent(context.Background(),
		&registrypb.RegisterAgentRequest{Agent: &registrypb.AgentDescriptor{AgentId: "agent-1", Name: "refuse"}}, grpc.Trailer(&trailer))
	st, ok := status.FromError(err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, codes.InvalidArgument, st.Code())
	assert.Equal(t, "validation_error: the name is refused", st.Message())
	require.Len(t, st.Details(), 1)
	te, ok := st.Details()[0].(*toolpb.ToolError)
	require.True(t, ok, "%T", st.Details()[0])
	assert.Equal(t, "VALIDATION_ERROR", te.GetErrorCode())
	assert.Equal(t, []string{"VALIDATION_ERROR"}, trailer.Get(wire.ErrorCodeTrailer))
	assert.Equal(t, codes.InvalidArgument, status.Code(a.Register(context.Background(), &registrypb.AgentDescriptor{Name: "refuse"})), "the SDK's own calls keep the code")

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = a.Heartbeat(ctx, commonpb.AgentState_RUNNING, nil)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
	assert.Less(t, time.Since(start), 5*time.Second)
	srv.svc.mu.Lock()
	assert.True(t, srv.svc.deadline, "the deadline travels to the server")
	srv.svc.mu.Unlock()
}

// TestHTTP1StreamsSkipKeepAlives: Stream.Next and tool streams skip the empty items the
// server sends a silent stream over HTTP/1.1, and ResumeAfter sends sw4rm-resume-after.
func TestHTTP1StreamsSkipKeepAlives(t *testing.T) {
	srv := newHTTP1Server(t, false)
	a := dialHTTP1(t, srv.addr())
	ctx := context.Background()
	st, err := a.ResumeAfter(ctx, 7)
	require.NoError(t, err)
	defer st.Close()
	var seqs []int64
	for {
		d, err := st.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		require.NotNil(t, d.Envelope)
		seqs = append(seqs, d.Seq)
	}
	assert.Equal(t, []int64{1, 2}, seqs)
	assert.Equal(t, []string{"7"}, srv.svc.lastMD().Get(wire.ResumeAfterKey))

	ts, err := tool.New(a).Stream(ctx, tool.Call{CallID: "c1", ProviderID: "builtin", ToolName: "echo"})
	require.NoError(t, err)
	var frames []uint64
	for {
		f, err := ts.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		frames = append(frames, f.GetFrameNo())
	}
	assert.Equal(t, []uint64{1, 2}, frames)
}

// TestHTTP1CloseEndsStreams: a stream opens at once even while the server is silent (as a
// gRPC stream does; the server's answer comes with its first message), closing the agent
// ends the open stream, and later calls fail.
func TestHTTP1CloseEndsStreams(t *testing.T) {
	srv := newHTTP1Server(t, false)
	a := dialHTTP1(t, srv.addr())
	start := time.Now()
	st, err := a.Receive(metadata.AppendToOutgoingContext(context.Background(), "x-hold", "1"))
	require.NoError(t, err)
	assert.Less(t, time.Since(start), holdFirst/2, "Receive does not wait for the first delivery")
	d, err := st.Next()
	require.NoError(t, err)
	assert.Equal(t, int64(1), d.Seq)
	done := make(chan error, 1)
	go func() { _, err := st.Next(); done <- err }()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, a.Close())
	select {
	case err := <-done:
		assert.Equal(t, codes.Canceled, status.Code(err), "%v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the stream outlived Close")
	}
	assert.Equal(t, codes.Canceled, status.Code(a.Heartbeat(context.Background(), commonpb.AgentState_RUNNING, nil)))
}

// TestHTTP1OverTLS: with TLS the client offers only http/1.1 in ALPN, so a server that offers
// h2 too is still spoken to over HTTP/1.1.
func TestHTTP1OverTLS(t *testing.T) {
	srv := newHTTP1Server(t, true)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	a := dialHTTP1(t, srv.addr(), sdk.WithTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	require.NoError(t, a.Register(context.Background(), &registrypb.AgentDescriptor{Name: "one"}))
	calls := srv.wire()
	require.Len(t, calls, 1)
	assert.Equal(t, 1, calls[0].proto)
}

// TestTransportFromEnv: SW4RM_TRANSPORT=http1 makes Dial use HTTP/1.1, WithGRPC overrides it,
// and an unknown value fails Dial.
func TestTransportFromEnv(t *testing.T) {
	srv := newHTTP1Server(t, false)
	t.Setenv(sdk.EnvTransport, "http1")
	a, err := sdk.Dial(srv.addr(), "agent-1", sdk.WithoutSigning())
	require.NoError(t, err)
	defer func() { _ = a.Close() }()
	assert.Nil(t, a.Conn())
	require.NoError(t, a.Register(context.Background(), &registrypb.AgentDescriptor{Name: "one"}))
	assert.Equal(t, 1, srv.wire()[0].proto)

	g, err := sdk.Dial(srv.addr(), "agent-1", sdk.WithoutSigning(), sdk.WithGRPC())
	require.NoError(t, err)
	assert.NotNil(t, g.Conn(), "WithGRPC wins over the environment")
	_ = g.Close()

	t.Setenv(sdk.EnvTransport, "carrier-pigeon")
	_, err = sdk.Dial(srv.addr(), "agent-1", sdk.WithoutSigning())
	assert.ErrorContains(t, err, sdk.EnvTransport)
}

// TestHTTP1UnaryThroughStreamAPI: a unary call made through NewStream (to read its header
// apart from its answer) is made as a Connect unary call: Header, the answer, io.EOF, the
// trailer; a refusal is its status from Header and RecvMsg alike.
func TestHTTP1UnaryThroughStreamAPI(t *testing.T) {
	srv := newHTTP1Server(t, false)
	a := dialHTTP1(t, srv.addr())
	call := func(name string) grpc.ClientStream {
		cs, err := a.ClientConn().NewStream(context.Background(), &grpc.StreamDesc{StreamName: "RegisterAgent"}, registrypb.RegistryService_RegisterAgent_FullMethodName)
		require.NoError(t, err)
		require.NoError(t, cs.SendMsg(&registrypb.RegisterAgentRequest{Agent: &registrypb.AgentDescriptor{AgentId: "agent-1", Name: name}}))
		require.NoError(t, cs.CloseSend())
		return cs
	}
	cs := call("one")
	md, err := cs.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{"h1"}, md.Get("x-head"))
	var resp registrypb.RegisterAgentResponse
	require.NoError(t, cs.RecvMsg(&resp))
	assert.True(t, resp.GetAccepted())
	assert.ErrorIs(t, cs.RecvMsg(&resp), io.EOF)
	assert.Equal(t, []string{"t1"}, cs.Trailer().Get("x-tail"))
	assert.Equal(t, "application/proto", srv.wire()[0].ct, "a Connect unary call")

	cs = call("refuse")
	_, err = cs.Header()
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.Equal(t, codes.InvalidArgument, status.Code(cs.RecvMsg(&resp)))
	assert.Equal(t, []string{"VALIDATION_ERROR"}, cs.Trailer().Get(wire.ErrorCodeTrailer))
}
