package test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// inbox runs an agent's stream in the background and hands every delivery to a channel.
type inbox struct {
	stream *sdk.Stream
	ch     chan *sdk.Delivery
}

func openInbox(t *testing.T, a *sdk.Agent) *inbox {
	t.Helper()
	s, err := a.Receive(context.Background())
	require.NoError(t, err)
	in := &inbox{stream: s, ch: make(chan *sdk.Delivery, 256)}
	go func() {
		defer close(in.ch)
		for {
			d, err := s.Next()
			if err != nil {
				return
			}
			in.ch <- d
		}
	}()
	t.Cleanup(s.Close)
	return in
}

// next waits for the next delivery matching keep, confirming (AckDelivery) every delivery it
// passes over when confirm is set.
func (in *inbox) next(t *testing.T, confirm bool, keep func(*sdk.Delivery) bool) *sdk.Delivery {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case d, ok := <-in.ch:
			require.True(t, ok, "stream closed")
			if confirm {
				rec, err := d.Confirm(context.Background())
				require.NoError(t, err)
				require.True(t, rec, "AckDelivery of seq %d not recorded", d.Seq)
			}
			if keep(d) {
				return d
			}
		case <-deadline:
			t.Fatal("timed out waiting for a delivery")
			return nil
		}
	}
}

// ackFor matches the ACK (or NACK) of a message at a stage.
func ackFor(messageID string, stage commonpb.AckStage) func(*sdk.Delivery) bool {
	return func(d *sdk.Delivery) bool {
		p, ok := d.AckPayload()
		return ok && p.AckForMessageID == messageID && p.Stage == stage
	}
}

func registryEvent(event, agentID string) func(*sdk.Delivery) bool {
	return func(d *sdk.Delivery) bool {
		if d.Envelope.GetMessageType() != commonpb.MessageType_NOTIFICATION {
			return false
		}
		var ev activities.RegistryEvent
		return d.DecodeJSON(&ev) == nil && ev.Event == event && ev.AgentID == agentID
	}
}

func dialAgent(t testing.TB, sys *system, name string, opts ...grpc.DialOption) *sdk.Agent {
	t.Helper()
	a, err := sdk.Dial(sys.app.GRPCAddr(), uniq(t, name), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	require.NoError(t, a.Register(context.Background(), &registrypb.AgentDescriptor{
		Name: name, Description: "end-to-end test agent " + name, Capabilities: []string{"test"},
		CommunicationClass: commonpb.CommunicationClass_STANDARD, ModalitiesSupported: []string{"application/json", "text/plain"},
	}))
	return a
}

// twoAgents registers agents A and B with their streams open. A is RUNNABLE before B
// registers, so B starts with an empty buffer, and A has confirmed the notification that B
// joined (§14).
func twoAgents(t *testing.T, sys *system) (a, b *sdk.Agent, aIn, bIn *inbox) {
	t.Helper()
	a = dialAgent(t, sys, "a")
	aIn = openInbox(t, a)
	waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)
	b = dialAgent(t, sys, "b")
	bIn = openInbox(t, b)
	aIn.next(t, true, registryEvent(activities.AgentJoined, b.ID()))
	return a, b, aIn, bIn
}

