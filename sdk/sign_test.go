package sdk

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
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
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/signing"
	"github.com/sw4rm/sw4rm-temporal/protocol/signing/signingtest"
)

const signedAgent = "signer-1"

// verifyingServer is an in-process gRPC server whose codec hashes each request's wire bytes
// and whose interceptors verify every call (signingtest), with just enough of the registry,
// router and tool services to exercise the SDK.
type verifyingServer struct {
	registrypb.UnimplementedRegistryServiceServer
	routerpb.UnimplementedRouterServiceServer
	toolpb.UnimplementedToolServiceServer

	v    *signingtest.Verifier
	addr string

	mu         sync.Mutex
	registered []*registrypb.AgentDescriptor
	streamedAs []string // the verified agent of each stream, as its handler saw it
	rejectNext bool     // refuse the next registration
}

func startVerifying(t *testing.T, required bool) *verifyingServer {
	t.Helper()
	s := &verifyingServer{v: signingtest.NewVerifier(required)}
	g := grpc.NewServer(s.v.ServerOptions()...)
	registrypb.RegisterRegistryServiceServer(g, s)
	routerpb.RegisterRouterServiceServer(g, s)
	toolpb.RegisterToolServiceServer(g, s)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s.addr = l.Addr().String()
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	return s
}

// RegisterAgent records the descriptor; a verified agent that registers a key it does not
// hold yet rotates to it (the server's rule, in miniature).
func (s *verifyingServer) RegisterAgent(ctx context.Context, req *registrypb.RegisterAgentRequest) (*registrypb.RegisterAgentResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rejectNext {
		s.rejectNext = false
		return &registrypb.RegisterAgentResponse{Reason: "validation_error: not today"}, nil
	}
	s.registered = append(s.registered, proto.Clone(req.GetAgent()).(*registrypb.AgentDescriptor))
	if agent, ok := signingtest.AgentFrom(ctx); ok && agent == req.GetAgent().GetAgentId() && len(req.GetAgent().GetPublicKey()) == ed25519.PublicKeySize {
		s.v.AddKey(agent, req.GetAgent().GetPublicKey())
	}
	return &registrypb.RegisterAgentResponse{Accepted: true}, nil
}

func (s *verifyingServer) Heartbeat(context.Context, *registrypb.HeartbeatRequest) (*registrypb.HeartbeatResponse, error) {
	return &registrypb.HeartbeatResponse{Ok: true}, nil
}

func (s *verifyingServer) SendMessage(context.Context, *routerpb.SendMessageRequest) (*routerpb.SendMessageResponse, error) {
	return &routerpb.SendMessageResponse{Accepted: true}, nil
}

func (s *verifyingServer) StreamIncoming(req *routerpb.StreamRequest, stream grpc.ServerStreamingServer[routerpb.StreamItem]) error {
	agent, _ := signingtest.AgentFrom(stream.Context())
	s.mu.Lock()
	s.streamedAs = append(s.streamedAs, agent)
	s.mu.Unlock()
	if err := stream.SendHeader(metadata.Pairs("x-served-to", req.GetAgentId())); err != nil {
		return err
	}
	return stream.Send(&routerpb.StreamItem{Seq: 7, Msg: &commonpb.Envelope{MessageId: "m-1"}})
}

