package telemetry

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Log attribute keys a record's trace context is written under, the names OpenTelemetry's
// log data model gives them, so a log line joins its trace in any backend.
const (
	TraceIDKey = "trace_id"
	SpanIDKey  = "span_id"
)

// LogHandler wraps h so that a record logged with a context that holds a span (the
// *Context functions of slog: InfoContext, Log, …) carries trace_id and span_id. A record
// without one is passed on as it is, so with tracing off the cost is one context lookup.
func LogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(*logHandler); ok {
		return h
	}
	return &logHandler{h}
}

// logHandler is LogHandler's slog.Handler.
type logHandler struct{ slog.Handler }

// Handle adds the span's ids to r, when ctx holds a valid span, and passes it on.
func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		// Cloned: the record's attributes may be shared with another handler (a fan-out).
		r = r.Clone()
		r.AddAttrs(slog.String(TraceIDKey, sc.TraceID().String()), slog.String(SpanIDKey, sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs keeps the wrapper around the handler with attrs.
func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup keeps the wrapper around the handler with the group.
func (h *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{h.Handler.WithGroup(name)}
}
