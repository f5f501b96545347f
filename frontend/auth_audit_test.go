package frontend

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/signing"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// accessAuditFixture is an authenticator over a memory store with one operator and one
// agent, alice, whose key it holds.
type accessAuditFixture struct {
	a     *Authenticator
	st    *memory.Store
	priv  ed25519.PrivateKey
	keyID string
}

func newAccessAuditFixture(t *testing.T, mode auth.Mode, access AccessAudit) *accessAuditFixture {
	t.Helper()
	st := memory.New()
	pub, priv, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	keyID := auth.KeyID("ed25519", pub)
	require.NoError(t, st.Keys().AddAgentKey(context.Background(), store.AgentKey{AgentID: "alice", KeyID: keyID, Algorithm: "ed25519", PublicKey: pub}, true))
	ops, err := hitl.ParseOperators("ops=ops-token")
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// A synchronous sink: each row is in the store when Record returns.
	a := NewAuthenticator(AuthConfig{Mode: mode, Keys: st.Keys(), Operators: hitl.Policy{Operators: ops},
		Sink: audit.New(log, st.Audit()), Audit: access, Log: log})
	t.Cleanup(a.Close)
	return &accessAuditFixture{a: a, st: st, priv: priv, keyID: keyID}
}

// signed passes req through the server's codec, as the server receives it, and returns a
// context carrying alice's signature of method over its bytes.
func (f *accessAuditFixture) signed(t *testing.T, method string, req proto.Message) context.Context {
	t.Helper()
	body, err := proto.Marshal(req)
	require.NoError(t, err)
	require.NoError(t, f.a.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(body)}, req))
	return f.signature(t, method, body)
}

// signature is a context carrying alice's signature of method over body.
func (f *accessAuditFixture) signature(t *testing.T, method string, body []byte) context.Context {
	t.Helper()
	n := make([]byte, 16)
	_, err := rand.Read(n)
	require.NoError(t, err)
	md := signing.Sign(f.priv, signing.Call{Method: method, AgentID: "alice", Timestamp: time.Now(), Nonce: base64.RawURLEncoding.EncodeToString(n), Body: body})
	return metadata.NewIncomingContext(context.Background(), metadata.New(md))
}

// events returns the audit rows of type typ, with their details decoded.
func (f *accessAuditFixture) events(t *testing.T, typ string) []map[string]any {
	t.Helper()
	evs, err := f.st.Audit().List(context.Background(), store.AuditFilter{TypePrefix: typ})
	require.NoError(t, err)
	var out []map[string]any
	for _, e := range evs {
		var d map[string]any
		require.NoError(t, json.Unmarshal(e.Details, &d))
		d["actor"], d["agent_id"] = e.Actor, e.AgentID
		out = append(out, d)
	}
	return out
}

func handled(context.Context, any) (any, error) { return "ok", nil }

// TestAllowedCallsAuditedOnlyWithAll: with SW4RM_AUDIT_ACCESS=all the interceptor audits each
// allowed call as auth.allowed, naming the method, the proven principal (agent and key id, or
// operator; anonymous when nothing was proven) and the mode, and the handler's context still
// carries the principal; with the default, refused, an allowed call leaves no row. A refusal
// is auth.refused either way and never also auth.allowed.
func TestAllowedCallsAuditedOnlyWithAll(t *testing.T) {
	heartbeat := registrypb.RegistryService_Heartbeat_FullMethodName
	for _, access := range []AccessAudit{AuditRefused, AuditAll} {
		t.Run(access.String(), func(t *testing.T) {
			f := newAccessAuditFixture(t, auth.Required, access)
			info := &grpc.UnaryServerInfo{FullMethod: heartbeat}

			// A signed call of alice's.
			req := &registrypb.HeartbeatRequest{AgentId: "alice"}
			var got auth.Principal
			_, err := f.a.unary(f.signed(t, heartbeat, req), req, info, func(ctx context.Context, _ any) (any, error) {
				got = auth.FromContext(ctx)
				return "ok", nil
			})
			require.NoError(t, err)
			assert.Equal(t, auth.Principal{Agent: "alice", KeyID: f.keyID}, got)

			// An operator's call.
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer ops-token"))
			_, err = f.a.unary(ctx, &registrypb.DeregisterAgentRequest{AgentId: "bob"},
				&grpc.UnaryServerInfo{FullMethod: registrypb.RegistryService_DeregisterAgent_FullMethodName}, handled)
			require.NoError(t, err)

			// A refused call: alice's heartbeat sent as bob.
			other := &registrypb.HeartbeatRequest{AgentId: "bob"}
			_, err = f.a.unary(f.signed(t, heartbeat, other), other, info, handled)
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
			require.Len(t, f.events(t, "auth.refused"), 1)

			allowed := f.events(t, "auth.allowed")
			if access == AuditRefused {
				assert.Empty(t, allowed, "the default audits refusals only")
				return
			}
			require.Len(t, allowed, 2, "one row per allowed call, none for the refusal")
			assert.Equal(t, map[string]any{"method": heartbeat, "mode": "required", "principal": "agent:alice", "key_id": f.keyID,
				"actor": "agent:alice", "agent_id": "alice"}, allowed[0])
			assert.Equal(t, map[string]any{"method": registrypb.RegistryService_DeregisterAgent_FullMethodName, "mode": "required",
				"principal": "operator:ops", "actor": "operator:ops", "agent_id": ""}, allowed[1])
		})
	}
}