// TestTwoAgentsExchangeAndAcknowledge is the foundation scenario on both stores: two SDK
// agents register, A sends to B, B receives, confirms and acknowledges, A's message reaches
// FULFILLED and A sees every ACK; the 11th message to B's full buffer is rejected with
// buffer_full and A gets the NACK; malformed envelopes are rejected with validation_error;
// B's lifecycle workflow is RUNNABLE in Temporal and closes after DeregisterAgent.
func TestTwoAgentsExchangeAndAcknowledge(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			a, b, aIn, bIn := twoAgents(t, sys)

			// C.1: deliver, RECEIVED, FULFILLED, and the ACKs reach the producer.
			payload, _ := json.Marshal(map[string]string{"task_type": "CreateTicket", "title": "Fix header overlap"})
			sent, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: payload})
			require.NoError(t, err)
			got := bIn.next(t, false, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == sent.GetMessageId() })
			assert.Equal(t, a.ID(), got.Envelope.GetProducerId())
			assert.Equal(t, payload, got.Envelope.GetPayload())
			assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_SENT, got.Envelope.GetState())
			recorded, err := got.Confirm(ctx)
			require.NoError(t, err)
			require.True(t, recorded)
			again, err := got.Confirm(ctx)
			require.NoError(t, err)
			assert.False(t, again, "a second AckDelivery of the same seq is not recorded")
			require.NoError(t, got.Ack(ctx, commonpb.AckStage_READ, 0, ""))
			require.NoError(t, got.Ack(ctx, commonpb.AckStage_FULFILLED, 0, "done"))

			aIn.next(t, true, ackFor(sent.GetMessageId(), commonpb.AckStage_RECEIVED))
			aIn.next(t, true, ackFor(sent.GetMessageId(), commonpb.AckStage_READ))
			fulfilled := aIn.next(t, true, ackFor(sent.GetMessageId(), commonpb.AckStage_FULFILLED))
			assert.Equal(t, b.ID(), fulfilled.Envelope.GetProducerId(), "the forwarded ACK names B as its producer")
			assert.Equal(t, sent.GetCorrelationId(), fulfilled.Envelope.GetCorrelationId())
			rec, err := sys.app.Store().Messages().GetMessage(ctx, sent.GetMessageId())
			require.NoError(t, err)
			assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED, rec.State)

			// A late ACK after FULFILLED changes nothing (§11.1).
			require.NoError(t, got.Ack(ctx, commonpb.AckStage_RECEIVED, 0, "late"))
			rec, err = sys.app.Store().Messages().GetMessage(ctx, sent.GetMessageId())
			require.NoError(t, err)
			assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED, rec.State)

			// Only the recipient may acknowledge a message.
			err = a.Ack(ctx, sent, commonpb.AckStage_FULFILLED, 0, "")
			assert.Equal(t, commonpb.ErrorCode_PERMISSION_DENIED, sdk.CodeOf(err), "%v", err)

			// C.3: B stops confirming; ten messages fill its buffer, the eleventh is rejected.
			for i := range 10 {
				_, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"n":` + string(rune('0'+i)) + `}`)})
				require.NoError(t, err, "message %d", i+1)
			}
			eleventh, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"n":11}`)})
			require.Error(t, err)
			assert.Equal(t, commonpb.ErrorCode_BUFFER_FULL, sdk.CodeOf(err), "%v", err)
			nack := aIn.next(t, true, ackFor(eleventh.GetMessageId(), commonpb.AckStage_REJECTED))
			np, _ := nack.AckPayload()
			assert.Equal(t, commonpb.ErrorCode_BUFFER_FULL, np.ErrorCode)
			assert.Equal(t, protocol.SchedulerID, nack.Envelope.GetProducerId())
			rec, err = sys.app.Store().Messages().GetMessage(ctx, eleventh.GetMessageId())
			require.NoError(t, err)
			assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED, rec.State)
			assert.Equal(t, commonpb.ErrorCode_BUFFER_FULL, rec.ErrorCode)

			// Malformed envelopes: validation_error, with the code in the trailer too.
			assertMalformedRejected(t, sys, a.ID(), b.ID())

			// B's lifecycle is a Temporal workflow, RUNNABLE, visible by search attribute.
			tc := sys.app.Temporal()
			wfID := workflows.AgentWorkflowID(b.ID())
			waitState(t, sys, b.ID(), commonpb.AgentState_RUNNABLE)
			require.Eventually(t, func() bool {
				resp, err := tc.ListWorkflow(ctx, listRequest(`WorkflowId = '`+wfID+`' AND SW4RMAgentState = 'RUNNABLE' AND ExecutionStatus = 'Running'`))
				return err == nil && len(resp.GetExecutions()) == 1
			}, 15*time.Second, 200*time.Millisecond, "the lifecycle run is listed by its search attributes")

			// Deregistration closes the lifecycle and A hears that B left.
			require.NoError(t, b.Deregister(ctx, "test over"))
			aIn.next(t, true, registryEvent(activities.AgentLeft, b.ID()))
			require.Eventually(t, func() bool {
				d, err := tc.DescribeWorkflowExecution(ctx, wfID, "")
				return err == nil && d.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED
			}, 15*time.Second, 100*time.Millisecond)
			recordHistory(t, tc, wfID, "agent_lifecycle_"+kind)
			_, err = a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{}`)})
			assert.Equal(t, commonpb.ErrorCode_NO_ROUTE, sdk.CodeOf(err), "a deregistered agent is no route: %v", err)
		})
	}
}

// waitState waits until the agent's lifecycle workflow reports state.
func waitState(t testing.TB, sys *system, agentID string, state commonpb.AgentState) {
	t.Helper()
	require.Eventually(t, func() bool {
		v, err := sys.app.Temporal().QueryWorkflow(context.Background(), workflows.AgentWorkflowID(agentID), "", workflows.AgentStatusQuery)
		if err != nil {
			return false
		}
		var st workflows.AgentStatus
		return v.Get(&st) == nil && st.State == state.String()
	}, 15*time.Second, 50*time.Millisecond, "agent %s never reached %s", agentID, state)
}

// assertMalformedRejected sends broken envelopes through the raw gRPC client, as a
// third-party SDK would, and checks each is refused with validation_error and a clear reason.
func assertMalformedRejected(t *testing.T, sys *system, producer, recipient string) {
	t.Helper()
	conn, err := grpc.NewClient(sys.app.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	rc := routerpb.NewRouterServiceClient(conn)
	good := func() *commonpb.Envelope {
		return &commonpb.Envelope{
			MessageId: uuid.NewString(), ProducerId: producer, CorrelationId: uuid.NewString(),
			MessageType: commonpb.MessageType_DATA, ContentType: "application/json",
			Payload: []byte(`{}`), ContentLength: 2,
		}
	}
	cases := map[string]struct {
		mutate func(*commonpb.Envelope) *commonpb.Envelope
		code   commonpb.ErrorCode
		reason string
	}{
		"no envelope":           {func(*commonpb.Envelope) *commonpb.Envelope { return nil }, commonpb.ErrorCode_VALIDATION_ERROR, "envelope is required"},
		"no message_id":         {func(e *commonpb.Envelope) *commonpb.Envelope { e.MessageId = ""; return e }, commonpb.ErrorCode_VALIDATION_ERROR, "message_id is required"},
		"message_id not a UUID": {func(e *commonpb.Envelope) *commonpb.Envelope { e.MessageId = "msg001"; return e }, commonpb.ErrorCode_VALIDATION_ERROR, "not a UUID"},
		"no producer_id":        {func(e *commonpb.Envelope) *commonpb.Envelope { e.ProducerId = ""; return e }, commonpb.ErrorCode_VALIDATION_ERROR, "producer_id is required"},
		"no correlation_id":     {func(e *commonpb.Envelope) *commonpb.Envelope { e.CorrelationId = ""; return e }, commonpb.ErrorCode_VALIDATION_ERROR, "correlation_id is required"},
		"no message_type":       {func(e *commonpb.Envelope) *commonpb.Envelope { e.MessageType = 0; return e }, commonpb.ErrorCode_VALIDATION_ERROR, "message_type is required"},
		"payload without type":  {func(e *commonpb.Envelope) *commonpb.Envelope { e.ContentType = ""; return e }, commonpb.ErrorCode_VALIDATION_ERROR, "content_type is required"},
		"length mismatch":       {func(e *commonpb.Envelope) *commonpb.Envelope { e.ContentLength = 7; return e }, commonpb.ErrorCode_VALIDATION_ERROR, "does not match"},
		"bad ACK payload": {func(e *commonpb.Envelope) *commonpb.Envelope {
			e.MessageType = commonpb.MessageType_ACKNOWLEDGEMENT
			return e
		}, commonpb.ErrorCode_VALIDATION_ERROR, "ack_for_message_id"},
		"undeclared modality": {func(e *commonpb.Envelope) *commonpb.Envelope { e.ContentType = "image/png"; return e }, commonpb.ErrorCode_VALIDATION_ERROR, "modalities"},
	}
	for name, c := range cases {
		var trailer metadata.MD
		ctx := metadata.AppendToOutgoingContext(context.Background(), wire.RecipientKey, recipient)
		resp, err := rc.SendMessage(ctx, &routerpb.SendMessageRequest{Msg: c.mutate(good())}, grpc.Trailer(&trailer))
		require.NoError(t, err, name)
		assert.False(t, resp.GetAccepted(), name)
		assert.Contains(t, resp.GetReason(), protocol.CodeName(c.code)+":", name)
		assert.Contains(t, resp.GetReason(), c.reason, name)
		assert.Equal(t, []string{c.code.String()}, trailer.Get("sw4rm-error-code"), name)
	}
	// No recipient at all is no_route, with the way out in the reason.
	resp, err := rc.SendMessage(context.Background(), &routerpb.SendMessageRequest{Msg: good()})
	require.NoError(t, err)
	assert.False(t, resp.GetAccepted())
	assert.Contains(t, resp.GetReason(), "no_route:")
	assert.Contains(t, resp.GetReason(), wire.RecipientKey)
}

// TestControlConfirmationsWrittenBehind covers AckDelivery of control traffic (here the
// forwarded ACKs a producer receives), which the frontend answers from its stream's record
// and writes to the store behind the answer: the answers are the wire contract's — recorded
// once, not for a mismatched message_id nor a second time — the confirmation reaches the
// store, a reconnecting stream does not hand back what was confirmed, and what was delivered
// but not confirmed is delivered again.
func TestControlConfirmationsWrittenBehind(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			a, b, aIn, bIn := twoAgents(t, sys)

			sent, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"n":1}`)})
			require.NoError(t, err)
			bIn.next(t, true, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == sent.GetMessageId() })
			received := aIn.next(t, false, ackFor(sent.GetMessageId(), commonpb.AckStage_RECEIVED))
			router := routerpb.NewRouterServiceClient(a.Conn())
			ack := func(messageID string) bool {
				t.Helper()
				resp, err := router.AckDelivery(ctx, &routerpb.DeliveryAckRequest{AgentId: a.ID(), Seq: received.Seq, MessageId: messageID})
				require.NoError(t, err)
				return resp.GetRecorded()
			}
			assert.False(t, ack(uuid.NewString()), "a mismatched message_id is not recorded")
			assert.True(t, ack(received.Envelope.GetMessageId()))
			assert.False(t, ack(received.Envelope.GetMessageId()), "a second confirmation is not recorded")
			assert.False(t, ack(""), "nor a third, without message_id")
			require.Eventually(t, func() bool {
				n, err := sys.app.Store().Messages().Depth(ctx, a.ID())
				return err == nil && n == 0
			}, 10*time.Second, 20*time.Millisecond, "the confirmation reaches the store")

			// B fulfils; A gets the forwarded ACK but does not confirm it, then reconnects:
			// the unconfirmed row comes again, the confirmed one does not.
			require.NoError(t, b.Ack(ctx, sent, commonpb.AckStage_FULFILLED, 0, ""))
			fulfilled := aIn.next(t, false, ackFor(sent.GetMessageId(), commonpb.AckStage_FULFILLED))
			aIn.stream.Close()
			again := openInbox(t, a)
			redelivered := again.next(t, false, func(*sdk.Delivery) bool { return true })
			assert.Equal(t, fulfilled.Seq, redelivered.Seq, "the first row on the new stream is the unconfirmed FULFILLED ACK, not the confirmed RECEIVED one")
			ok, err := redelivered.Confirm(ctx)
			require.NoError(t, err)
			assert.True(t, ok)
			ok, err = fulfilled.Confirm(ctx)
			require.NoError(t, err)
			assert.False(t, ok, "confirmed through the new stream already")
		})
	}
}