func (s *verifyingServer) CallStream(call *toolpb.ToolCall, stream grpc.ServerStreamingServer[toolpb.ToolFrame]) error {
	return stream.Send(&toolpb.ToolFrame{CallId: call.GetCallId()})
}

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	return priv
}

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// dialSigned dials the server as signedAgent with key (only SDK options: the insecure default
// applies).
func dialSigned(t *testing.T, s *verifyingServer, opts ...grpc.DialOption) *Agent {
	t.Helper()
	a, err := Dial(s.addr, signedAgent, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	return a
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestSignedUnaryCallsVerify: with a key, Register (which registers the signer's public
// key), Heartbeat and Send are signed, and the server verifies each over the bytes it
// received — which are exactly proto.Marshal of the request.
func TestSignedUnaryCallsVerify(t *testing.T) {
	s := startVerifying(t, true)
	key := newKey(t)
	s.v.AddKey(signedAgent, pubOf(key))
	a := dialSigned(t, s, WithSigningKey(key))
	ctx := ctxT(t)

	require.NoError(t, a.Register(ctx, &registrypb.AgentDescriptor{Capabilities: []string{"x"}}))
	require.NoError(t, a.Heartbeat(ctx, commonpb.AgentState_RUNNABLE, nil))
	_, err := a.Send(ctx, Message{To: "other", Payload: []byte(`{"n":1}`)})
	require.NoError(t, err)

	s.mu.Lock()
	require.Len(t, s.registered, 1)
	assert.Equal(t, []byte(pubOf(key)), s.registered[0].GetPublicKey(), "Register filled public_key from the signer")
	s.mu.Unlock()

	calls := s.v.Calls()
	require.Len(t, calls, 3)
	nonces := map[string]bool{}
	for _, c := range calls {
		require.NoError(t, c.Err, c.Method)
		assert.True(t, c.Signed, c.Method)
		assert.Equal(t, signedAgent, c.Agent)
		assert.Len(t, c.Nonce, 22, "16 random bytes, base64url without padding")
		nonces[c.Nonce] = true
	}
	assert.Len(t, nonces, 3, "a fresh nonce per call")
	assert.Equal(t, "/sw4rm.registry.RegistryService/Heartbeat", calls[1].Method)
	want, err := proto.Marshal(&registrypb.HeartbeatRequest{AgentId: signedAgent, State: commonpb.AgentState_RUNNABLE})
	require.NoError(t, err)
	assert.Equal(t, sha256.Sum256(want), calls[1].Digest, "the server hashed the request's bytes as marshalled once")
}

// TestSignedStreamsVerify: both server-streaming RPCs are signed over their one request and
// verified; the stream's header, messages and the handler's principal come through.
func TestSignedStreamsVerify(t *testing.T) {
	s := startVerifying(t, true)
	key := newKey(t)
	s.v.AddKey(signedAgent, pubOf(key))
	a := dialSigned(t, s, WithSigningKey(key))
	ctx := ctxT(t)

	st, err := a.Receive(ctx)
	require.NoError(t, err)
	defer st.Close()
	d, err := st.Next()
	require.NoError(t, err)
	assert.Equal(t, int64(7), d.Seq)
	hdr, err := st.stream.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{signedAgent}, hdr.Get("x-served-to"))

	tools := toolpb.NewToolServiceClient(a.Conn())
	ts, err := tools.CallStream(ctx, &toolpb.ToolCall{CallId: "c-1", ToolName: "grep"})
	require.NoError(t, err)
	f, err := ts.Recv()
	require.NoError(t, err)
	assert.Equal(t, "c-1", f.GetCallId())

	calls := s.v.Calls()
	require.Len(t, calls, 2)
	assert.Equal(t, "/sw4rm.router.RouterService/StreamIncoming", calls[0].Method)
	assert.Equal(t, "/sw4rm.tool.ToolService/CallStream", calls[1].Method)
	for _, c := range calls {
		require.NoError(t, c.Err, c.Method)
		assert.True(t, c.Signed)
	}
	body, err := proto.Marshal(&routerpb.StreamRequest{AgentId: signedAgent})
	require.NoError(t, err)
	assert.Equal(t, sha256.Sum256(body), calls[0].Digest, "the stream's signature covers its request's bytes")
	s.mu.Lock()
	assert.Equal(t, []string{signedAgent}, s.streamedAs, "the handler saw the verified agent")
	s.mu.Unlock()
}

// tamperUnary and tamperStream sit inside the signer and change one byte of the signed
// request before it is sent, as a man in the middle would.
func tamperUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	tamper(req)
	return invoker(ctx, method, req, reply, cc, opts...)
}

func tamperStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	return tamperingStream{cs}, err
}

type tamperingStream struct{ grpc.ClientStream }

func (s tamperingStream) SendMsg(m any) error {
	tamper(m)
	return s.ClientStream.SendMsg(m)
}

// tamper changes the last byte of a pre-encoded request: the agent id's last letter.
func tamper(m any) {
	if p, ok := m.(*preEncoded); ok {
		b := append([]byte(nil), p.body...)
		b[len(b)-1] ^= 0x01
		p.body = b
	}
}

