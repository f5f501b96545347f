// Package sdk is the Go client for SW4RM agent authors: dial the server, register, receive
// envelopes from the inbound stream, confirm and acknowledge them, and send messages to other
// agents. It speaks only the canonical gRPC contract plus the documented addressing metadata,
// so everything it does an agent in another language can do too.
package sdk

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// ReconnectParams are the connection's reconnect backoff that Dial sets: from 200 ms, growing
// by 1.6 with 20 % jitter, to at most 5 s.
var ReconnectParams = grpc.ConnectParams{
	Backoff:           grpcbackoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
	MinConnectTimeout: 5 * time.Second,
}

// Agent is one agent's connection to a SW4RM server.
type Agent struct {
	id string
	// conn carries every call; grpcConn is the same connection when it is gRPC's (nil over
	// HTTP/1.1); closer closes conn.
	conn     grpc.ClientConnInterface
	grpcConn *grpc.ClientConn
	closer   io.Closer
	router   routerpb.RouterServiceClient
	registry registrypb.RegistryServiceClient
	seq      atomic.Uint64
	retry    *retrier
	signer   *Signer // nil: calls are not signed
	// hlc is the highest hlc_timestamp received, sent on what the agent sends (hlc.go).
	hlc hlcSeen

	// regMu serializes registrations and rotations; registered is the descriptor of the
	// last accepted one, which a rotation registers again with the new key.
	regMu      sync.Mutex
	registered *registrypb.AgentDescriptor
}

// dialConfig is what the SDK's own Dial options set.
type dialConfig struct {
	key     ed25519.PrivateKey
	keyFile string
	noEnv   bool
	// transport is TransportGRPC or TransportHTTP1 when an option chose one.
	transport string
}

// sdkOption is one of the SDK's own Dial options. It travels among the grpc.DialOptions
// (grpc.EmptyDialOption makes it one, and leaves gRPC's configuration alone) and Dial takes
// it out.
type sdkOption struct {
	grpc.EmptyDialOption
	apply func(*dialConfig)
}

// WithSigningKey makes the agent sign every call with key, its Ed25519 private key (§6.2);
// Register then registers its public key. It wins over WithKeyFile and SW4RM_AGENT_KEY_FILE.
func WithSigningKey(key ed25519.PrivateKey) grpc.DialOption {
	return sdkOption{apply: func(c *dialConfig) { c.key = key }}
}

// WithKeyFile makes the agent sign every call with the Ed25519 private key in the file at
// path: a 32-byte seed in hex on one line, or base64, or a PKCS#8 PEM (auth.LoadPrivateKey).
// It wins over SW4RM_AGENT_KEY_FILE.
func WithKeyFile(path string) grpc.DialOption {
	return sdkOption{apply: func(c *dialConfig) { c.keyFile = path }}
}

// WithoutSigning makes the agent ignore SW4RM_AGENT_KEY_FILE: its calls are not signed
// unless WithSigningKey or WithKeyFile says otherwise.
func WithoutSigning() grpc.DialOption {
	return sdkOption{apply: func(c *dialConfig) { c.noEnv = true }}
}

