package sdk

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// HTTP/1.1 (§5.1: HTTP/2 preferred, HTTP/1.1 the fallback). Where HTTP/2 cannot pass — a
// proxy or load balancer that speaks only HTTP/1.1 — the agent calls the same services over
// the Connect protocol with binary protobuf bodies, which the server's gRPC port also serves.
// connectConn is a grpc.ClientConnInterface over a connect client, so every generated client
// and every part of the SDK works unchanged on it: metadata travel as HTTP headers, a
// Connect error comes back as the gRPC status it was (code, message, details), response
// headers and trailers fill grpc.Header and grpc.Trailer, and a deadline is the call's
// Connect-Timeout-Ms. What it cannot carry is a client or bidirectional stream, which
// HTTP/1.1 cannot hold open both ways; no SW4RM service has one.

// EnvTransport names the environment variable that chooses Dial's transport when no option
// does: TransportGRPC (or empty) for gRPC over HTTP/2, TransportHTTP1 for the Connect
// protocol over HTTP/1.1.
const EnvTransport = "SW4RM_TRANSPORT"

// The transports EnvTransport names.
const (
	// TransportGRPC is gRPC over HTTP/2, the default.
	TransportGRPC = "grpc"
	// TransportHTTP1 is the Connect protocol over HTTP/1.1 (WithHTTP1).
	TransportHTTP1 = "http1"
)

// WithHTTP1 makes Dial call the server over HTTP/1.1 with the Connect protocol instead of
// gRPC over HTTP/2, for networks where HTTP/2 does not pass. The Agent's API is the same. TLS
// comes from WithTLS, WithTLSConfig or the SW4RM_TLS_* variables as for gRPC (ALPN offers
// only http/1.1); the other grpc.DialOptions — credentials, interceptors, backoff — are
// gRPC's own and do not apply. Agent.Conn is nil on such an agent; Agent.ClientConn serves
// every generated client.
func WithHTTP1() grpc.DialOption {
	return sdkOption{apply: func(c *dialConfig) { c.transport = TransportHTTP1 }}
}

// WithGRPC makes Dial use gRPC over HTTP/2 whatever SW4RM_TRANSPORT says.
func WithGRPC() grpc.DialOption {
	return sdkOption{apply: func(c *dialConfig) { c.transport = TransportGRPC }}
}

// transportOf is the transport the options chose, else the one SW4RM_TRANSPORT names.
func transportOf(cfg dialConfig) (string, error) {
	if cfg.transport != "" {
		return cfg.transport, nil
	}
	switch v := strings.ToLower(strings.TrimSpace(os.Getenv(EnvTransport))); v {
	case "", TransportGRPC:
		return TransportGRPC, nil
	case TransportHTTP1:
		return TransportHTTP1, nil
	default:
		return "", fmt.Errorf("sw4rm: %s=%q: want %q or %q", EnvTransport, v, TransportGRPC, TransportHTTP1)
	}
}

// errConnClosing is what a call on a closed connection fails with, as gRPC's would.
var errConnClosing = status.Error(codes.Canceled, "sw4rm: the connection is closing")

// connectConn calls the server with the Connect protocol over an HTTP/1.1-only client.
type connectConn struct {
	base      string // scheme://host[:port], without a trailing slash
	http      *http.Client
	transport *http.Transport
	signer    *Signer // nil: calls are not signed

	// closed ends every call in flight when the connection is closed.
	closed context.Context
	close  context.CancelFunc

	mu      sync.Mutex
	clients map[string]*connect.Client[rawMessage, rawMessage] // by method
}