// TestTamperedBodyIsRefused: a request changed after it was signed fails verification,
// unary and streaming, while the same calls untampered pass.
func TestTamperedBodyIsRefused(t *testing.T) {
	s := startVerifying(t, true)
	key := newKey(t)
	s.v.AddKey(signedAgent, pubOf(key))
	signer, err := NewSigner(signedAgent, key)
	require.NoError(t, err)
	ctx := ctxT(t)
	for _, tampered := range []bool{false, true} {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithChainUnaryInterceptor(signer.UnaryClientInterceptor()), grpc.WithChainStreamInterceptor(signer.StreamClientInterceptor())}
		if tampered {
			opts = append(opts, grpc.WithChainUnaryInterceptor(tamperUnary), grpc.WithChainStreamInterceptor(tamperStream))
		}
		conn, err := grpc.NewClient(s.addr, opts...)
		require.NoError(t, err)
		_, uerr := registrypb.NewRegistryServiceClient(conn).Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: signedAgent})
		st, serr := routerpb.NewRouterServiceClient(conn).StreamIncoming(ctx, &routerpb.StreamRequest{AgentId: signedAgent})
		if serr == nil {
			_, serr = st.Recv()
		}
		_ = conn.Close()
		if !tampered {
			require.NoError(t, uerr)
			require.NoError(t, serr)
			continue
		}
		assert.Equal(t, codes.Unauthenticated, status.Code(uerr), "unary: %v", uerr)
		assert.Equal(t, codes.Unauthenticated, status.Code(serr), "stream: %v", serr)
	}
	calls := s.v.Calls()
	require.Len(t, calls, 4)
	assert.NoError(t, calls[0].Err)
	assert.NoError(t, calls[1].Err)
	assert.ErrorIs(t, calls[2].Err, signing.ErrBadSignature)
	assert.ErrorIs(t, calls[3].Err, signing.ErrBadSignature)
}

// TestUnsignedCallsUnchanged: without a key the SDK sends no signing metadata and registers
// no key; a server that requires signatures refuses such calls, one that does not serves
// them.
func TestUnsignedCallsUnchanged(t *testing.T) {
	t.Setenv(KeyFileEnv, "")
	for _, required := range []bool{false, true} {
		s := startVerifying(t, required)
		a := dialSigned(t, s)
		require.Nil(t, a.Signer())
		ctx := ctxT(t)
		rerr := a.Register(ctx, nil)
		herr := a.Heartbeat(ctx, commonpb.AgentState_RUNNABLE, nil)
		st, serr := a.Receive(ctx)
		if serr == nil {
			_, serr = st.Next()
			st.Close()
		}
		if required {
			assert.Equal(t, codes.Unauthenticated, status.Code(rerr))
			assert.Equal(t, codes.Unauthenticated, status.Code(herr))
			assert.Equal(t, codes.Unauthenticated, status.Code(serr))
		} else {
			require.NoError(t, rerr)
			require.NoError(t, herr)
			require.NoError(t, serr)
			s.mu.Lock()
			assert.Empty(t, s.registered[0].GetPublicKey())
			s.mu.Unlock()
		}
		for _, c := range s.v.Calls() {
			assert.False(t, c.Signed, c.Method)
		}
		require.Len(t, s.v.Calls(), 3)
		assert.ErrorContains(t, a.RotateKey(ctx, newKey(t)), "does not sign")
	}
}

