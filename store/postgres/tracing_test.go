package postgres

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sw4rm/sw4rm-temporal/store/postgres/pgtest"
	"github.com/sw4rm/sw4rm-temporal/telemetry"
)

// TestStatementSpans: with tracing on, a statement run for a traced call is a client span
// under the call's span, named by its operation and table; a statement without a span in its
// context (background work) makes none; with tracing off nothing is recorded.
func TestStatementSpans(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.NewDatabase(t), nil)
	require.NoError(t, err)
	defer s.Close()

	rec := tracetest.NewSpanRecorder()
	telemetry.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	defer telemetry.Uninstall()

	_, err = s.pool.Exec(ctx, "SELECT count(*) FROM messages")
	require.NoError(t, err)
	require.Empty(t, rec.Ended(), "a statement outside any trace made a span")

	callCtx, call := telemetry.Tracer().Start(ctx, "call")
	_, err = s.pool.Exec(callCtx, "SELECT count(*) FROM messages")
	require.NoError(t, err)
	_, err = s.pool.Exec(callCtx, "SELECT * FROM no_such_table")
	require.Error(t, err)
	call.End()

	ended := rec.Ended()
	require.Len(t, ended, 3)
	require.Equal(t, "SELECT messages", ended[0].Name())
	require.Equal(t, call.SpanContext().SpanID(), ended[0].Parent().SpanID())
	require.Equal(t, "SELECT no_such_table", ended[1].Name())
	require.Equal(t, "Error", ended[1].Status().Code.String())
	require.Equal(t, "call", ended[2].Name())

	telemetry.Uninstall()
	callCtx, call = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("t").Start(ctx, "off")
	_, err = s.pool.Exec(callCtx, "SELECT 1")
	require.NoError(t, err)
	call.End()
	require.Len(t, rec.Ended(), 4, "tracing off recorded a statement")
}

// TestSpanName names statements as OpenTelemetry's database conventions suggest.
func TestSpanName(t *testing.T) {
	for sql, want := range map[string]string{
		"SELECT a FROM messages WHERE x":         "SELECT messages",
		"INSERT INTO deliveries (a) VALUES ($1)": "INSERT deliveries",
		"UPDATE agents SET x = 1":                "UPDATE agents",
		"DELETE FROM nonces WHERE t < $1":        "DELETE nonces",
		"WITH x AS (SELECT 1) SELECT * FROM x":   "WITH",
		"  ":                                     "SQL",
		"SELECT 1":                               "SELECT",
	} {
		require.Equal(t, want, spanName(sql), sql)
	}
}
