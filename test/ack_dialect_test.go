package test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// dialectAgent registers a raw agent over a connection of its own, dialled with opts (a
// user-agent, say), and opens its stream with the request metadata md.
func dialectAgent(t *testing.T, sys *system, name string, md metadata.MD, opts ...grpc.DialOption) (*rawAgent, routerpb.RouterService_StreamIncomingClient) {
	t.Helper()
	conn, err := grpc.NewClient(sys.app.GRPCAddr(), append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	a := &rawAgent{id: uniq(t, name), conn: conn, router: routerpb.NewRouterServiceClient(conn)}
	resp, err := registrypb.NewRegistryServiceClient(conn).RegisterAgent(context.Background(), &registrypb.RegisterAgentRequest{Agent: &registrypb.AgentDescriptor{
		AgentId: a.id, Name: name, ModalitiesSupported: []string{"application/json"}}})
	require.NoError(t, err)
	require.True(t, resp.GetAccepted(), resp.GetReason())
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(context.Background(), md))
	t.Cleanup(cancel)
	s, err := a.router.StreamIncoming(ctx, &routerpb.StreamRequest{AgentId: a.id})
	require.NoError(t, err)
	return a, s
}

// nextAck reads the stream until an ACKNOWLEDGEMENT arrives and returns its payload's
// ack_stage and error_code as written (a JSON string or number), confirming every item.
func nextAck(t *testing.T, a *rawAgent, s routerpb.RouterService_StreamIncomingClient) (stage, code any) {
	t.Helper()
	for {
		item, err := s.Recv()
		require.NoError(t, err)
		_, err = a.router.AckDelivery(context.Background(), &routerpb.DeliveryAckRequest{AgentId: a.id, Seq: item.GetSeq(), MessageId: item.GetMsg().GetMessageId()})
		require.NoError(t, err)
		if item.GetMsg().GetMessageType() != commonpb.MessageType_ACKNOWLEDGEMENT {
			continue
		}
		var p map[string]any
		require.NoError(t, json.Unmarshal(item.GetMsg().GetPayload(), &p), "%s", item.GetMsg().GetPayload())
		assert.Equal(t, uint64(len(item.GetMsg().GetPayload())), item.GetMsg().GetContentLength())
		return p["ack_stage"], p["error_code"]
	}
}

// TestAckDialects (#29 item 16): on both stores, the server writes the ACKs an agent receives
// in the agent's dialect. The published JS and Python SDKs write ack_stage and error_code as
// enum numbers and wait for the server's ACKs by comparing numbers, so answered in names
// their waits never finished. Names by default (the RFC's example); numbers when the stream
// asks with sw4rm-ack-enums, when the agent's own ACKs use numbers, or when its gRPC library
// is one of those SDKs' (a pure producer never writes an ACK to learn from); and an ACK
// written in numbers reaches a names agent in names.
func TestAckDialects(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			nowhere := uniq(t, "nobody")
			rejected := func(t *testing.T, a *rawAgent, s routerpb.RouterService_StreamIncomingClient) (any, any) {
				t.Helper()
				resp, code, err := a.send(t, a.envelope([]byte(`{}`)), nowhere)
				require.NoError(t, err)
				require.False(t, resp.GetAccepted())
				require.Equal(t, "NO_ROUTE", code)
				return nextAck(t, a, s)
			}

			plain, ps := dialectAgent(t, sys, "go", nil)
			stage, code := rejected(t, plain, ps)
			assert.Equal(t, "REJECTED", stage, "names by default")
			assert.Equal(t, "NO_ROUTE", code)

			js, js1 := dialectAgent(t, sys, "js", nil, grpc.WithUserAgent("grpc-node-js/1.12.6"))
			stage, code = rejected(t, js, js1)
			assert.Equal(t, float64(commonpb.AckStage_REJECTED), stage, "numbers to the JS SDK's gRPC library")
			assert.Equal(t, float64(commonpb.ErrorCode_NO_ROUTE), code)

			asked, as := dialectAgent(t, sys, "asked", metadata.Pairs(wire.AckEnumsKey, "numbers"))
			stage, _ = rejected(t, asked, as)
			assert.Equal(t, float64(commonpb.AckStage_REJECTED), stage, "numbers when the stream asks")

			// An agent that acknowledges in numbers is answered in numbers; its ACK reaches a
			// names agent in names.
			writer, ws := dialectAgent(t, sys, "writer", nil)
			data := plain.envelope([]byte(`{"n":1}`))
			resp, _, err := plain.send(t, data, writer.id)
			require.NoError(t, err)
			require.True(t, resp.GetAccepted(), resp.GetReason())
			var item *routerpb.StreamItem
			for item == nil || item.GetMsg().GetMessageId() != data.GetMessageId() {
				item, err = ws.Recv() // control traffic (notifications) may come first
				require.NoError(t, err)
			}
			ackPayload := []byte(`{"ack_for_message_id":"` + data.GetMessageId() + `","ack_stage":3,"error_code":0,"note":"done"}`)
			ack := &commonpb.Envelope{MessageId: uuid.NewString(), ProducerId: writer.id, CorrelationId: data.GetCorrelationId(),
				MessageType: commonpb.MessageType_ACKNOWLEDGEMENT, ContentType: "application/json", Payload: ackPayload, ContentLength: uint64(len(ackPayload))}
			resp, _, err = writer.send(t, ack, plain.id)
			require.NoError(t, err)
			require.True(t, resp.GetAccepted(), resp.GetReason())
			_, err = writer.router.AckDelivery(context.Background(), &routerpb.DeliveryAckRequest{AgentId: writer.id, Seq: item.GetSeq(), MessageId: item.GetMsg().GetMessageId()})
			require.NoError(t, err)
			for {
				stage, _ = nextAck(t, plain, ps)
				if stage == "FULFILLED" || stage == float64(commonpb.AckStage_FULFILLED) {
					break
				}
			}
			assert.Equal(t, "FULFILLED", stage, "the numbers ACK reaches the names producer in names")
			stage, _ = rejected(t, writer, ws)
			assert.Equal(t, float64(commonpb.AckStage_REJECTED), stage, "numbers to an agent whose ACKs use numbers")

			// A dialect that is neither is refused.
			_, bad := dialectAgent(t, sys, "bad", metadata.Pairs(wire.AckEnumsKey, "roman"))
			_, err = bad.Recv()
			assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), "validation_error")
		})
	}
}
