package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TraceParentHeader is the W3C trace-context key (https://www.w3.org/TR/trace-context/):
// the gRPC metadata key an agent sends its span context under, and the name of the column a
// message's trace context is stored in.
const TraceParentHeader = "traceparent"

// TraceParent is ctx's span context as a W3C `traceparent` value, or "" when ctx carries no
// valid one (always so with tracing off: nothing makes spans then). The router stores it with
// an admitted message, so the message's delivery and ACK join the trace it was sent in.
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c[TraceParentHeader]
}

// WithTraceParent returns ctx carrying the span context a `traceparent` value names, as a
// remote parent, so that spans started in it continue that trace. A value that does not parse
// leaves ctx as it is.
func WithTraceParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{TraceParentHeader: traceparent})
}

// SpanContextOf is the span context a `traceparent` value names; invalid when it does not
// parse.
func SpanContextOf(traceparent string) trace.SpanContext {
	return trace.SpanContextFromContext(WithTraceParent(context.Background(), traceparent))
}
