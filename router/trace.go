package router

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/telemetry"
)

// A message's trace (§19; docs/observability.md, "Traces"): the producer's SendMessage call
// and the router's "send <recipient>" span under it, whose context is stored with the
// message (store.AdmitRequest.TraceParent); a "deliver" span per delivery on the consumer's
// stream, a child of the stored context (DeliverSpan); the consumer's AckDelivery
// ("confirm") and ACK ("ack") under the `traceparent` the consumer sends back, linked to
// the message's trace when it sends none; and the forwarded ACK's delivery on the
// producer's stream, a child of the "ack" or "confirm" that admitted it. Every span is
// made only while telemetry.Enabled(), so with tracing off none of this costs anything.

// Attribute keys of the router's spans, after OpenTelemetry's messaging conventions.
const (
	attrSystem      = attribute.Key("messaging.system")
	attrOperation   = attribute.Key("messaging.operation.type")
	attrMessageID   = attribute.Key("messaging.message.id")
	attrCorrelation = attribute.Key("messaging.message.conversation_id")
	attrDestination = attribute.Key("messaging.destination.name")
	attrMessageType = attribute.Key("sw4rm.message.type")
	attrSeq         = attribute.Key("sw4rm.delivery.seq")
	attrErrorCode   = attribute.Key("sw4rm.message.error_code")
)

// noSpan is the span of a call made with tracing off: it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// startSpan starts one of the router's spans in ctx, or returns ctx and noSpan with
// tracing off.
func startSpan(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return ctx, noSpan
	}
	return telemetry.Tracer().Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// sendSpan starts the span of Send: "ack" for an ACK, else "send <recipient>" (the
// addressing metadata, or the scheduler's id; a response routes by its request, and its
// span is named "send").
func sendSpan(ctx context.Context, env *commonpb.Envelope, recipient string) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return ctx, noSpan
	}
	attrs := []attribute.KeyValue{attrSystem.String("sw4rm"), attrMessageID.String(env.GetMessageId()),
		attrCorrelation.String(env.GetCorrelationId()), attrMessageType.String(env.GetMessageType().String())}
	if env.GetMessageType() == commonpb.MessageType_ACKNOWLEDGEMENT {
		return startSpan(ctx, "ack", trace.SpanKindConsumer, append(attrs, attrOperation.String("settle"))...)
	}
	name := "send"
	if recipient != "" {
		name += " " + recipient
		attrs = append(attrs, attrDestination.String(recipient))
	}
	return startSpan(ctx, name, trace.SpanKindProducer, append(attrs, attrOperation.String("send"))...)
}

// endSpan ends span with Send's outcome: a refusal or a failure is its error status.
func endSpan(span trace.Span, perr *protocol.Error, err error) {
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case perr != nil:
		span.SetAttributes(attrErrorCode.String(perr.Code.String()))
		span.SetStatus(codes.Error, perr.Code.String())
	}
	span.End()
}

// linkMessage links the span in ctx to the trace a message was admitted in, when it is
// another trace: an "ack" or "confirm" whose consumer sent no `traceparent` stands in a trace
// of its own, and the link leads from it to the message's.
func linkMessage(ctx context.Context, rec store.MessageRecord) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() || rec.TraceParent == "" {
		return
	}
	if sc := telemetry.SpanContextOf(rec.TraceParent); sc.IsValid() && sc.TraceID() != span.SpanContext().TraceID() {
		span.AddLink(trace.Link{SpanContext: sc})
	}
}

// DeliverSpan starts the "deliver" span of d on its agent's stream, a child of the trace
// context stored with it, and returns the span and its `traceparent` (which the frontend
// hands to an agent that asked for it, wire.TraceParentParam). A delivery without a stored
// context — admitted with tracing off — gets no span, and the stored value (empty) is
// returned as it is. The span belongs to the message, never to the long-lived stream.
func DeliverSpan(ctx context.Context, d store.Delivery) (trace.Span, string) {
	if !telemetry.Enabled() || d.TraceParent == "" {
		return noSpan, d.TraceParent
	}
	parent := telemetry.SpanContextOf(d.TraceParent)
	if !parent.IsValid() {
		return noSpan, ""
	}
	// ContextWithRemoteSpanContext replaces the stream call's span as the parent.
	ctx, span := telemetry.Tracer().Start(trace.ContextWithRemoteSpanContext(ctx, parent), "deliver",
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attrSystem.String("sw4rm"), attrOperation.String("send"),
			attrMessageID.String(d.Envelope.GetMessageId()), attrCorrelation.String(d.Envelope.GetCorrelationId()),
			attrDestination.String(d.AgentID), attrMessageType.String(d.Envelope.GetMessageType().String()),
			attrSeq.Int64(d.Seq)))
	return span, telemetry.TraceParent(ctx)
}
