package outbox

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/telemetry"
)

// TestStampCarriesTheWritersTrace: a stamped entry's payload still decodes as its handler's
// type, and a relay context without a span continues the writer's trace from it; with
// tracing off, or without a span, nothing is added.
func TestStampCarriesTheWritersTrace(t *testing.T) {
	h := store.OutboxEntry{ID: "e", Kind: "k", Payload: []byte(`{"AgentID":"a"}`)}
	empty := store.OutboxEntry{ID: "f", Kind: "k", Payload: []byte(`{}`)}
	require.Equal(t, h, Stamp(context.Background(), h), "no span, no stamp")

	tp := sdktrace.NewTracerProvider()
	telemetry.Install(tp)
	t.Cleanup(telemetry.Uninstall)
	ctx, span := tp.Tracer("t").Start(context.Background(), "write")
	defer span.End()

	for _, e := range []store.OutboxEntry{h, empty} {
		s := Stamp(ctx, e)
		var p map[string]any
		require.NoError(t, json.Unmarshal(s.Payload, &p), string(s.Payload))
		require.Equal(t, telemetry.TraceParent(ctx), p["traceparent"])
		rctx := traceContext(context.Background(), s)
		require.Equal(t, span.SpanContext().TraceID(), trace.SpanContextFromContext(rctx).TraceID())
		// A context with its own span keeps it (the in-line attempt, inside the writer's call).
		_, other := tp.Tracer("t").Start(context.Background(), "other")
		octx := trace.ContextWithSpan(context.Background(), other)
		require.Equal(t, other.SpanContext(), trace.SpanContextFromContext(traceContext(octx, s)))
		other.End()
	}
	require.Equal(t, "a", func() string {
		var p struct{ AgentID string }
		require.NoError(t, json.Unmarshal(Stamp(ctx, h).Payload, &p))
		return p.AgentID
	}())
}