// Dial connects to the server at addr (host:port) as the agent agentID. The transport is
// TLS with WithTLS or WithTLSConfig; without either it comes from SW4RM_TLS_CA_FILE,
// SW4RM_TLS_CLIENT_CERT_FILE and SW4RM_TLS_CLIENT_KEY_FILE (TLS when any is set), and with
// none of those set it is plaintext, as on a laptop. A grpc.WithTransportCredentials among
// opts wins over all of these. With a key (WithSigningKey, WithKeyFile, or a key file named by SW4RM_AGENT_KEY_FILE) every
// call on the connection is signed as the agent (see Signer); without one, none is.
func Dial(addr, agentID string, opts ...grpc.DialOption) (*Agent, error) {
	if err := protocol.ValidateAgentID(agentID); err != nil {
		return nil, err
	}
	var cfg dialConfig
	grpcOpts := make([]grpc.DialOption, 0, len(opts)+4)
	for _, o := range opts {
		if so, ok := o.(sdkOption); ok {
			so.apply(&cfg)
			continue
		}
		grpcOpts = append(grpcOpts, o)
	}
	signer, err := loadSigner(agentID, cfg)
	if err != nil {
		return nil, err
	}
	transport, err := transportOf(cfg)
	if err != nil {
		return nil, err
	}
	if transport == TransportHTTP1 {
		return dialHTTP1(addr, agentID, grpcOpts, signer)
	}
	// gRPC's default reconnect backoff grows to two minutes, so an agent whose server was
	// away for a while would come back long after the server did, whatever Serve's own
	// backoff. dialOptions puts ReconnectParams first, so that options passed later win.
	grpcOpts, err = dialOptions(grpcOpts)
	if err != nil {
		return nil, err
	}
	if signer != nil {
		// Last, so that the signer is the innermost interceptor: nothing after it changes
		// the bytes it signed.
		grpcOpts = append(grpcOpts, signer.DialOptions()...)
	}
	conn, err := grpc.NewClient(addr, grpcOpts...)
	if err != nil {
		return nil, fmt.Errorf("sw4rm: dial %s: %w", addr, err)
	}
	a := newAgent(agentID, conn, signer)
	a.grpcConn = conn
	return a, nil
}

// dialHTTP1 is Dial over HTTP/1.1 (WithHTTP1): the TLS of the last WithTLS or WithTLSConfig
// among opts, else of the environment.
func dialHTTP1(addr, agentID string, opts []grpc.DialOption, signer *Signer) (*Agent, error) {
	var tlsCfg *tls.Config
	explicit := false
	for _, o := range opts {
		if t, ok := o.(tlsOption); ok {
			cfg, err := t.tlsConfig()
			if err != nil {
				return nil, err
			}
			tlsCfg, explicit = cfg, true
		}
	}
	if !explicit {
		cfg, err := tlsConfigFromEnv()
		if err != nil {
			return nil, err
		}
		tlsCfg = cfg
	}
	conn, err := newConnectConn(addr, tlsCfg, signer)
	if err != nil {
		return nil, err
	}
	return newAgent(agentID, conn, signer), nil
}

// newAgent is the agent agentID calling over conn, which it closes on Close.
func newAgent(agentID string, conn interface {
	grpc.ClientConnInterface
	io.Closer
}, signer *Signer) *Agent {
	// Every call carries its ctx's span context (a delivery's: Delivery.Context).
	traced := traceConn{conn}
	a := &Agent{
		id: agentID, conn: traced, closer: conn,
		router:   routerpb.NewRouterServiceClient(traced),
		registry: registrypb.NewRegistryServiceClient(traced),
		retry:    newRetrier(),
		signer:   signer,
	}
	// sequence_number must be monotonic per producer (§11) and the server deduplicates by
	// (producer_id, sequence_number) for messages without a token (§11.2): starting from the
	// clock keeps a restarted agent from reusing the numbers of its previous run.
	a.seq.Store(uint64(time.Now().UnixMicro()))
	return a
}

// ID is the agent's id.
func (a *Agent) ID() string { return a.id }

// Signer is what signs the agent's calls, nil when they are not signed.
func (a *Agent) Signer() *Signer { return a.signer }

// Conn exposes the gRPC connection for services the SDK does not wrap yet. It is nil when
// the agent calls over HTTP/1.1 (WithHTTP1, SW4RM_TRANSPORT=http1); ClientConn serves both.
func (a *Agent) Conn() *grpc.ClientConn { return a.grpcConn }

// ClientConn is the agent's connection for any generated client (pb.NewXServiceClient),
// whichever transport it dialled: its calls are signed when the agent signs.
func (a *Agent) ClientConn() grpc.ClientConnInterface { return a.conn }

// Close closes the connection.
func (a *Agent) Close() error { return a.closer.Close() }

// RejectedError is a protocol rejection by the server: the spec's error_code and the reason.
type RejectedError struct {
	// Code is the error_code.
	Code commonpb.ErrorCode
	// Reason is the server's explanation.
	Reason string
}

// Error returns the server's reason.
func (e *RejectedError) Error() string { return "sw4rm: rejected: " + e.Reason }

