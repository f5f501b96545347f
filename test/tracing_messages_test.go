package test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/telemetry"
)

// TestMessageTrace: with tracing on, one message is one trace, from the producer's own span
// through SendMessage, the router's "send <recipient>", the "deliver" on the consumer's
// stream, the consumer's AckDelivery ("confirm") and ACK ("ack"), to the forwarded ACKs'
// "deliver" on the producer's stream — continued (a) by an SDK consumer, which does it by
// itself, and (b) by a consumer on the canonical generated stubs alone, which asks for the
// trace context with sw4rm-trace-items, reads it from the content_type parameter
// sw4rm-traceparent and sends it back as `traceparent` metadata — and (c) by an SDK consumer
// over HTTP/1.1, where all of it travels as Connect headers. The recorder is
// process-wide: the test is not parallel, and reads spans by trace.
func TestMessageTrace(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) { testMessageTrace(t, kind) })
	}
}

// testMessageTrace is TestMessageTrace on one store: PostgreSQL keeps the trace context in
// the messages' and deliveries' traceparent columns, the memory store in its rows.
func testMessageTrace(t *testing.T, kind string) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	telemetry.Install(tp)
	t.Cleanup(func() {
		telemetry.Uninstall()
		_ = tp.Shutdown(context.Background())
	})
	sys := start(t, newConfig(t, kind))
	spans := spanTree{rec: rec}
	ctx := context.Background()

	a := dialAgent(t, sys, "a")
	aStream, err := a.Receive(ctx)
	require.NoError(t, err)
	t.Cleanup(aStream.Close)
	waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)
	// A confirms whatever reaches it (registry notices, the forwarded ACKs).
	go func() {
		for {
			d, err := aStream.Next()
			if err != nil {
				return
			}
			_, _ = d.Confirm(ctx)
		}
	}()

	// send sends one message from A to "to" inside a producer span of its own, and returns
	// that span's trace.
	send := func(t *testing.T, to string) (trace.TraceID, string) {
		pctx, producer := tp.Tracer("test").Start(ctx, "producer")
		env, err := a.Send(pctx, sdk.Message{To: to, Payload: []byte(`{"n":1}`)})
		require.NoError(t, err)
		producer.End()
		return producer.SpanContext().TraceID(), env.GetMessageId()
	}
	// requireTree checks the message's trace: send under the producer, deliver to the
	// consumer under send, the consumer's confirm and ack, and the forwarded ACKs' deliveries
	// to A, all in the one trace.
	requireTree := func(t *testing.T, id trace.TraceID, consumer string) {
		var tr []sdktrace.ReadOnlySpan
		require.Eventually(t, func() bool {
			tr = spans.inTrace(id)
			n := 0
			for _, sp := range tr {
				if sp.Name() == "deliver" && attr(sp, "messaging.destination.name") == a.ID() {
					n++ // RECEIVED (from the confirmation) and FULFILLED (from the ACK)
				}
			}
			return n == 2
		}, 10*time.Second, 50*time.Millisecond, "the ACKs' deliveries to the producer join the trace")
		byName := func(name, dest string) sdktrace.ReadOnlySpan {
			for _, sp := range tr {
				if sp.Name() == name && (dest == "" || attr(sp, "messaging.destination.name") == dest) {
					return sp
				}
			}
			require.Failf(t, "span missing", "%s (to %q) not in the trace: %s", name, dest, names(tr))
			return nil
		}
		producer := byName("producer", "")
		sendSpan := byName("send "+consumer, "")
		require.Equal(t, producer.SpanContext().SpanID(), sendSpan.Parent().SpanID(), "SendMessage's send continues the producer's span: %s", names(tr))
		deliver := byName("deliver", consumer)
		require.Equal(t, sendSpan.SpanContext().SpanID(), deliver.Parent().SpanID(), "deliver is a child of send")
		confirm := byName("confirm", consumer)
		require.Equal(t, deliver.SpanContext().SpanID(), confirm.Parent().SpanID(), "the consumer's AckDelivery continues the delivery")
		ack := byName("ack", "")
		require.Equal(t, deliver.SpanContext().SpanID(), ack.Parent().SpanID(), "the consumer's ACK continues the delivery")
		for _, sp := range tr {
			// The router's spans are the calls' spans: no RPC span of SendMessage or
			// AckDelivery stands between a step and the next (frontend.RouterSpannedCalls).
			require.NotContains(t, sp.Name(), "RouterService/", "a router call's span beside the router's own: %s", names(tr))
		}
		for _, sp := range tr {
			if sp.Name() == "deliver" && attr(sp, "messaging.destination.name") == a.ID() {
				require.True(t, ancestor(tr, sp, "confirm") || ancestor(tr, sp, "ack"), "a forwarded ACK's delivery follows what admitted it")
			}
		}
	}

	sdkConsumer := func(t *testing.T, name string, opts ...grpc.DialOption) {
		b := dialAgent(t, sys, name, opts...)
		bStream, err := b.Receive(ctx)
		require.NoError(t, err)
		t.Cleanup(bStream.Close)
		id, msgID := send(t, b.ID())
		var d *sdk.Delivery
		for d == nil || d.Envelope.GetMessageId() != msgID {
			d, err = bStream.Next()
			require.NoError(t, err)
			if d.Envelope.GetMessageId() != msgID {
				_, _ = d.Confirm(ctx)
			}
		}
		require.Equal(t, "application/json", d.Envelope.GetContentType(), "the SDK hands the content type on as sent")
		require.Equal(t, id, telemetry.SpanContextOf(d.TraceParent()).TraceID(), "the delivery carries the message's trace")
		require.Equal(t, id, trace.SpanContextFromContext(d.Context(ctx)).TraceID(), "the handler's ctx continues it")
		_, err = d.Confirm(ctx)
		require.NoError(t, err)
		require.NoError(t, d.Ack(ctx, commonpb.AckStage_FULFILLED, 0, ""))
		requireTree(t, id, b.ID())
	}
	t.Run("sdk consumer", func(t *testing.T) { sdkConsumer(t, "b") })
	// Over HTTP/1.1 (Connect), the stream's trace-items request and the traceparent of the
	// consumer's calls are HTTP headers, which vanguard passes on as metadata.
	t.Run("sdk consumer over HTTP/1.1", func(t *testing.T) { sdkConsumer(t, "h", sdk.WithHTTP1()) })

	t.Run("raw consumer", func(t *testing.T) {
		c := dialAgent(t, sys, "c") // registered through the SDK; its stream and ACKs are raw
		conn, err := grpc.NewClient(sys.app.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		router := routerpb.NewRouterServiceClient(conn)
		sctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(ctx, wire.TraceItemsKey, "true"))
		t.Cleanup(cancel)
		stream, err := router.StreamIncoming(sctx, &routerpb.StreamRequest{AgentId: c.ID()})
		require.NoError(t, err)
		id, msgID := send(t, c.ID())
		var item *routerpb.StreamItem
		for item == nil || item.GetMsg().GetMessageId() != msgID {
			item, err = stream.Recv()
			require.NoError(t, err)
		}
		ct := item.GetMsg().GetContentType()
		marker := "; " + wire.TraceParentParam + "="
		i := strings.LastIndex(ct, marker)
		require.GreaterOrEqual(t, i, 0, "content_type %q carries the trace context", ct)
		require.Equal(t, "application/json", ct[:i])
		traceparent := ct[i+len(marker):]
		require.Equal(t, id, telemetry.SpanContextOf(traceparent).TraceID())

		actx := metadata.AppendToOutgoingContext(ctx, "traceparent", traceparent)
		resp, err := router.AckDelivery(actx, &routerpb.DeliveryAckRequest{AgentId: c.ID(), Seq: item.GetSeq(), MessageId: msgID})
		require.NoError(t, err)
		require.True(t, resp.GetRecorded())
		ack := protocol.NewAckEnvelope(protocol.AckEnvelopeInput{MessageID: uuid.NewString(), ProducerID: c.ID(),
			CorrelationID: item.GetMsg().GetCorrelationId(),
			Ack:           protocol.AckPayload{AckForMessageID: msgID, Stage: commonpb.AckStage_FULFILLED}})
		sent, err := router.SendMessage(actx, &routerpb.SendMessageRequest{Msg: ack})
		require.NoError(t, err)
		require.True(t, sent.GetAccepted(), sent.GetReason())
		requireTree(t, id, c.ID())
	})
}
