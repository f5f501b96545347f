package sdk

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// traceConn sends the span context of each call's ctx as W3C `traceparent` (and `tracestate`)
// metadata, over gRPC and HTTP/1.1 alike: a delivery's context (Delivery.Context), so that the
// agent's ACKs and replies continue the message's trace; or the agent's own span, so that the
// server's spans of the call join the agent's trace (docs/observability.md, "Traces").
//
// It makes no span: an agent that wants client spans of its own calls passes otelgrpc's client
// handler to Dial (grpc.WithStatsHandler(otelgrpc.NewClientHandler())), which then sets the
// same keys to its span's context. A call whose ctx carries no span pays one context lookup.
type traceConn struct {
	grpc.ClientConnInterface
}

// Invoke implements grpc.ClientConnInterface.
func (c traceConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return c.ClientConnInterface.Invoke(withTraceContext(ctx), method, args, reply, opts...)
}

// NewStream implements grpc.ClientConnInterface.
func (c traceConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.ClientConnInterface.NewStream(withTraceContext(ctx), desc, method, opts...)
}

// withTraceContext adds ctx's span context to its outgoing metadata, when it has a valid one.
func withTraceContext(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	kv := make([]string, 0, 2*len(carrier))
	for k, v := range carrier {
		kv = append(kv, k, v)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}