// CodeOf returns the error_code of a *RejectedError anywhere in err's chain, or
// ERROR_CODE_UNSPECIFIED.
func CodeOf(err error) commonpb.ErrorCode {
	var re *RejectedError
	if errors.As(err, &re) {
		return re.Code
	}
	return commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED
}

// rejected parses a "<error_code>: <message>" reason.
func rejected(reason string) *RejectedError {
	code := commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED
	if name, _, ok := strings.Cut(reason, ":"); ok {
		if v, ok := commonpb.ErrorCode_value[strings.ToUpper(strings.TrimSpace(name))]; ok {
			code = commonpb.ErrorCode(v)
		}
	}
	return &RejectedError{Code: code, Reason: reason}
}

// Register registers the agent with descriptor d (its agent_id is set to the agent's id).
// An agent that signs its calls registers its public key (§6.2: keys are distributed through
// the registry handshake) unless d brings one.
func (a *Agent) Register(ctx context.Context, d *registrypb.AgentDescriptor) error {
	if d == nil {
		d = &registrypb.AgentDescriptor{}
	}
	d.AgentId = a.id
	if d.Name == "" {
		d.Name = a.id
	}
	if len(d.PublicKey) == 0 && a.signer != nil {
		d.PublicKey = a.signer.PublicKey()
	}
	a.regMu.Lock()
	defer a.regMu.Unlock()
	if err := a.register(ctx, d, "register"); err != nil {
		return err
	}
	a.registered = proto.Clone(d).(*registrypb.AgentDescriptor)
	return nil
}

// register sends the registration; what names it in errors.
func (a *Agent) register(ctx context.Context, d *registrypb.AgentDescriptor, what string) error {
	resp, err := a.registry.RegisterAgent(ctx, &registrypb.RegisterAgentRequest{Agent: d})
	if err != nil {
		return fmt.Errorf("sw4rm: %s %s: %w", what, a.id, err)
	}
	if !resp.GetAccepted() {
		return rejected(resp.GetReason())
	}
	return nil
}

// RotateKey replaces the agent's key with newKey (§23): it registers the agent again — with
// the descriptor of its last Register and newKey's public key — in a call signed with the
// current key, which the server takes as a rotation (the old key stays valid for an overlap
// window), and then signs every further call with newKey. If it fails, the agent keeps
// signing with the current key; calling it again is safe, since registering a key the agent
// already holds changes nothing.
func (a *Agent) RotateKey(ctx context.Context, newKey ed25519.PrivateKey) error {
	if a.signer == nil {
		return errors.New("sw4rm: rotate key: the agent does not sign its calls (dial it with WithSigningKey, WithKeyFile or " + KeyFileEnv + ")")
	}
	if len(newKey) != ed25519.PrivateKeySize {
		return fmt.Errorf("sw4rm: rotate key: an Ed25519 private key is %d bytes, not %d", ed25519.PrivateKeySize, len(newKey))
	}
	a.regMu.Lock()
	defer a.regMu.Unlock()
	if a.registered == nil {
		return errors.New("sw4rm: rotate key: register the agent first; a rotation registers the same descriptor again")
	}
	d := proto.Clone(a.registered).(*registrypb.AgentDescriptor)
	d.PublicKey = newKey.Public().(ed25519.PublicKey)
	if err := a.register(ctx, d, "rotate the key of"); err != nil {
		return err
	}
	if err := a.signer.SetKey(newKey); err != nil {
		return err
	}
	a.registered = d
	return nil
}

// Heartbeat reports liveness and the agent's state (§14).
func (a *Agent) Heartbeat(ctx context.Context, state commonpb.AgentState, health map[string]string) error {
	_, err := a.registry.Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: a.id, State: state, Health: health})
	return err
}

// Deregister removes the agent from the registry and ends its lifecycle.
func (a *Agent) Deregister(ctx context.Context, reason string) error {
	_, err := a.registry.DeregisterAgent(ctx, &registrypb.DeregisterAgentRequest{AgentId: a.id, Reason: reason})
	return err
}

