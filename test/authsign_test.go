package test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/protocol/signing"
)

// A client that signs its calls (§6.2) the way docs/security.md specifies, written here from
// the mechanism alone so the server is checked against the specification, not against the
// SDK's own code.

// preEncoded is a request already marshalled: the bytes that were signed are the bytes sent.
type preEncoded []byte

// signingCodec sends preEncoded as it is and everything else as protobuf.
type signingCodec struct{ proto encoding.CodecV2 }

func (c signingCodec) Name() string { return "proto" }

func (c signingCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(preEncoded); ok {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return c.proto.Marshal(v)
}

func (c signingCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

// testSigner signs as one agent; tamper, when set, changes the body after signing.
type testSigner struct {
	agent string
	key   ed25519.PrivateKey
	// p256, when set, signs with ECDSA P-256 instead of key (§6.2's alternative).
	p256 *ecdsa.PrivateKey
	// at is the signing clock (time.Now when nil).
	at func() time.Time
	// mu guards lastMD: one signed agent may make calls from several goroutines.
	mu sync.Mutex
	// lastMD is the metadata of the last signed call, to replay it (last).
	lastMD metadata.MD
	// replay, when set, is sent instead of fresh signing metadata.
	replay metadata.MD
}

func nonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (s *testSigner) sign(ctx context.Context, method string, body []byte) context.Context {
	if s.replay != nil {
		return metadata.NewOutgoingContext(ctx, metadata.Join(s.replay, mdOut(ctx)))
	}
	at := time.Now()
	if s.at != nil {
		at = s.at()
	}
	call := signing.Call{Method: method, AgentID: s.agent, Timestamp: at, Nonce: nonce(), Body: body}
	var md metadata.MD
	if s.p256 != nil {
		m, err := signing.SignP256(s.p256, call)
		if err != nil {
			panic(err)
		}
		md = metadata.New(m)
	} else {
		md = metadata.New(signing.Sign(s.key, call))
	}
	s.mu.Lock()
	s.lastMD = md
	s.mu.Unlock()
	return metadata.NewOutgoingContext(ctx, metadata.Join(md, mdOut(ctx)))
}

// last returns the metadata of the last signed call.
func (s *testSigner) last() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastMD
}

func mdOut(ctx context.Context) metadata.MD {
	md, _ := metadata.FromOutgoingContext(ctx)
	return md
}

// dialOptions makes every call of the connection signed by s.
func (s *testSigner) dialOptions() []grpc.DialOption {
	codec := signingCodec{proto: encoding.GetCodecV2("proto")}
	unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		body, err := proto.Marshal(req.(proto.Message))
		if err != nil {
			return err
		}
		return invoker(s.sign(ctx, method, body), method, preEncoded(body), reply, cc, append(opts, grpc.ForceCodecV2(codec))...)
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return &lazyStream{ctx: ctx, open: func(ctx context.Context, body []byte) (grpc.ClientStream, error) {
			return streamer(s.sign(ctx, method, body), desc, cc, method, append(opts, grpc.ForceCodecV2(codec))...)
		}}, nil
	}
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(unary), grpc.WithChainStreamInterceptor(stream)}
}

// lazyStream opens a server-streaming call at its one request, whose bytes the signature in
// the call's metadata covers.
type lazyStream struct {
	grpc.ClientStream
	ctx  context.Context
	open func(ctx context.Context, body []byte) (grpc.ClientStream, error)
}

func (l *lazyStream) SendMsg(m any) error {
	body, err := proto.Marshal(m.(proto.Message))
	if err != nil {
		return err
	}
	cs, err := l.open(l.ctx, body)
	if err != nil {
		return err
	}
	l.ClientStream = cs
	return cs.SendMsg(preEncoded(body))
}

func (l *lazyStream) Context() context.Context { return l.ctx }