// TestAuthOffCallsAudited: with authentication off nothing is proven, yet with
// all every call is still recorded — anonymous, or as the operator whose token it carries —
// with mode off.
func TestAuthOffCallsAudited(t *testing.T) {
	f := newAccessAuditFixture(t, auth.Off, AuditAll)
	_, err := f.a.unary(context.Background(), &registrypb.HeartbeatRequest{AgentId: "alice"},
		&grpc.UnaryServerInfo{FullMethod: registrypb.RegistryService_Heartbeat_FullMethodName}, handled)
	require.NoError(t, err)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer ops-token"))
	_, err = f.a.unary(ctx, &registrypb.DeregisterAgentRequest{AgentId: "bob"},
		&grpc.UnaryServerInfo{FullMethod: registrypb.RegistryService_DeregisterAgent_FullMethodName}, handled)
	require.NoError(t, err)
	allowed := f.events(t, "auth.allowed")
	require.Len(t, allowed, 2)
	assert.Equal(t, map[string]any{"method": registrypb.RegistryService_Heartbeat_FullMethodName, "mode": "off", "principal": "anonymous",
		"actor": "anonymous", "agent_id": ""}, allowed[0])
	assert.Equal(t, "operator:ops", allowed[1]["principal"])
	assert.Equal(t, "off", allowed[1]["mode"])
}

// fakeStream is a server stream whose client sent n copies of one request.
type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
	f   *accessAuditFixture
	t   *testing.T
	n   int
}

func (s *fakeStream) Context() context.Context { return s.ctx }

func (s *fakeStream) RecvMsg(m any) error {
	if s.n == 0 {
		return io.EOF
	}
	s.n--
	// What the server's codec does with each message it decodes.
	body, err := proto.Marshal(&routerpb.StreamRequest{AgentId: "alice"})
	require.NoError(s.t, err)
	return s.f.a.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(body)}, m)
}

// TestStreamAuditedOnce: a stream is admitted once, on its first message, and so audited
// once however many messages it carries.
func TestStreamAuditedOnce(t *testing.T) {
	f := newAccessAuditFixture(t, auth.Required, AuditAll)
	method := routerpb.RouterService_StreamIncoming_FullMethodName
	body, err := proto.Marshal(&routerpb.StreamRequest{AgentId: "alice"})
	require.NoError(t, err)
	ss := &fakeStream{ctx: f.signature(t, method, body), f: f, t: t, n: 3}
	err = f.a.stream(nil, ss, &grpc.StreamServerInfo{FullMethod: method, IsServerStream: true}, func(_ any, s grpc.ServerStream) error {
		for {
			if err := s.RecvMsg(&routerpb.StreamRequest{}); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return err
			}
		}
		assert.Equal(t, "alice", auth.FromContext(s.Context()).Agent)
		return nil
	})
	require.NoError(t, err)
	allowed := f.events(t, "auth.allowed")
	require.Len(t, allowed, 1, "one row per stream")
	assert.Equal(t, method, allowed[0]["method"])
	assert.Equal(t, "agent:alice", allowed[0]["principal"])
}