// TestRotateKey: the rotation registers the new public key in a call signed with the old
// one, then signs with the new; the old key can go and calls still verify. A refused
// rotation keeps the old key.
func TestRotateKey(t *testing.T) {
	s := startVerifying(t, true)
	oldKey, nextKey := newKey(t), newKey(t)
	s.v.AddKey(signedAgent, pubOf(oldKey))
	a := dialSigned(t, s, WithSigningKey(oldKey))
	ctx := ctxT(t)

	require.ErrorContains(t, a.RotateKey(ctx, nextKey), "register the agent first")
	require.NoError(t, a.Register(ctx, &registrypb.AgentDescriptor{Capabilities: []string{"plan"}}))

	s.mu.Lock()
	s.rejectNext = true
	s.mu.Unlock()
	err := a.RotateKey(ctx, nextKey)
	require.Error(t, err)
	assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, CodeOf(err))
	assert.Equal(t, pubOf(oldKey), a.Signer().PublicKey(), "a refused rotation keeps the old key")

	// The verifier knows only the old key: the rotation is admitted only if the old key
	// signed it.
	require.NoError(t, a.RotateKey(ctx, nextKey))
	assert.Equal(t, pubOf(nextKey), a.Signer().PublicKey())
	s.mu.Lock()
	last := s.registered[len(s.registered)-1]
	assert.Equal(t, []byte(pubOf(nextKey)), last.GetPublicKey())
	assert.Equal(t, []string{"plan"}, last.GetCapabilities(), "the rotation registers the same descriptor")
	s.mu.Unlock()

	s.v.RemoveKey(signedAgent, pubOf(oldKey)) // the overlap window ends
	require.NoError(t, a.Heartbeat(ctx, commonpb.AgentState_RUNNABLE, nil))
	for _, c := range s.v.Calls() {
		require.NoError(t, c.Err, c.Method)
	}

	// And the check is real: an agent still on the old key is now refused.
	stale := dialSigned(t, s, WithSigningKey(oldKey))
	assert.Equal(t, codes.Unauthenticated, status.Code(stale.Heartbeat(ctx, commonpb.AgentState_RUNNABLE, nil)))
}

// TestKeyOptions: a key from a value, a file or SW4RM_AGENT_KEY_FILE, in that order of
// precedence; WithoutSigning ignores the variable; an unreadable key fails Dial.
func TestKeyOptions(t *testing.T) {
	s := startVerifying(t, false)
	dir := t.TempDir()
	write := func(name string, k ed25519.PrivateKey) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(hex.EncodeToString(k.Seed())+"\n"), 0o600))
		return p
	}
	envKey, fileKey, valueKey := newKey(t), newKey(t), newKey(t)
	envPath, filePath := write("env.key", envKey), write("file.key", fileKey)

	t.Setenv(KeyFileEnv, envPath)
	assert.Equal(t, pubOf(envKey), dialSigned(t, s).Signer().PublicKey())
	assert.Equal(t, pubOf(fileKey), dialSigned(t, s, WithKeyFile(filePath)).Signer().PublicKey())
	assert.Equal(t, pubOf(valueKey), dialSigned(t, s, WithKeyFile(filePath), WithSigningKey(valueKey)).Signer().PublicKey())
	assert.Nil(t, dialSigned(t, s, WithoutSigning()).Signer())
	assert.Equal(t, pubOf(fileKey), dialSigned(t, s, WithoutSigning(), WithKeyFile(filePath)).Signer().PublicKey())

	bad := filepath.Join(dir, "bad.key")
	require.NoError(t, os.WriteFile(bad, []byte("not a key"), 0o600))
	_, err := Dial(s.addr, signedAgent, WithKeyFile(bad))
	assert.ErrorContains(t, err, "bad.key")
	t.Setenv(KeyFileEnv, filepath.Join(dir, "missing.key"))
	_, err = Dial(s.addr, signedAgent)
	assert.ErrorIs(t, err, os.ErrNotExist)
	_, err = Dial(s.addr, signedAgent, WithSigningKey(ed25519.PrivateKey("short")))
	assert.Error(t, err)
}

// TestSignerSign: the metadata parses and verifies over the body with the signer's key.
func TestSignerSign(t *testing.T) {
	key := newKey(t)
	s, err := NewSigner("a-1", key)
	require.NoError(t, err)
	kv, err := s.Sign("/sw4rm.registry.RegistryService/Heartbeat", []byte{0x0a, 0x03, 'a', '-', '1'})
	require.NoError(t, err)
	md := metadata.Pairs(kv...)
	c, sig, err := signing.Parse(func(k string) string { return md.Get(k)[0] })
	require.NoError(t, err)
	assert.Equal(t, "a-1", c.AgentID)
	assert.WithinDuration(t, time.Now(), c.Timestamp, time.Hour)
	c.Method, c.Body = "/sw4rm.registry.RegistryService/Heartbeat", []byte{0x0a, 0x03, 'a', '-', '1'}
	require.NoError(t, signing.Verify(pubOf(key), c, sig))
	raw, err := base64.RawURLEncoding.DecodeString(c.Nonce)
	require.NoError(t, err)
	assert.Len(t, raw, 16)

	_, err = NewSigner("", key)
	assert.Error(t, err)
	assert.Error(t, s.SetKey(key[:10]))
	assert.Equal(t, pubOf(key), s.PublicKey(), "a refused key changes nothing")
}

