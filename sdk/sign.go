package sdk

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec signedCodec delegates to
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/protocol/signing"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// How the SDK signs (§6.2; the mechanism is protocol/signing, docs/signing.md):
//
//   - A unary call's request is marshalled once, here; those bytes are signed and exactly
//     those bytes are sent (signedCodec passes them through), so the digest the server takes
//     of what arrives is the digest that was signed — never a second encoding that a future
//     protobuf library might order differently.
//   - A stream's signature covers its first request message, but gRPC sends metadata when a
//     stream opens, before any message. So the SDK's stream is lazy: the real stream opens on
//     the first SendMsg, with the metadata of that message's signature. RouterService's
//     StreamIncoming and ToolService's CallStream send one request and are opened that way by
//     their generated clients.
//   - Every call on a connection dialled with a key is signed as the agent; a connection
//     without a key is unchanged. A call whose context already carries sw4rm-signature is
//     sent as it is, so a caller can sign one by hand.

// KeyFileEnv names the environment variable Dial reads an agent's key file from when no key
// option is given (see auth.LoadPrivateKey for the file's forms).
const KeyFileEnv = "SW4RM_AGENT_KEY_FILE"

// Signer signs calls as one agent with its Ed25519 private key. Its key can be replaced at
// any time (SetKey), which is how a rotation takes effect; calls in flight keep the key they
// were signed with. It is safe for concurrent use.
type Signer struct {
	agentID string
	key     atomic.Pointer[ed25519.PrivateKey]
	now     func() time.Time
}

// NewSigner returns a signer for agentID holding key.
func NewSigner(agentID string, key ed25519.PrivateKey) (*Signer, error) {
	if agentID == "" {
		return nil, errors.New("sw4rm: a signer needs an agent id")
	}
	s := &Signer{agentID: agentID, now: time.Now}
	if err := s.SetKey(key); err != nil {
		return nil, err
	}
	return s, nil
}

// AgentID is the agent the signer signs as.
func (s *Signer) AgentID() string { return s.agentID }

// SetKey makes key the one every call from now on is signed with.
func (s *Signer) SetKey(key ed25519.PrivateKey) error {
	if len(key) != ed25519.PrivateKeySize {
		return fmt.Errorf("sw4rm: an Ed25519 private key is %d bytes, not %d", ed25519.PrivateKeySize, len(key))
	}
	k := append(ed25519.PrivateKey(nil), key...) // the caller may reuse its slice
	s.key.Store(&k)
	return nil
}

// PublicKey is the public half of the current key, the one AgentDescriptor.public_key
// registers.
func (s *Signer) PublicKey() ed25519.PublicKey {
	return (*s.key.Load()).Public().(ed25519.PublicKey)
}

// Sign returns the signing metadata of a call to method whose request travels as body, as
// key/value pairs for metadata.AppendToOutgoingContext.
func (s *Signer) Sign(method string, body []byte) ([]string, error) {
	nonce, err := newNonce()
	if err != nil {
		return nil, err
	}
	md := signing.Sign(*s.key.Load(), signing.Call{Method: method, AgentID: s.agentID, Timestamp: s.now(), Nonce: nonce, Body: body})
	kv := make([]string, 0, 2*len(md))
	for _, k := range []string{wire.SignatureAgentKey, wire.SignatureTimestampKey, wire.SignatureNonceKey, wire.SignatureKey} {
		kv = append(kv, k, md[k])
	}
	return kv, nil
}

// newNonce is 16 random bytes, base64url without padding: 22 characters of the alphabet
// wire.SignatureNonceKey allows; a collision within the skew window is out of reach.
func newNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("sw4rm: nonce: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// DialOptions are the gRPC options that make a connection sign every call with s; Dial adds
// them when given a key. Place them after any interceptors of your own, so that the signer
// is the innermost and sends the bytes it signed.
func (s *Signer) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(s.UnaryClientInterceptor()), grpc.WithChainStreamInterceptor(s.StreamClientInterceptor())}
}

// UnaryClientInterceptor signs each unary call: it marshals the request once, signs those
// bytes and sends exactly them.
func (s *Signer) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		msg, ok := req.(proto.Message)
		if !ok || alreadySigned(ctx) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		body, err := proto.Marshal(msg)
		if err != nil {
			return status.Errorf(codes.Internal, "sw4rm: marshal %s request: %v", method, err)
		}
		kv, err := s.Sign(method, body)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
		return invoker(ctx, method, &preEncoded{body: body}, reply, cc, append(opts[:len(opts):len(opts)], grpc.ForceCodecV2(theSignedCodec))...)
	}
}

// StreamClientInterceptor signs each stream over its first request message (see lazyStream).
func (s *Signer) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if alreadySigned(ctx) {
			return streamer(ctx, desc, cc, method, opts...)
		}
		return &lazyStream{s: s, ctx: ctx, desc: desc, cc: cc, method: method, streamer: streamer,
			opts: append(opts[:len(opts):len(opts)], grpc.ForceCodecV2(theSignedCodec)), ready: make(chan struct{})}, nil
	}
}

func alreadySigned(ctx context.Context) bool {
	md, _ := metadata.FromOutgoingContext(ctx)
	return len(md.Get(wire.SignatureKey)) > 0
}

