package telemetry

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// TestServerHandler: a call gets otelgrpc's server span, continuing its `traceparent`; a call
// whose handler makes its own span gets none, but its context continues the caller's trace;
// with tracing off, nothing is made or extracted.
func TestServerHandler(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	defer Uninstall()
	const own = "/sw4rm.router.RouterService/SendMessage"
	h := ServerHandler(own)
	parent := "00-0102030405060708090a0b0c0d0e0f10-1112131415161718-01"
	incoming := func() context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", parent))
	}
	call := func(method string) context.Context {
		ctx := h.TagRPC(incoming(), &stats.RPCTagInfo{FullMethodName: method})
		h.HandleRPC(ctx, &stats.End{Error: status.Error(codes.OK, "")})
		return ctx
	}

	ctx := call(own)
	sc := trace.SpanContextFromContext(ctx)
	require.Equal(t, "0102030405060708090a0b0c0d0e0f10", sc.TraceID().String(), "the own call continues the caller's trace")
	require.True(t, sc.IsRemote(), "no span was started for it")
	require.Empty(t, rec.Ended())

	call("/sw4rm.registry.RegistryService/Heartbeat")
	require.Len(t, rec.Ended(), 1)
	span := rec.Ended()[0]
	require.Equal(t, "sw4rm.registry.RegistryService/Heartbeat", span.Name())
	require.Equal(t, "0102030405060708090a0b0c0d0e0f10", span.SpanContext().TraceID().String())
	require.Equal(t, "1112131415161718", span.Parent().SpanID().String())

	call("/grpc.health.v1.Health/Check")
	require.Len(t, rec.Ended(), 1, "health checks get no span")

	Uninstall()
	ctx = call("/sw4rm.registry.RegistryService/Heartbeat")
	require.False(t, trace.SpanContextFromContext(ctx).IsValid(), "tracing off extracted a context")
	ctx = call(own)
	require.False(t, trace.SpanContextFromContext(ctx).IsValid(), "tracing off extracted a context")
	require.Len(t, rec.Ended(), 1)
}