// newConnectConn returns the HTTP/1.1 connection to addr: host:port (a gRPC target such as
// dns:///host:port too), or an http:// or https:// URL. tlsCfg nil means plaintext for a
// host:port.
func newConnectConn(addr string, tlsCfg *tls.Config, signer *Signer) (*connectConn, error) {
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	base := addr
	switch {
	case strings.HasPrefix(addr, "http://"), strings.HasPrefix(addr, "https://"):
	default:
		if _, rest, ok := strings.Cut(addr, ":///"); ok {
			base = rest // a gRPC target's scheme (dns:///, passthrough:///) names a resolver
		}
		if _, _, err := net.SplitHostPort(base); err != nil {
			return nil, fmt.Errorf("sw4rm: dial %s over HTTP/1.1: want host:port or a URL: %w", addr, err)
		}
		base = scheme + "://" + base
	}
	base = strings.TrimRight(base, "/")
	if strings.HasPrefix(base, "https://") {
		if tlsCfg == nil {
			tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		tlsCfg = tlsCfg.Clone()
		// ALPN must not offer h2: the point of this transport is that HTTP/2 is not spoken.
		tlsCfg.NextProtos = []string{"http/1.1"}
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsCfg,
		TLSHandshakeTimeout:   10 * time.Second,
		Protocols:             &protocols,
		ForceAttemptHTTP2:     false,
		TLSNextProto:          map[string]func(string, *tls.Conn) http.RoundTripper{}, // never upgrade to h2
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   32, // HTTP/1.1 holds one call per connection: keep some for reuse
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	closed, cancel := context.WithCancel(context.Background())
	return &connectConn{base: base, http: &http.Client{Transport: tr}, transport: tr, signer: signer,
		closed: closed, close: cancel, clients: map[string]*connect.Client[rawMessage, rawMessage]{}}, nil
}

// Close ends every call in flight and closes the idle connections.
func (c *connectConn) Close() error {
	c.close()
	c.transport.CloseIdleConnections()
	return nil
}

// client is the connect client of one method ("/package.Service/Method").
func (c *connectConn) client(method string) *connect.Client[rawMessage, rawMessage] {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl, ok := c.clients[method]
	if !ok {
		// The Connect protocol (connect's default) with the raw codec, named "proto": the
		// content types are application/proto and application/connect+proto.
		cl = connect.NewClient[rawMessage, rawMessage](c.http, c.base+method, connect.WithCodec(rawCodec{}))
		c.clients[method] = cl
	}
	return cl
}

// callContext is ctx, also ended when the connection closes; call stop when the call ends.
func (c *connectConn) callContext(ctx context.Context) (context.Context, func(), error) {
	if c.closed.Err() != nil {
		return nil, nil, errConnClosing
	}
	ctx, cancel := context.WithCancel(ctx)
	stopAfter := context.AfterFunc(c.closed, cancel)
	return ctx, func() { stopAfter(); cancel() }, nil
}

// encode marshals a request and returns its bytes and the headers to send: the outgoing
// metadata and, when the agent signs and the caller did not, the signature over exactly
// these bytes (the body of a unary call, the payload of a stream's one enveloped message —
// the bytes the server digests).
func (c *connectConn) encode(ctx context.Context, method string, req any) ([]byte, http.Header, error) {
	msg, ok := req.(proto.Message)
	if !ok {
		return nil, nil, status.Errorf(codes.Internal, "sw4rm: %s: a request is a protobuf message, not %T", method, req)
	}
	body, err := proto.Marshal(msg)
	if err != nil {
		return nil, nil, status.Errorf(codes.Internal, "sw4rm: marshal %s request: %v", method, err)
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	h := make(http.Header, len(md)+4)
	for k, vs := range md {
		for _, v := range vs {
			if strings.HasSuffix(k, "-bin") {
				v = connect.EncodeBinaryHeader([]byte(v)) // as gRPC sends binary metadata
			}
			h.Add(k, v)
		}
	}
	if c.signer != nil && len(md.Get(wire.SignatureKey)) == 0 {
		kv, err := c.signer.Sign(method, body)
		if err != nil {
			return nil, nil, status.Error(codes.Internal, err.Error())
		}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
	}
	return body, h, nil
}

// Invoke makes a unary call.
func (c *connectConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	out, ok := reply.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "sw4rm: %s: a reply is a protobuf message, not %T", method, reply)
	}
	body, h, err := c.encode(ctx, method, args)
	if err != nil {
		return err
	}
	ctx, stop, err := c.callContext(ctx)
	if err != nil {
		return err
	}
	defer stop()
	req := connect.NewRequest(&rawMessage{b: body})
	for k, vs := range h {
		req.Header()[k] = vs
	}
	resp, err := c.client(method).CallUnary(ctx, req)
	if err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) {
			md := toMetadata(ce.Meta())
			setCallMetadata(opts, md, md)
		}
		return toStatus(err)
	}
	setCallMetadata(opts, toMetadata(resp.Header()), toMetadata(resp.Trailer()))
	if err := proto.Unmarshal(resp.Msg.b, out); err != nil {
		return status.Errorf(codes.Internal, "sw4rm: unmarshal %s reply: %v", method, err)
	}
	return nil
}

