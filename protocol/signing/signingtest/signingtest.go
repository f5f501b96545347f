// Package signingtest is a verifying server side of signed calls (§6.2) for tests: a gRPC
// server codec that hashes each request's bytes exactly as they arrive, and interceptors that
// verify each call with protocol/signing against the keys a test gives it. It is deliberately
// small and independent of the frontend, so that a client — the Go SDK, a client in another
// language — is tested against the published mechanism rather than against one server's
// implementation of it.
package signingtest

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec this one wraps
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/protocol/signing"
)

// Call is what the verifier saw of one request.
type Call struct {
	// Method is the full gRPC method.
	Method string
	// Signed reports whether the call carried signing metadata.
	Signed bool
	// Agent is the agent the call claimed to be made as ("" if unsigned).
	Agent string
	// Nonce is the call's nonce ("" if unsigned).
	Nonce string
	// Timestamp is when the call says it was signed.
	Timestamp time.Time
	// Digest is the SHA-256 of the request's bytes as they arrived.
	Digest [sha256.Size]byte
	// Err is why the call was refused, nil if it was admitted.
	Err error
}

// Verifier verifies signed calls against the keys added with AddKey. One per test server.
type Verifier struct {
	// Required refuses unsigned calls with UNAUTHENTICATED; otherwise they are admitted as
	// anonymous (a signed call is verified either way).
	Required bool

	codec *hashCodec
	guard signing.ReplayGuard

	mu    sync.Mutex
	keys  map[string][]ed25519.PublicKey
	calls []Call
}

// NewVerifier returns a verifier that knows no keys yet.
func NewVerifier(required bool) *Verifier {
	return &Verifier{Required: required, codec: &hashCodec{proto: encoding.GetCodecV2("proto")}, keys: map[string][]ed25519.PublicKey{}}
}

// AddKey makes pub one of agent's valid keys.
func (v *Verifier) AddKey(agent string, pub ed25519.PublicKey) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.keys[agent] = append(v.keys[agent], pub)
}

// RemoveKey makes pub no longer valid for agent (the end of a rotation's overlap).
func (v *Verifier) RemoveKey(agent string, pub ed25519.PublicKey) {
	v.mu.Lock()
	defer v.mu.Unlock()
	ks := v.keys[agent][:0]
	for _, k := range v.keys[agent] {
		if !k.Equal(pub) {
			ks = append(ks, k)
		}
	}
	v.keys[agent] = ks
}

// ServerOptions are the options that make a grpc.Server verify: the hashing codec and the
// unary and stream interceptors.
func (v *Verifier) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ForceServerCodecV2(v.codec), grpc.ChainUnaryInterceptor(v.unary), grpc.ChainStreamInterceptor(v.stream)}
}

// Calls returns every call seen so far, in order.
func (v *Verifier) Calls() []Call {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]Call(nil), v.calls...)
}

type agentKey struct{}

// AgentFrom returns the agent a verified call was made as, or false for an unsigned call.
func AgentFrom(ctx context.Context) (string, bool) {
	a, ok := ctx.Value(agentKey{}).(string)
	return a, ok
}

// hashCodec is the proto codec, plus the SHA-256 of each request's wire bytes, kept by the
// decoded message's pointer until an interceptor takes it.
type hashCodec struct {
	proto   encoding.CodecV2
	digests sync.Map
}

func (c *hashCodec) Name() string                              { return "proto" }
func (c *hashCodec) Marshal(v any) (mem.BufferSlice, error)    { return c.proto.Marshal(v) }
func (c *hashCodec) take(v any) (d [sha256.Size]byte, ok bool) { return takeDigest(&c.digests, v) }

func (c *hashCodec) Unmarshal(data mem.BufferSlice, v any) error {
	h := sha256.New()
	for _, b := range data {
		h.Write(b.ReadOnlyData())
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	c.digests.Store(v, d)
	return c.proto.Unmarshal(data, v)
}

func takeDigest(m *sync.Map, v any) (d [sha256.Size]byte, ok bool) {
	got, ok := m.LoadAndDelete(v)
	if !ok {
		return d, false
	}
	return got.([sha256.Size]byte), true
}

func (v *Verifier) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := v.admit(ctx, info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (v *Verifier) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &verifiedStream{ServerStream: ss, v: v, method: info.FullMethod, ctx: ss.Context()})
}

// verifiedStream verifies a stream on its first request message, the one its signature
// covers.
type verifiedStream struct {
	grpc.ServerStream
	v        *Verifier
	method   string
	ctx      context.Context
	admitted bool
}

func (s *verifiedStream) Context() context.Context { return s.ctx }

func (s *verifiedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.admitted {
		s.v.codec.take(m)
		return nil
	}
	ctx, err := s.v.admit(s.ctx, s.method, m)
	if err != nil {
		return err
	}
	s.ctx, s.admitted = ctx, true
	return nil
}

// admit verifies the call whose decoded request is req and records it.
func (v *Verifier) admit(ctx context.Context, method string, req any) (context.Context, error) {
	rec := Call{Method: method}
	digest, hashed := v.codec.take(req)
	rec.Digest = digest
	md, _ := metadata.FromIncomingContext(ctx)
	get := func(k string) string {
		if vs := md.Get(k); len(vs) > 0 {
			return vs[0]
		}
		return ""
	}
	c, sig, err := signing.Parse(get)
	switch {
	case errors.Is(err, signing.ErrUnsigned):
		if v.Required {
			rec.Err = err
		}
	case err != nil:
		rec.Err = err
	case !hashed:
		rec.Err = errors.New("the request was not hashed by the server codec")
	default:
		rec.Signed, rec.Agent, rec.Nonce, rec.Timestamp = true, c.AgentID, c.Nonce, c.Timestamp
		c.Method = method
		rec.Err = v.verify(c, digest, sig)
	}
	v.mu.Lock()
	v.calls = append(v.calls, rec)
	v.mu.Unlock()
	if rec.Err != nil {
		return ctx, status.Errorf(codes.Unauthenticated, "permission_denied: %v", rec.Err)
	}
	if rec.Signed {
		ctx = context.WithValue(ctx, agentKey{}, rec.Agent)
	}
	return ctx, nil
}

func (v *Verifier) verify(c signing.Call, digest [sha256.Size]byte, sig []byte) error {
	v.mu.Lock()
	keys := append([]ed25519.PublicKey(nil), v.keys[c.AgentID]...)
	v.mu.Unlock()
	err := signing.ErrBadSignature
	for _, k := range keys {
		if err = signing.VerifyDigest(k, c, digest, sig); err == nil {
			break
		}
	}
	if err != nil {
		return err
	}
	return v.guard.Check(c, time.Now())
}
