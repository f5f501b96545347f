package frontend

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/signing"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// Agent identity and authorization at the frontend's edge (§6.2, §6.3, §6.5, §23).
//
// Every request passes through one interceptor, which proves who made it and whether that
// principal may make it, before any handler runs:
//
//   - The server's codec (wireCodec) hashes each request's bytes exactly as they arrived: a
//     signature covers those bytes, never a re-encoding (protocol/signing says why).
//   - A signed call (metadata sw4rm-agent, -timestamp, -nonce, -signature) is verified
//     against the agent's registered keys (store.Keys, cached and dropped within a second of
//     any change), its timestamp against the clock skew, and its nonce against every nonce
//     seen in the skew window by any frontend (store.Keys.UseNonce).
//   - An operator proves itself with its token (metadata authorization: Bearer <token>),
//     checked against the hashed operator policy; the token goes no further.
//   - Authorization (authz.go) applies one rule per method, deny by default in required mode.
//
// The mode (SW4RM_AUTH) decides what an unproven caller gets: Off trusts it, Optional lets it
// through and logs it, Required refuses it with UNAUTHENTICATED. A call that is signed is
// verified in Optional mode too: a bad signature is never let through.
//
// Every refusal is audited as auth.refused; with SW4RM_AUDIT_ACCESS=all every allowed call is
// audited as auth.allowed too (§6.5: every access decision logged), a stream once, when its
// first message is admitted; with sample:<n> one allowed call in n is, and every decision is
// counted (audit.AccessLog). The services' decisions on tool calls and other principals'
// work are access.* events of the same log (access.go).

// DefaultClockSkew is how far a signed call's timestamp may be from the server's clock.
const DefaultClockSkew = 30 * time.Second

// DefaultKeyOverlap is how long a rotated-out key stays valid beside its successor (§23).
const DefaultKeyOverlap = 5 * time.Minute

// keyRefresh is how often each frontend checks whether any key changed; a revocation is
// refused everywhere within it plus one store round trip (§23: "within a second").
const keyRefresh = 250 * time.Millisecond

// decoded is what the server codec learned of one request: the SHA-256 of its wire bytes
// (when hashing is on) and, if it could not be decoded, why.
type decoded struct {
	digest [sha256.Size]byte
	hashed bool
	err    error
}

// wireCodec is the server's codec: protobuf, plus what a signed call needs and what grpc-go
// would otherwise get wrong. It hashes each request's bytes as they arrive, and it reports a
// request that does not decode (invalid UTF-8 in a string field, a truncated field) to the
// interceptor instead of failing, because grpc-go turns a codec error into codes.Internal
// before any interceptor runs, and a malformed request is the caller's error: InvalidArgument.
type wireCodec struct {
	proto encoding.CodecV2
	hash  bool
	// seen maps a decoded message (its pointer) to what was learned decoding it; the
	// interceptor takes the entry out before the handler runs.
	seen sync.Map
}

func newWireCodec(hash bool) *wireCodec {
	return &wireCodec{proto: encoding.GetCodecV2("proto"), hash: hash}
}

// Name implements encoding.CodecV2; it replaces the default codec for "proto".
func (c *wireCodec) Name() string { return "proto" }