// NewStream opens a server stream: its one request is sent at CloseSend (which the generated
// clients call right after SendMsg), so that the signature, a header, can cover it. A desc
// that streams neither way is a unary call made through the stream API; it is made as a
// Connect unary call, whose header comes with its answer.
func (c *connectConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if desc.ClientStreams {
		return nil, status.Errorf(codes.Unimplemented, "sw4rm: %s streams requests, which HTTP/1.1 cannot carry; dial with gRPC", method)
	}
	ctx, stop, err := c.callContext(ctx)
	if err != nil {
		return nil, err
	}
	return &connectStream{c: c, ctx: ctx, stop: stop, method: method, opts: opts, unary: !desc.ServerStreams, ready: make(chan struct{})}, nil
}

// connectStream is a server stream (or a unary call) over the Connect protocol, as a
// grpc.ClientStream.
type connectStream struct {
	c      *connectConn
	ctx    context.Context
	stop   func()
	method string
	opts   []grpc.CallOption
	unary  bool

	mu   sync.Mutex
	req  any // the one request, until the stream opens
	sent bool

	openOnce sync.Once
	ready    chan struct{} // closed once the server answered the request (or it failed)
	st       *connect.ServerStreamForClient[rawMessage]
	resp     *connect.Response[rawMessage] // a unary call's answer
	header   metadata.MD                   // a unary call's, or a failed call's
	openErr  error

	endOnce sync.Once
	trailer metadata.MD // set when the stream ended
	read    bool        // a unary call's answer was received
}

// SendMsg keeps the stream's one request; CloseSend sends it.
func (s *connectStream) SendMsg(m any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sent || s.req != nil {
		return status.Errorf(codes.Internal, "sw4rm: %s takes one request", s.method)
	}
	s.req = m
	return nil
}

// CloseSend sends the request; RecvMsg and Header wait for the server's answer.
func (s *connectStream) CloseSend() error {
	s.open()
	select {
	case <-s.ready:
		return s.openErr
	default:
		return nil
	}
}

// open sends the request, once. The server's answer comes in the background: connect
// returns from a server stream's call only once the response's headers arrive, which over
// HTTP/1.1 is with the first message — a keep-alive, for an idle inbox, many seconds later —
// whereas a gRPC stream opens at once; RecvMsg waits for it instead.
func (s *connectStream) open() {
	s.openOnce.Do(func() {
		s.mu.Lock()
		req := s.req
		s.req, s.sent = nil, true
		s.mu.Unlock()
		fail := func(err error) {
			var meta metadata.MD
			var ce *connect.Error
			if errors.As(err, &ce) {
				meta = toMetadata(ce.Meta())
			}
			s.header, s.openErr = meta, toStatus(err)
			s.end(meta, meta)
			close(s.ready)
		}
		if req == nil {
			fail(status.Errorf(codes.Internal, "sw4rm: %s: no request was sent", s.method))
			return
		}
		body, h, err := s.c.encode(s.ctx, s.method, req)
		if err != nil {
			fail(err)
			return
		}
		r := connect.NewRequest(&rawMessage{b: body})
		for k, vs := range h {
			r.Header()[k] = vs
		}
		go func() {
			if s.unary {
				resp, err := s.c.client(s.method).CallUnary(s.ctx, r)
				if err != nil {
					fail(err)
					return
				}
				s.resp, s.header = resp, toMetadata(resp.Header())
				close(s.ready)
				return
			}
			st, err := s.c.client(s.method).CallServerStream(s.ctx, r)
			if err != nil {
				fail(err)
				return
			}
			s.st = st
			close(s.ready)
		}()
	})
}

// opened waits for the server's answer to the request.
func (s *connectStream) opened() error {
	s.open()
	<-s.ready // the call ends with its context
	return s.openErr
}

// RecvMsg receives the next message; io.EOF once the server ended the stream cleanly.
func (s *connectStream) RecvMsg(m any) error {
	if err := s.opened(); err != nil {
		return err
	}
	out, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "sw4rm: %s: a reply is a protobuf message, not %T", s.method, m)
	}
	if s.unary {
		s.mu.Lock()
		read := s.read
		s.read = true
		s.mu.Unlock()
		if read {
			return io.EOF
		}
		s.end(s.header, toMetadata(s.resp.Trailer()))
		if err := proto.Unmarshal(s.resp.Msg.b, out); err != nil {
			return status.Errorf(codes.Internal, "sw4rm: unmarshal %s reply: %v", s.method, err)
		}
		return nil
	}
	if s.st.Receive() {
		if err := proto.Unmarshal(s.st.Msg().b, out); err != nil {
			return status.Errorf(codes.Internal, "sw4rm: unmarshal %s reply: %v", s.method, err)
		}
		return nil
	}
	err := s.st.Err()
	trailer := toMetadata(s.st.ResponseTrailer())
	var ce *connect.Error
	if errors.As(err, &ce) && len(trailer) == 0 {
		trailer = toMetadata(ce.Meta())
	}
	s.end(toMetadata(s.st.ResponseHeader()), trailer)
	if err == nil {
		return io.EOF
	}
	return toStatus(err)
}

