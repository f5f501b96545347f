package postgres

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sw4rm/sw4rm-temporal/telemetry"
)

// queryTracer makes a client span of each statement, and of each batch, run on behalf of a
// traced call: the admission, the stream's fetch and the ACK of a message show their SQL in
// the message's trace. A statement whose context carries no span (the sweeps, the outbox
// relay's polling, the group commit's flushers) makes none, so background work never starts
// traces of its own; with tracing off the check is one atomic load.
type queryTracer struct{}

var (
	_ pgx.QueryTracer = queryTracer{}
	_ pgx.BatchTracer = queryTracer{}
)

// traced reports whether ctx belongs to a traced call.
func traced(ctx context.Context) bool {
	return telemetry.Enabled() && trace.SpanContextFromContext(ctx).IsValid()
}

// startSpan starts a statement's span named by its first SQL keyword and table, as
// OpenTelemetry's database conventions suggest ("SELECT messages").
func startSpan(ctx context.Context, sql string) context.Context {
	ctx, _ = telemetry.Tracer().Start(ctx, spanName(sql), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", "postgresql"), attribute.String("db.query.text", sql)))
	return ctx
}

// spanName is the statement's operation and, when found, its first table.
func spanName(sql string) string {
	f := strings.Fields(sql)
	if len(f) == 0 {
		return "SQL"
	}
	op := strings.ToUpper(f[0])
	if op == "WITH" {
		return "WITH"
	}
	for i, w := range f[:len(f)-1] {
		switch strings.ToUpper(w) {
		case "FROM", "INTO", "UPDATE":
			if i > 0 || op == "UPDATE" {
				return op + " " + strings.Trim(f[i+1], `"(`)
			}
		}
	}
	return op
}

// endSpan ends the span ctx holds, with err as its status.
func endSpan(ctx context.Context, err error) {
	span := trace.SpanFromContext(ctx)
	if err != nil && err != pgx.ErrNoRows {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// TraceQueryStart implements pgx.QueryTracer.
func (queryTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !traced(ctx) {
		return ctx
	}
	return context.WithValue(startSpan(ctx, data.SQL), tracedKey{}, true)
}

// TraceQueryEnd implements pgx.QueryTracer.
func (queryTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	if ctx.Value(tracedKey{}) == nil {
		return
	}
	endSpan(ctx, data.Err)
}

// TraceBatchStart implements pgx.BatchTracer: one span for the batch.
func (queryTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if !traced(ctx) {
		return ctx
	}
	ctx, _ = telemetry.Tracer().Start(ctx, "batch", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", "postgresql"), attribute.Int("db.operation.batch.size", data.Batch.Len())))
	return context.WithValue(ctx, tracedKey{}, true)
}

// TraceBatchQuery implements pgx.BatchTracer; the batch's span covers its statements.
func (queryTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (queryTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	if ctx.Value(tracedKey{}) == nil {
		return
	}
	endSpan(ctx, data.Err)
}

// tracedKey marks a context whose statement started a span, so that its end ends that span
// and not the caller's.
type tracedKey struct{}
