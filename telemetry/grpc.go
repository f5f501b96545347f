package telemetry

import (
	"context"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// ServerHandler is the gRPC server's span per call (otelgrpc), continuing the caller's trace
// from its `traceparent` metadata. The frontend installs it only while Enabled: with tracing
// off no handler runs at all. Connect and gRPC-Web calls reach the same grpc.Server through
// vanguard, which passes their HTTP headers on as metadata, so they get it too. Health checks
// are left out: probes poll them, and their spans would bury the protocol's.
//
// The calls named in own get no span of their own: their handler makes the span that says
// what the call did (the router's "send", "ack" and "confirm" of SendMessage and
// AckDelivery), so a message's step is one span, not an RPC span with the step under it.
// Their caller's trace context is still extracted before the interceptors run, so the
// authentication's audit rows and the handler's span continue it.
func ServerHandler(own ...string) stats.Handler {
	h := &serverHandler{
		otel: otelgrpc.NewServerHandler(
			otelgrpc.WithPropagators(Propagator()),
			otelgrpc.WithFilter(func(info *stats.RPCTagInfo) bool {
				return !strings.HasPrefix(info.FullMethodName, "/grpc.health.v1.")
			})),
		own: map[string]bool{},
	}
	for _, m := range own {
		h.own[m] = true
	}
	return h
}

// serverHandler is otelgrpc's server handler but for the calls whose handler makes their span.
type serverHandler struct {
	otel stats.Handler
	own  map[string]bool
}

// otelCall marks the context of a call otelgrpc makes the span of.
type otelCall struct{}

// TagRPC implements stats.Handler. A call made while tracing is off (Uninstall after the
// handler was installed) is left alone.
func (h *serverHandler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	switch {
	case !Enabled():
		return ctx
	case h.own[info.FullMethodName]:
		return ExtractIncoming(ctx)
	}
	return context.WithValue(h.otel.TagRPC(ctx, info), otelCall{}, true)
}

// HandleRPC implements stats.Handler.
func (h *serverHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if ctx.Value(otelCall{}) != nil {
		h.otel.HandleRPC(ctx, s)
	}
}

// TagConn implements stats.Handler.
func (h *serverHandler) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	return h.otel.TagConn(ctx, info)
}

// HandleConn implements stats.Handler.
func (h *serverHandler) HandleConn(ctx context.Context, s stats.ConnStats) { h.otel.HandleConn(ctx, s) }

// ExtractIncoming returns ctx with the remote span context of the call's incoming
// `traceparent` (and `tracestate`, baggage) metadata, when it has any.
func ExtractIncoming(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	return Propagator().Extract(ctx, metadataCarrier(md))
}

// metadataCarrier reads and writes W3C trace context in gRPC metadata.
type metadataCarrier metadata.MD

// Get implements propagation.TextMapCarrier.
func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set implements propagation.TextMapCarrier.
func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

// Keys implements propagation.TextMapCarrier.
func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// ClientHandler is the client side of ServerHandler, for the process's own connections to
// the frontend (the console's): it sends the caller's span as `traceparent`.
func ClientHandler() stats.Handler {
	return otelgrpc.NewClientHandler(otelgrpc.WithPropagators(Propagator()))
}
