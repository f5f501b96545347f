package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"

	"go.opentelemetry.io/otel/trace"

	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/telemetry"
)

// traceKey is the member of an entry's JSON payload that carries the W3C `traceparent` of
// the write that made it (Stamp). Handlers decode the payload into their own types, which
// ignore it.
const traceKey = "traceparent"

// Stamp returns h with the `traceparent` of ctx's span in its payload, so that a relay that
// delivers it later — after a failed in-line attempt, or after its writer died — makes the
// signal or start in the writer's trace rather than in none. With tracing off, without a
// span, or for a payload that is not a JSON object, h is returned as it is.
func Stamp(ctx context.Context, h store.OutboxEntry) store.OutboxEntry {
	tp := telemetry.TraceParent(ctx)
	p := bytes.TrimSpace(h.Payload)
	if tp == "" || len(p) < 2 || p[0] != '{' {
		return h
	}
	rest := bytes.TrimSpace(p[1:])
	out := make([]byte, 0, len(p)+len(tp)+20)
	out = append(out, '{')
	out = append(out, strconv.Quote(traceKey)...)
	out = append(out, ':')
	out = append(out, strconv.Quote(tp)...) // a traceparent is plain ASCII: quoting is JSON
	if rest[0] != '}' {
		out = append(out, ',')
	}
	h.Payload = append(out, rest...)
	return h
}

// traceContext returns ctx, or, when ctx carries no span (the relay's own loop, a held
// entry's timer), ctx continuing the trace h was stamped with.
func traceContext(ctx context.Context, h store.OutboxEntry) context.Context {
	if !telemetry.Enabled() || trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	var p struct {
		TraceParent string `json:"traceparent"`
	}
	if json.Unmarshal(h.Payload, &p) != nil {
		return ctx
	}
	return telemetry.WithTraceParent(ctx, p.TraceParent)
}