// end records the stream's end: its trailer, the grpc.Header and grpc.Trailer call options,
// and the release of its context and connection.
func (s *connectStream) end(header, trailer metadata.MD) {
	s.endOnce.Do(func() {
		s.mu.Lock()
		s.trailer = trailer
		s.mu.Unlock()
		setCallMetadata(s.opts, header, trailer)
		if s.st != nil {
			_ = s.st.Close()
		}
		s.stop()
	})
}

// Header waits for the server's response header: a stream's first, a unary call's with its
// answer. A failed call's header is its error's metadata, with the error.
func (s *connectStream) Header() (metadata.MD, error) {
	if err := s.opened(); err != nil {
		return s.header, err
	}
	if s.unary {
		return s.header, nil
	}
	return toMetadata(s.st.ResponseHeader()), nil
}

// Trailer is the server's trailer once the stream ended (RecvMsg returned an error).
func (s *connectStream) Trailer() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trailer
}

// Context is the stream's context.
func (s *connectStream) Context() context.Context { return s.ctx }

// setCallMetadata fills the grpc.Header and grpc.Trailer options among opts.
func setCallMetadata(opts []grpc.CallOption, header, trailer metadata.MD) {
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			if o.HeaderAddr != nil {
				*o.HeaderAddr = header
			}
		case grpc.TrailerCallOption:
			if o.TrailerAddr != nil {
				*o.TrailerAddr = trailer
			}
		}
	}
}

// protocolHeaders are the HTTP and Connect headers that are not the server's metadata.
var protocolHeaders = map[string]bool{
	"content-type": true, "content-length": true, "content-encoding": true, "transfer-encoding": true,
	"connection": true, "keep-alive": true, "date": true, "vary": true, "accept-encoding": true,
	"connect-content-encoding": true, "connect-accept-encoding": true,
	"grpc-status": true, "grpc-message": true, "grpc-status-details-bin": true,
}

// toMetadata is h as gRPC metadata: lowercase keys, binary values decoded, the protocol's own
// headers left out.
func toMetadata(h http.Header) metadata.MD {
	md := make(metadata.MD, len(h))
	for k, vs := range h {
		k = strings.ToLower(k)
		if protocolHeaders[k] {
			continue
		}
		for _, v := range vs {
			if strings.HasSuffix(k, "-bin") {
				if b, err := connect.DecodeBinaryHeader(v); err == nil {
					v = string(b)
				}
			}
			md[k] = append(md[k], v)
		}
	}
	return md
}

// toStatus is err as the gRPC status the server answered (code, message and details), or, for
// an error of the client's own, as the status gRPC would give it.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return status.FromContextError(err).Err()
		}
		return status.Error(codes.Unknown, err.Error())
	}
	if !connect.IsWireError(ce) && errors.Is(ce, io.ErrUnexpectedEOF) {
		// Not the server's answer but connect-go's account of a connection that broke
		// mid-message ("incomplete envelope", InvalidArgument): over gRPC that is
		// Unavailable, the code callers (Serve among them) retry.
		return status.Error(codes.Unavailable, ce.Message())
	}
	sp := &spb.Status{Code: int32(ce.Code()), Message: ce.Message()}
	for _, d := range ce.Details() {
		sp.Details = append(sp.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
	}
	return status.FromProto(sp).Err()
}

// rawMessage is a message as its protobuf bytes: a request already marshalled (and signed),
// or a reply not yet unmarshalled into the caller's message.
type rawMessage struct{ b []byte }

// rawCodec passes rawMessage bytes through; it is "proto" on the wire.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(*rawMessage)
	if !ok {
		return nil, fmt.Errorf("sw4rm: the raw codec marshals *rawMessage, not %T", v)
	}
	return m.b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("sw4rm: the raw codec unmarshals into *rawMessage, not %T", v)
	}
	// connect reuses its read buffers: keep a copy.
	m.b = append([]byte(nil), data...)
	return nil
}