// Marshal implements encoding.CodecV2.
func (c *wireCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

// Unmarshal implements encoding.CodecV2. It never fails: a decoding error is left for the
// interceptor (see wireCodec).
func (c *wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	var d decoded
	if c.hash {
		h := sha256.New()
		for _, b := range data {
			h.Write(b.ReadOnlyData())
		}
		h.Sum(d.digest[:0])
		d.hashed = true
	}
	if err := c.proto.Unmarshal(data, v); err != nil {
		d.err = err
	} else if !c.hash {
		return nil // nothing to tell the interceptor
	}
	c.seen.Store(v, d)
	return nil
}

// take returns and forgets what was learned decoding v.
func (c *wireCodec) take(v any) decoded {
	if d, ok := c.seen.LoadAndDelete(v); ok {
		return d.(decoded)
	}
	return decoded{}
}

// AuthConfig configures the frontend's authentication.
type AuthConfig struct {
	// Mode is SW4RM_AUTH.
	Mode auth.Mode
	// Keys holds the agents' keys and the nonces of signed calls.
	Keys store.Keys
	// Operators authenticates operator tokens (the HITL operator policy).
	Operators hitl.Policy
	// Skew is the largest accepted clock difference of a signed call (DefaultClockSkew if
	// zero).
	Skew time.Duration
	// KeyOverlap is how long a rotated-out key stays valid (DefaultKeyOverlap if zero).
	KeyOverlap time.Duration
	// Sink records every refusal in the audit log (§6.5), and every allowed call when Audit
	// is AuditAll.
	Sink *audit.Sink
	// Audit is SW4RM_AUDIT_ACCESS: which access decisions get an audit row of their own.
	Audit AccessAudit
	// Access writes and counts the access decisions; nil builds one over Sink at Audit. The
	// services' own decisions (tool calls, resource scopes) go through it too.
	Access *audit.AccessLog
	// Log receives the optional mode's notes on unsigned calls.
	Log *slog.Logger
	// Now is the clock (time.Now if nil); tests pin it.
	Now func() time.Time
}

// AccessAudit is which access decisions the frontend writes to the audit log (§6.5: "all
// access decisions MUST be logged and auditable" in multi-tenant production):
// audit.AccessLevel, SW4RM_AUDIT_ACCESS.
type AccessAudit = audit.AccessLevel

// The access audit levels.
var (
	// AuditRefused audits every refused call as auth.refused and every refused tool call or
	// resource access as access.refused; an allowed decision is only counted (the
	// sw4rm_access_decisions_total metric).
	AuditRefused = audit.AccessRefused
	// AuditAll also audits every allowed call as auth.allowed (one row per unary call and one
	// per stream, whatever the mode) and every allowed tool call and resource access as
	// access.allowed.
	AuditAll = audit.AccessAll
)

// ParseAccessAudit reads SW4RM_AUDIT_ACCESS's value: "refused" (or ""), "all" or
// "sample:<n>".
func ParseAccessAudit(s string) (AccessAudit, error) { return audit.ParseAccessLevel(s) }

// Authenticator proves and authorizes every call the frontend serves. One per process: it
// caches keys and polls for their changes until Close.
type Authenticator struct {
	cfg      AuthConfig
	codec    *wireCodec
	guard    *signing.ReplayGuard
	unsigned rate.Sometimes

	mu         sync.Mutex
	cache      map[string][]store.AgentKey
	generation int64
	stop       chan struct{}
	stopped    sync.WaitGroup
}

// NewAuthenticator builds the authenticator and, unless the mode is Off, starts watching
// the keys for changes.
func NewAuthenticator(cfg AuthConfig) *Authenticator {
	if cfg.Skew <= 0 {
		cfg.Skew = DefaultClockSkew
	}
	if cfg.KeyOverlap <= 0 {
		cfg.KeyOverlap = DefaultKeyOverlap
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Access == nil {
		cfg.Access = audit.NewAccessLog(cfg.Sink, cfg.Audit)
	}
	a := &Authenticator{cfg: cfg, codec: newWireCodec(cfg.Mode != auth.Off), guard: &signing.ReplayGuard{Skew: cfg.Skew},
		unsigned: rate.Sometimes{Interval: time.Minute}, cache: map[string][]store.AgentKey{}, stop: make(chan struct{})}
	if cfg.Mode != auth.Off && cfg.Keys != nil {
		a.stopped.Add(1)
		go a.watchKeys()
	}
	return a
}

// Mode returns the authentication mode.
func (a *Authenticator) Mode() auth.Mode { return a.cfg.Mode }

// Access returns the log every access decision goes through.
func (a *Authenticator) Access() *audit.AccessLog { return a.cfg.Access }

// Close stops watching the keys.
func (a *Authenticator) Close() {
	select {
	case <-a.stop:
	default:
		close(a.stop)
	}
	a.stopped.Wait()
}

// watchKeys drops the key cache whenever the store's key generation changes, so a revoked or
// rotated key is refused by every frontend within keyRefresh.
func (a *Authenticator) watchKeys() {
	defer a.stopped.Done()
	t := time.NewTicker(keyRefresh)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		gen, err := a.cfg.Keys.KeysGeneration(ctx)
		cancel()
		if err != nil {
			// Unknown whether anything changed: forget everything, so no stale key outlives
			// an outage of the store by more than keyRefresh.
			a.mu.Lock()
			clear(a.cache)
			a.mu.Unlock()
			continue
		}
		a.mu.Lock()
		if gen != a.generation {
			clear(a.cache)
			a.generation = gen
		}
		a.mu.Unlock()
	}
}

// forget drops one agent's cached keys (after this frontend changed them).
func (a *Authenticator) forget(agentID string) {
	a.mu.Lock()
	delete(a.cache, agentID)
	a.mu.Unlock()
}

// keysOf returns an agent's keys, from the cache when it holds them.
func (a *Authenticator) keysOf(ctx context.Context, agentID string) ([]store.AgentKey, error) {
	a.mu.Lock()
	ks, ok := a.cache[agentID]
	a.mu.Unlock()
	if ok {
		return ks, nil
	}
	ks, err := a.cfg.Keys.ListAgentKeys(ctx, agentID)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.cache[agentID] = ks
	a.mu.Unlock()
	return ks, nil
}

func (a *Authenticator) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	d := a.codec.take(req)
	if d.err == nil {
		d = sentDigest(ctx, d)
	}
	if d.err != nil {
		return nil, malformed(info.FullMethod, d.err)
	}
	ctx, err := a.admit(ctx, info.FullMethod, req, d)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (a *Authenticator) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &authStream{ServerStream: ss, a: a, method: info.FullMethod, ctx: ss.Context()})
}