// preEncoded is a request already marshalled (and signed); signedCodec sends its bytes as
// they are.
type preEncoded struct{ body []byte }

// signedCodec is the client codec of signed calls: a preEncoded request's bytes go out
// untouched, everything else — replies, requests of unsigned calls — is plain protobuf. Its
// name is "proto", so the content-type and the server's codec are the usual ones.
type signedCodec struct{ proto encoding.CodecV2 }

var theSignedCodec = signedCodec{proto: encoding.GetCodecV2("proto")}

func (c signedCodec) Name() string { return "proto" }

func (c signedCodec) Marshal(v any) (mem.BufferSlice, error) {
	if p, ok := v.(*preEncoded); ok {
		return mem.BufferSlice{mem.SliceBuffer(p.body)}, nil
	}
	return c.proto.Marshal(v)
}

func (c signedCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

// lazyStream is a signed stream that opens on its first SendMsg, with the signature of that
// message in its metadata. Before that, Header and RecvMsg wait for it to open (as a real
// stream's would wait for the server), Trailer is empty and Context is the call's context.
// CloseSend before any SendMsg opens the stream with no request, signed over no bytes.
type lazyStream struct {
	s        *Signer
	ctx      context.Context
	desc     *grpc.StreamDesc
	cc       *grpc.ClientConn
	method   string
	streamer grpc.Streamer
	opts     []grpc.CallOption

	mu      sync.Mutex
	started bool          // start has run or is running
	ready   chan struct{} // closed once it has run; real and err are set from then on
	real    grpc.ClientStream
	err     error // why the stream could not be opened
}

// start opens the real stream signed over body and reports true, or, if the stream was
// already opened (or is being opened), waits for that and reports false.
func (l *lazyStream) start(body []byte) bool {
	l.mu.Lock()
	if l.started {
		l.mu.Unlock()
		<-l.ready
		return false
	}
	l.started = true
	l.mu.Unlock()
	defer close(l.ready)
	kv, err := l.s.Sign(l.method, body)
	if err != nil {
		l.err = status.Error(codes.Internal, err.Error())
		return true
	}
	l.real, l.err = l.streamer(metadata.AppendToOutgoingContext(l.ctx, kv...), l.desc, l.cc, l.method, l.opts...)
	return true
}

// opened waits until the stream was opened (or the call's context ended) and returns it.
func (l *lazyStream) opened() (grpc.ClientStream, error) {
	select {
	case <-l.ready:
		return l.real, l.err
	case <-l.ctx.Done():
		select {
		case <-l.ready: // opened meanwhile: the real stream reports its own end
			return l.real, l.err
		default:
			return nil, status.FromContextError(l.ctx.Err()).Err()
		}
	}
}

// SendMsg sends m; the first message opens the stream, signed over m's bytes, and is sent
// as exactly those bytes.
func (l *lazyStream) SendMsg(m any) error {
	select {
	case <-l.ready:
		if l.err != nil {
			return l.err
		}
		return l.real.SendMsg(m)
	default:
	}
	msg, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "sw4rm: a signed stream sends protobuf messages, not %T", m)
	}
	body, err := proto.Marshal(msg)
	if err != nil {
		return status.Errorf(codes.Internal, "sw4rm: marshal %s request: %v", l.method, err)
	}
	first := l.start(body)
	switch {
	case l.err != nil:
		return l.err
	case !first:
		// A CloseSend opened the stream meanwhile; the real stream answers this SendMsg.
		return l.real.SendMsg(m)
	}
	return l.real.SendMsg(&preEncoded{body: body})
}

// RecvMsg waits for the stream to open, then receives.
func (l *lazyStream) RecvMsg(m any) error {
	st, err := l.opened()
	if err != nil {
		return err
	}
	return st.RecvMsg(m)
}

// Header waits for the stream to open, then for the server's header.
func (l *lazyStream) Header() (metadata.MD, error) {
	st, err := l.opened()
	if err != nil {
		return nil, err
	}
	return st.Header()
}

// Trailer is the server's trailer; empty before the stream opened.
func (l *lazyStream) Trailer() metadata.MD {
	select {
	case <-l.ready:
		if l.real != nil {
			return l.real.Trailer()
		}
	default:
	}
	return nil
}

// CloseSend half-closes the stream, opening it first (with no request) if nothing was sent.
func (l *lazyStream) CloseSend() error {
	l.start(nil)
	if l.err != nil {
		return l.err
	}
	return l.real.CloseSend()
}

// Context is the stream's context: the call's until the stream opened.
func (l *lazyStream) Context() context.Context {
	select {
	case <-l.ready:
		if l.real != nil {
			return l.real.Context()
		}
	default:
	}
	return l.ctx
}

// loadSigner returns the signer the options ask for: a key value, a key file, or the key
// file named by SW4RM_AGENT_KEY_FILE; nil when there is none.
func loadSigner(agentID string, o dialConfig) (*Signer, error) {
	key := o.key
	path := o.keyFile
	if key == nil && path == "" && !o.noEnv {
		path = os.Getenv(KeyFileEnv)
	}
	if key == nil && path != "" {
		k, err := auth.LoadPrivateKey(path)
		if err != nil {
			return nil, fmt.Errorf("sw4rm: %w", err)
		}
		key = k
	}
	if key == nil {
		return nil, nil
	}
	return NewSigner(agentID, key)
}