// Message is what Send sends. Zero fields get defaults: a fresh message_id and
// correlation_id, DATA, and application/json when a payload is present.
type Message struct {
	// To is the recipient agent_id (sent as the sw4rm-recipient metadata).
	To string
	// Type is the message_type; zero means DATA.
	Type commonpb.MessageType
	// ContentType is the payload's MIME type; empty means application/json.
	ContentType string
	// Payload is the body.
	Payload []byte
	// CorrelationID groups a flow; empty means a new one.
	CorrelationID string
	// IdempotencyToken is constant across retries of one logical operation (§11.2).
	IdempotencyToken string
	// TTLMillis expires the message (§11).
	TTLMillis uint64
	// RetryCount marks a retry (§11.3: a retry has a new message_id, the same token and
	// retry_count+1).
	RetryCount uint32
	// ResponseTimeout, when set, makes the message a request that requires a response within
	// it (004 draft; sent as the content_type parameter sw4rm-response-timeout-ms).
	ResponseTimeout time.Duration
	// MaxAttempts bounds a request's attempts (the server retries after each timeout).
	MaxAttempts int
	// InResponseTo makes the message the response to that request's message_id.
	InResponseTo string
	// RepoID and WorktreeID say which repository and worktree the message is about
	// (the envelope's repo_id and worktree_id). The router refuses a message naming a worktree
	// the agent is not bound to with permission_denied (§6.4); empty names none.
	RepoID, WorktreeID string
}

// Send sends a message and returns the envelope as sent (with its message_id). A protocol
// rejection (buffer_full, no_route, validation_error, ...) is a *RejectedError. A message
// with an IdempotencyToken that times out is sent again by the agent itself (see
// SetMaxRetries).
func (a *Agent) Send(ctx context.Context, m Message) (*commonpb.Envelope, error) {
	env := &commonpb.Envelope{
		MessageId: uuid.NewString(), ProducerId: a.id, CorrelationId: m.CorrelationID,
		SequenceNumber: a.seq.Add(1), MessageType: m.Type, ContentType: m.ContentType,
		Payload: m.Payload, ContentLength: uint64(len(m.Payload)),
		IdempotencyToken: m.IdempotencyToken, TtlMs: m.TTLMillis, RetryCount: m.RetryCount,
		RepoId: m.RepoID, WorktreeId: m.WorktreeID,
	}
	if env.CorrelationId == "" {
		env.CorrelationId = uuid.NewString()
	}
	if env.MessageType == commonpb.MessageType_MESSAGE_TYPE_UNSPECIFIED {
		env.MessageType = commonpb.MessageType_DATA
	}
	if env.ContentType == "" && (len(env.Payload) > 0 || m.ResponseTimeout > 0 || m.InResponseTo != "") {
		env.ContentType = "application/json"
	}
	if m.ResponseTimeout > 0 || m.InResponseTo != "" {
		mt, params, err := mime.ParseMediaType(env.ContentType)
		if err != nil {
			return env, fmt.Errorf("sw4rm: content type %q: %w", env.ContentType, err)
		}
		if m.ResponseTimeout > 0 {
			params[wire.ResponseTimeoutParam] = strconv.FormatInt(m.ResponseTimeout.Milliseconds(), 10)
			if m.MaxAttempts > 0 {
				params[wire.MaxAttemptsParam] = strconv.Itoa(m.MaxAttempts)
			}
		}
		if m.InResponseTo != "" {
			params[wire.InResponseToParam] = m.InResponseTo
		}
		env.ContentType = mime.FormatMediaType(mt, params)
	}
	if m.ResponseTimeout == 0 {
		// Tracked before it is sent: its ACK RECEIVED may arrive before SendMessage returns.
		a.retry.track(env, m.To)
	}
	if err := a.SendEnvelope(ctx, env, m.To); err != nil {
		a.retry.forget(env.GetMessageId())
		return env, err
	}
	return env, nil
}

// SendEnvelope sends a caller-built envelope to the agent to ("" for ACKs, which the server
// routes to the acknowledged message's producer). An envelope without hlc_timestamp is given
// the highest the agent has received (LastHLC), so the server orders it after them (§4).
func (a *Agent) SendEnvelope(ctx context.Context, env *commonpb.Envelope, to string) error {
	if env.GetHlcTimestamp() == "" {
		// §4: what the agent sends follows what it has received (hlc.go).
		env.HlcTimestamp = a.hlc.get()
	}
	if to != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, wire.RecipientKey, to)
	}
	resp, err := a.router.SendMessage(ctx, &routerpb.SendMessageRequest{Msg: env})
	if err != nil {
		return fmt.Errorf("sw4rm: send %s: %w", env.GetMessageId(), err)
	}
	if !resp.GetAccepted() {
		return rejected(resp.GetReason())
	}
	return nil
}

