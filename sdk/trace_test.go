package sdk

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// captureConn records the outgoing metadata of the last call.
type captureConn struct{ md metadata.MD }

func (c *captureConn) Invoke(ctx context.Context, _ string, _, _ any, _ ...grpc.CallOption) error {
	c.md, _ = metadata.FromOutgoingContext(ctx)
	return nil
}

func (c *captureConn) NewStream(ctx context.Context, _ *grpc.StreamDesc, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	c.md, _ = metadata.FromOutgoingContext(ctx)
	return nil, nil
}

// TestTraceConnSendsTheSpanContext: a call whose ctx carries a span context (a delivery's)
// sends it as `traceparent`, on unary calls and streams; a call without one sends none.
func TestTraceConnSendsTheSpanContext(t *testing.T) {
	inner := &captureConn{}
	conn := traceConn{inner}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true})
	want := "00-01020300000000000000000000000000-0405060000000000-01"

	require.NoError(t, conn.Invoke(context.Background(), "/m", nil, nil))
	require.Empty(t, inner.md.Get("traceparent"))

	ctx := trace.ContextWithRemoteSpanContext(metadata.AppendToOutgoingContext(context.Background(), "k", "v"), sc)
	require.NoError(t, conn.Invoke(ctx, "/m", nil, nil))
	require.Equal(t, []string{want}, inner.md.Get("traceparent"))
	require.Equal(t, []string{"v"}, inner.md.Get("k"), "the caller's metadata is kept")

	_, err := conn.NewStream(ctx, &grpc.StreamDesc{}, "/s")
	require.NoError(t, err)
	require.Equal(t, []string{want}, inner.md.Get("traceparent"))
}