// authStream authenticates a stream on its first request message, the one a signature of a
// server-streaming call covers (the handler receives it before it does anything), and gives
// the handler a context carrying the principal from then on.
type authStream struct {
	grpc.ServerStream
	a      *Authenticator
	method string

	mu       sync.Mutex
	ctx      context.Context
	admitted bool
}

// Context returns the stream's context, with the principal once the first message is in.
func (s *authStream) Context() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctx
}

// RecvMsg receives a message, refusing a malformed one and authenticating the first.
func (s *authStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	d := s.a.codec.take(m)
	if d.err != nil {
		return malformed(s.method, d.err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admitted {
		return nil
	}
	if d = sentDigest(s.ctx, d); d.err != nil {
		return malformed(s.method, d.err)
	}
	ctx, err := s.a.admit(s.ctx, s.method, m, d)
	if err != nil {
		return err
	}
	s.ctx, s.admitted = ctx, true
	return nil
}

// sentDigest is what a signature of the call whose context is ctx covers: the digest the
// codec took, unless the call arrived as Connect or gRPC-Web, whose bytes as sent the HTTP
// handler hashed before vanguard re-encoded them (connect.go).
func sentDigest(ctx context.Context, d decoded) decoded {
	if w, ok := wireDigestOf(ctx); ok {
		return w
	}
	return d
}

// malformed is the answer to a request that does not decode.
func malformed(method string, err error) error {
	return status.Errorf(codes.InvalidArgument, "validation_error: the %s request is not a valid protobuf message: %v", method, err)
}

// admit proves the caller and authorizes the call, returning the context the handler gets.
func (a *Authenticator) admit(ctx context.Context, method string, req any, d decoded) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var p auth.Principal
	if token := bearerToken(md); token != "" {
		op, ok := a.cfg.Operators.OperatorForToken(token)
		switch {
		case ok:
			p.Operator = op.Name
		case a.cfg.Mode != auth.Off:
			return ctx, a.refuse(ctx, method, p, codes.Unauthenticated, "the operator token is not valid")
		}
	}
	if a.cfg.Mode == auth.Off {
		return a.allow(ctx, method, p), nil
	}
	get := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	call, sig, err := signing.Parse(get)
	switch {
	case errors.Is(err, signing.ErrUnsigned):
	case err != nil:
		return ctx, a.refuse(ctx, method, p, codes.Unauthenticated, err.Error())
	default:
		call.Method = method
		keyID, err := a.verify(ctx, call, sig, d, req)
		if err != nil {
			if st, ok := status.FromError(err); ok {
				return ctx, st.Err() // the store failed: nothing was refused
			}
			claimed := p
			claimed.Agent = call.AgentID
			return ctx, a.refuse(ctx, method, claimed, codes.Unauthenticated, err.Error())
		}
		p.Agent, p.KeyID = call.AgentID, keyID
	}
	if err := a.authorize(method, req, p); err != nil {
		c := codes.PermissionDenied
		if p.Anonymous() {
			c = codes.Unauthenticated
		}
		return ctx, a.refuse(ctx, method, p, c, err.Error())
	}
	return a.allow(ctx, method, p), nil
}

// verify checks a signed call and returns the id of the key that proves it; a store failure
// comes back as an Unavailable status.
func (a *Authenticator) verify(ctx context.Context, call signing.Call, sig []byte, d decoded, req any) (string, error) {
	if !d.hashed {
		return "", status.Error(codes.Internal, "internal_error: the request was not hashed")
	}
	keys, err := a.keysOf(ctx, call.AgentID)
	if err != nil {
		return "", status.Errorf(codes.Unavailable, "internal_error: the agent's keys could not be read: %v; retry", err)
	}
	now := a.cfg.Now()
	keyID, valid := "", 0
	for _, k := range keys {
		if !k.ValidAt(now) {
			continue
		}
		valid++
		if auth.VerifyDigest(k.Algorithm, k.PublicKey, call, d.digest, sig) == nil {
			keyID = k.KeyID
			break
		}
	}
	if keyID == "" && valid == 0 {
		// An identity nobody holds yet (or whose keys all expired or were revoked) is
		// claimed by registering: the call proves possession of the key it registers (§6.2).
		if alg, pub := registeringKey(req, call.AgentID); pub != nil && auth.VerifyDigest(alg, pub, call, d.digest, sig) == nil {
			keyID = auth.KeyID(alg, pub)
		}
	}
	if keyID == "" {
		for _, k := range keys {
			if auth.VerifyDigest(k.Algorithm, k.PublicKey, call, d.digest, sig) == nil {
				if !k.RevokedAt.IsZero() {
					return "", fmt.Errorf("key %s of agent %q was revoked at %s", k.KeyID, call.AgentID, k.RevokedAt.UTC().Format(time.RFC3339))
				}
				return "", fmt.Errorf("key %s of agent %q expired at %s", k.KeyID, call.AgentID, k.NotAfter.UTC().Format(time.RFC3339))
			}
		}
		if len(keys) == 0 {
			return "", fmt.Errorf("agent %q has no registered key: register it with AgentDescriptor.public_key first (§6.2)", call.AgentID)
		}
		return "", fmt.Errorf("the signature does not verify with any valid key of agent %q", call.AgentID)
	}
	// The nonce last, so that a forged call cannot spend a real agent's nonces.
	if err := a.guard.Check(call, now); err != nil {
		return "", err
	}
	if replayIsNoop[call.Method] {
		return keyID, nil
	}
	fresh, err := a.cfg.Keys.UseNonce(ctx, call.AgentID, call.Nonce, call.Timestamp.Add(2*a.cfg.Skew))
	if err != nil {
		return "", status.Errorf(codes.Unavailable, "internal_error: the call's nonce could not be recorded: %v; retry", err)
	}
	if !fresh {
		return "", signing.ErrReplayed
	}
	return keyID, nil
}

// replayIsNoop lists the methods whose repeat the protocol itself makes a no-op, so their
// nonces are checked against this frontend's memory only (signing.ReplayGuard) and not also
// recorded in the store on every call — the message plane's hot path. A copy of such a call
// replayed to another frontend within the clock skew changes nothing: SendMessage carries the
// same message_id, which the store admits once (§11.2: the copy is answered as a duplicate),
// and AckDelivery of a seq already confirmed answers recorded=false (docs/security.md).
var replayIsNoop = map[string]bool{
	routerpb.RouterService_SendMessage_FullMethodName: true,
	routerpb.RouterService_AckDelivery_FullMethodName: true,
}

// registeringKey is the key (and its algorithm) a RegisterAgent request for agentID
// registers, if any.
func registeringKey(req any, agentID string) (string, []byte) {
	r, ok := req.(*registrypb.RegisterAgentRequest)
	if !ok || r.GetAgent().GetAgentId() != agentID {
		return "", nil
	}
	alg, err := auth.KeyAlgorithm(r.GetAgent().GetPublicKey())
	if err != nil {
		return "", nil
	}
	return alg, r.GetAgent().GetPublicKey()
}

// refuse audits a refused call (§6.5: every access decision is auditable) and returns its
// status; the error_code is permission_denied whatever the gRPC code.
func (a *Authenticator) refuse(ctx context.Context, method string, p auth.Principal, c codes.Code, reason string) error {
	reason = strings.TrimPrefix(reason, "signing: ")
	a.cfg.Access.Refused(ctx, accessKindAuth, audit.Event{Type: "auth.refused", Actor: p.String(), AgentID: p.Agent, Level: slog.LevelWarn,
		Details: map[string]any{"method": method, "code": c.String(), "reason": reason, "mode": a.cfg.Mode.String()}})
	return status.Errorf(c, "permission_denied: %s", reason)
}

// allow returns the context the handler of an allowed call gets, carrying its principal, and
// audits the decision as SW4RM_AUDIT_ACCESS says (§6.5; counted whatever it says) — the
// principal anonymous when nothing was proven, as in off mode. The sink is asynchronous, so
// the call does not wait for the row.
func (a *Authenticator) allow(ctx context.Context, method string, p auth.Principal) context.Context {
	ctx = auth.WithPrincipal(ctx, p)
	// The principal is set here, not left to audit.Sink.Attributed, so that an anonymous
	// caller is named too.
	d := map[string]any{"method": method, "mode": a.cfg.Mode.String(), "principal": p.String()}
	if p.KeyID != "" {
		d["key_id"] = p.KeyID
	}
	a.cfg.Access.Allowed(ctx, accessKindAuth, audit.Event{Type: "auth.allowed", Actor: p.String(), AgentID: p.Agent, Level: slog.LevelInfo, Details: d})
	return ctx
}

// noteUnsigned logs, at most once a minute, that Optional mode let an unsigned call through.
func (a *Authenticator) noteUnsigned(method string) {
	a.unsigned.Do(func() {
		a.cfg.Log.Info("unsigned call accepted (SW4RM_AUTH=optional; required would refuse it)", "method", method)
	})
}

// bearerToken is the operator token of "authorization: Bearer <token>", if any.
func bearerToken(md metadata.MD) string {
	v := md.Get("authorization")
	if len(v) == 0 {
		return ""
	}
	token, ok := strings.CutPrefix(v[0], "Bearer ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(token)
}