// Ack sends an ACKNOWLEDGEMENT for msg at stage (RECEIVED, READ, FULFILLED, or a NACK stage
// with code); the server routes it to msg's producer (§11).
func (a *Agent) Ack(ctx context.Context, msg *commonpb.Envelope, stage commonpb.AckStage, code commonpb.ErrorCode, note string) error {
	return a.SendEnvelope(ctx, a.ackEnvelope(msg, stage, code, note), "")
}

// ackEnvelope builds an ACK of msg with a new message_id and the next sequence_number; a
// retry of the ACK sends this same envelope again.
func (a *Agent) ackEnvelope(msg *commonpb.Envelope, stage commonpb.AckStage, code commonpb.ErrorCode, note string) *commonpb.Envelope {
	env := protocol.NewAckEnvelope(protocol.AckEnvelopeInput{
		MessageID: uuid.NewString(), ProducerID: a.id, CorrelationID: msg.GetCorrelationId(),
		Ack: protocol.AckPayload{AckForMessageID: msg.GetMessageId(), Stage: stage, ErrorCode: code, Note: note},
	})
	env.SequenceNumber = a.seq.Add(1)
	return env
}

// Delivery is one envelope received on the stream.
type Delivery struct {
	// Envelope is the message.
	Envelope *commonpb.Envelope
	// Seq is its stream position, used to confirm it.
	Seq int64
	// Retry is set when this delivery is the TIMED_OUT NACK of a message the agent sent with
	// an idempotency token and the agent sent it again (see Agent.SetMaxRetries): the retry,
	// with the same token, a new message_id and retry_count+1 (§11.2). Its ACKs name the new
	// message_id.
	Retry *commonpb.Envelope
	// RetryErr is why sending Retry failed, nil when it was sent.
	RetryErr error
	agent    *Agent
	// traceParent is the trace context of the delivery (wire.TraceParentParam), "" when the
	// server sent none (tracing off).
	traceParent string
}

// Context returns ctx carrying the delivery's span context, when the server sent one and ctx
// holds no span of its own: calls made in it — the delivery's Confirm, Ack and Respond do so
// by themselves, and any message sent while handling it — continue the message's trace, and
// so do the spans the agent starts in it (docs/observability.md, "Traces").
func (d *Delivery) Context(ctx context.Context) context.Context {
	if d.traceParent == "" || trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": d.traceParent})
}

// TraceParent is the delivery's W3C `traceparent`, "" when the server sent none.
func (d *Delivery) TraceParent() string { return d.traceParent }

// takeTraceParent removes from env's content_type the wire.TraceParentParam the server
// appended, so that the application sees the content type as sent, and returns its value.
func takeTraceParent(env *commonpb.Envelope) string {
	ct := env.GetContentType()
	i := strings.LastIndex(ct, "; "+wire.TraceParentParam+"=")
	if i < 0 {
		return ""
	}
	env.ContentType = ct[:i]
	return ct[i+len("; "+wire.TraceParentParam+"="):]
}

// Confirm tells the router the delivery arrived (RouterService.AckDelivery), which frees its
// buffer slot and moves the message to RECEIVED. It reports whether the server recorded it.
func (d *Delivery) Confirm(ctx context.Context) (bool, error) {
	resp, err := d.agent.router.AckDelivery(d.Context(ctx), &routerpb.DeliveryAckRequest{
		AgentId: d.agent.id, Seq: d.Seq, MessageId: d.Envelope.GetMessageId(),
		Outcome: routerpb.DeliveryAckOutcome_DELIVERY_ACK_OUTCOME_DELIVERED,
	})
	if err != nil {
		return false, err
	}
	return resp.GetRecorded(), nil
}