// TestSetKeyConcurrent: calls in flight while the key is swapped each verify with the key
// they were signed with (run with -race to check the swap).
func TestSetKeyConcurrent(t *testing.T) {
	s := startVerifying(t, true)
	k1, k2 := newKey(t), newKey(t)
	s.v.AddKey(signedAgent, pubOf(k1))
	s.v.AddKey(signedAgent, pubOf(k2))
	a := dialSigned(t, s, WithSigningKey(k1))
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 4 {
		wg.Go(func() {
			for range 10 {
				errs <- a.Heartbeat(ctx, commonpb.AgentState_RUNNABLE, nil)
			}
		})
		wg.Go(func() {
			if i%2 == 0 {
				_ = a.Signer().SetKey(k2)
			} else {
				_ = a.Signer().SetKey(k1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, s.v.Calls(), 40)
}

// TestLazyStream: before its first SendMsg a signed stream has the call's context and no
// trailer, Header waits for it to open, RecvMsg gives up with the call's context, and a
// stream that cannot open says why everywhere.
func TestLazyStream(t *testing.T) {
	s := startVerifying(t, true)
	key := newKey(t)
	s.v.AddKey(signedAgent, pubOf(key))
	a := dialSigned(t, s, WithSigningKey(key))
	desc := &routerpb.RouterService_ServiceDesc.Streams[0]
	method := "/sw4rm.router.RouterService/StreamIncoming"

	type ctxKey struct{}
	ctx := context.WithValue(ctxT(t), ctxKey{}, "mine")
	cs, err := a.Conn().NewStream(ctx, desc, method)
	require.NoError(t, err)
	assert.Equal(t, "mine", cs.Context().Value(ctxKey{}))
	assert.Nil(t, cs.Trailer())
	headers := make(chan metadata.MD, 1)
	go func() {
		h, _ := cs.Header()
		headers <- h
	}()
	select {
	case <-headers:
		t.Fatal("Header returned before the stream opened")
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, cs.SendMsg(&routerpb.StreamRequest{AgentId: signedAgent}))
	require.NoError(t, cs.CloseSend())
	assert.Equal(t, []string{signedAgent}, (<-headers).Get("x-served-to"))
	var item routerpb.StreamItem
	require.NoError(t, cs.RecvMsg(&item))
	assert.Equal(t, "m-1", item.GetMsg().GetMessageId())
	assert.Equal(t, "mine", cs.Context().Value(ctxKey{}), "the real stream's context keeps the call's values")

	// RecvMsg before anything was sent waits — until the call's context ends.
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	idle, err := a.Conn().NewStream(short, desc, method)
	require.NoError(t, err)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(idle.RecvMsg(&item)))

	// A stream whose context is already over cannot open: every method says so.
	gone, cancelGone := context.WithCancel(context.Background())
	cancelGone()
	dead, err := a.Conn().NewStream(gone, desc, method)
	require.NoError(t, err, "the stream opens lazily, so NewStream itself succeeds")
	sendErr := dead.SendMsg(&routerpb.StreamRequest{AgentId: signedAgent})
	assert.Equal(t, codes.Canceled, status.Code(sendErr))
	assert.Equal(t, codes.Canceled, status.Code(dead.RecvMsg(&item)))
	_, herr := dead.Header()
	assert.Equal(t, codes.Canceled, status.Code(herr))
	assert.Nil(t, dead.Trailer())
	assert.Equal(t, codes.Canceled, status.Code(dead.CloseSend()))

	// CloseSend first opens the stream with no request; nothing can be sent after it.
	empty, err := a.Conn().NewStream(ctxT(t), desc, method)
	require.NoError(t, err)
	require.NoError(t, empty.CloseSend())
	assert.Error(t, empty.SendMsg(&routerpb.StreamRequest{AgentId: signedAgent}))
	assert.Error(t, empty.RecvMsg(&item), "the server got no request")
}