// Ack acknowledges the delivered message at a stage (see Agent.Ack).
func (d *Delivery) Ack(ctx context.Context, stage commonpb.AckStage, code commonpb.ErrorCode, note string) error {
	return d.agent.Ack(d.Context(ctx), d.Envelope, stage, code, note)
}

// AckPayload decodes the delivery as an ACK or NACK, or reports false if it is none.
func (d *Delivery) AckPayload() (protocol.AckPayload, bool) {
	if d.Envelope.GetMessageType() != commonpb.MessageType_ACKNOWLEDGEMENT {
		return protocol.AckPayload{}, false
	}
	p, err := protocol.ParseAck(d.Envelope)
	return p, err == nil
}

// InResponseTo returns the request a delivered response answers, or "".
func (d *Delivery) InResponseTo() string {
	l, _ := protocol.ParseLinkage(d.Envelope.GetContentType())
	return l.InResponseTo
}

// RequiresResponse reports whether the delivered message is a request awaiting a response.
func (d *Delivery) RequiresResponse() bool {
	l, _ := protocol.ParseLinkage(d.Envelope.GetContentType())
	return l.Request != nil
}

// Respond sends the response to a delivered request; the server routes it to the requester.
func (d *Delivery) Respond(ctx context.Context, payload []byte) (*commonpb.Envelope, error) {
	return d.agent.Send(d.Context(ctx), Message{InResponseTo: d.Envelope.GetMessageId(), Payload: payload, CorrelationID: d.Envelope.GetCorrelationId()})
}

// DecodeJSON unmarshals the payload.
func (d *Delivery) DecodeJSON(v any) error { return json.Unmarshal(d.Envelope.GetPayload(), v) }

// Stream is the agent's open inbound stream.
type Stream struct {
	agent  *Agent
	stream grpc.ServerStreamingClient[routerpb.StreamItem]
	ctx    context.Context
	cancel context.CancelFunc
}

// Receive opens the inbound stream. Whatever an earlier stream received but never confirmed
// is delivered again first.
func (a *Agent) Receive(ctx context.Context) (*Stream, error) {
	return a.receive(ctx)
}

// ResumeAfter opens the inbound stream from an offset (§5.5): every unconfirmed delivery up to
// seq counts as processed, and delivery continues after it. An offset older than the server's
// retention fails with codes.FailedPrecondition saying how to recover.
func (a *Agent) ResumeAfter(ctx context.Context, seq int64) (*Stream, error) {
	return a.receive(metadata.AppendToOutgoingContext(ctx, wire.ResumeAfterKey, strconv.FormatInt(seq, 10)))
}

func (a *Agent) receive(ctx context.Context) (*Stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	// Ask for each delivery's trace context (see Delivery.Context).
	s, err := a.router.StreamIncoming(metadata.AppendToOutgoingContext(ctx, wire.TraceItemsKey, "true"), &routerpb.StreamRequest{AgentId: a.id})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("sw4rm: open stream: %w", err)
	}
	return &Stream{agent: a, stream: s, ctx: ctx, cancel: cancel}, nil
}

// Next blocks for the next delivery; io.EOF when the server closed the stream. When the
// delivery is the TIMED_OUT NACK of a message to retry, Next sends the retry before it
// returns (see Agent.SetMaxRetries and Delivery.Retry).
func (s *Stream) Next() (*Delivery, error) {
	item, err := s.stream.Recv()
	// Over HTTP/1.1 the server sends an empty item (seq 0, no msg) when the stream has been
	// silent for a while, so that proxies do not cut it; it is no delivery.
	for err == nil && item.GetSeq() == 0 && item.GetMsg() == nil {
		item, err = s.stream.Recv()
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, err
	}
	d := &Delivery{Envelope: item.GetMsg(), Seq: item.GetSeq(), agent: s.agent}
	d.traceParent = takeTraceParent(d.Envelope)
	s.agent.hlc.observe(d.Envelope.GetHlcTimestamp())
	if p, ok := d.AckPayload(); ok {
		d.Retry, d.RetryErr = s.agent.retry.onAck(s.ctx, s.agent, d.Envelope.GetProducerId(), p)
	}
	return d, nil
}

// Close ends the stream; unconfirmed deliveries are redelivered on the next one.
func (s *Stream) Close() { s.cancel() }
