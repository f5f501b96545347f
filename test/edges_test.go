package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// rawAgent is an agent driven through the generated gRPC clients alone, as a client written
// in another language drives the server: no SDK, only the canonical services and the
// documented metadata.
type rawAgent struct {
	id     string
	conn   *grpc.ClientConn
	router routerpb.RouterServiceClient
}

// newRawAgent connects and registers an agent that accepts JSON.
func newRawAgent(t *testing.T, sys *system, name string) *rawAgent {
	t.Helper()
	conn, err := grpc.NewClient(sys.app.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	a := &rawAgent{id: uniq(t, name), conn: conn, router: routerpb.NewRouterServiceClient(conn)}
	resp, err := registrypb.NewRegistryServiceClient(conn).RegisterAgent(context.Background(), &registrypb.RegisterAgentRequest{Agent: &registrypb.AgentDescriptor{
		AgentId: a.id, Name: name, Description: "raw gRPC client " + name, ModalitiesSupported: []string{"application/json"},
	}})
	require.NoError(t, err)
	require.True(t, resp.GetAccepted(), resp.GetReason())
	return a
}

// envelope builds a DATA envelope of a's with a JSON payload.
func (a *rawAgent) envelope(payload []byte) *commonpb.Envelope {
	return &commonpb.Envelope{
		MessageId: uuid.NewString(), ProducerId: a.id, CorrelationId: uuid.NewString(),
		MessageType: commonpb.MessageType_DATA, ContentType: "application/json",
		Payload: payload, ContentLength: uint64(len(payload)),
	}
}

// send calls SendMessage addressed to "to" ("" for none) and returns the answer and the
// sw4rm-error-code trailer.
func (a *rawAgent) send(t *testing.T, env *commonpb.Envelope, to string) (*routerpb.SendMessageResponse, string, error) {
	t.Helper()
	ctx := context.Background()
	if to != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, wire.RecipientKey, to)
	}
	var trailer metadata.MD
	resp, err := a.router.SendMessage(ctx, &routerpb.SendMessageRequest{Msg: env}, grpc.Trailer(&trailer))
	code := ""
	if v := trailer.Get("sw4rm-error-code"); len(v) > 0 {
		code = v[0]
	}
	return resp, code, err
}

// rawStatus makes one server-streaming or unary gRPC call over plain HTTP/2 with nothing but
// the standard library and returns the status the server wrote: grpc-status from the trailers
// (or from the headers of a trailers-only answer). The deadline travels as the grpc-timeout
// header alone, so no client-side timer stands in for the server's answer: the test sees what
// the server said, as a client whose own timer lost the race to the server's trailers does.
// A stream the server reset without a status is an error.
func rawStatus(t *testing.T, addr, method string, req proto.Message, timeout time.Duration) (codes.Code, string, error) {
	t.Helper()
	body, err := proto.Marshal(req)
	require.NoError(t, err)
	frame := make([]byte, 5, 5+len(body))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(body)))
	frame = append(frame, body...)
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protocols}
	defer tr.CloseIdleConnections()
	u := &url.URL{Scheme: "http", Host: addr, Path: method}
	hreq, err := http.NewRequest(http.MethodPost, u.String(), bytes.NewReader(frame))
	require.NoError(t, err)
	hreq.Header.Set("Content-Type", "application/grpc")
	hreq.Header.Set("TE", "trailers")
	hreq.Header.Set("Grpc-Timeout", strconv.FormatInt(timeout.Milliseconds(), 10)+"m")
	resp, err := tr.RoundTrip(hreq)
	if err != nil {
		return codes.Unknown, "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return codes.Unknown, "", err
	}
	st := resp.Trailer.Get("Grpc-Status")
	msg := resp.Trailer.Get("Grpc-Message")
	if st == "" {
		st, msg = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	n, err := strconv.Atoi(st)
	require.NoError(t, err, "grpc-status %q", st)
	msg, _ = url.PathUnescape(msg)
	return codes.Code(n), msg, nil
}

// TestStreamIncomingDeadlineStatus covers StreamIncoming on an empty inbox whose deadline
// passes, on both stores: the server ends the call with DEADLINE_EXCEEDED — what the
// published SDKs' parity tests expect — never with OK, which would tell a client the stream
// ended normally. Both a plain HTTP/2 client, which sees only the server's status, and the
// generated Go client get it.
func TestStreamIncomingDeadlineStatus(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			a := newRawAgent(t, sys, "a")
			// RUNNABLE first, so that no stream has to tell the lifecycle the agent is ready.
			_, err := registrypb.NewRegistryServiceClient(a.conn).Heartbeat(context.Background(), &registrypb.HeartbeatRequest{AgentId: a.id})
			require.NoError(t, err)
			waitState(t, sys, a.id, commonpb.AgentState_RUNNABLE)
			for range 3 {
				code, msg, err := rawStatus(t, sys.app.GRPCAddr(), "/sw4rm.router.RouterService/StreamIncoming", &routerpb.StreamRequest{AgentId: a.id}, 500*time.Millisecond)
				require.NoError(t, err, "the server answers with a status, not a reset stream")
				assert.Equal(t, codes.DeadlineExceeded, code, "status %s: %s", code, msg)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			s, err := a.router.StreamIncoming(ctx, &routerpb.StreamRequest{AgentId: a.id})
			require.NoError(t, err)
			_, err = s.Recv()
			assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
		})
	}
}

// rawAck sends an ACKNOWLEDGEMENT with a hand-written JSON payload from producer over
// SendMessage, as a client in another language writes it.
func rawAck(t *testing.T, conn grpc.ClientConnInterface, producer, correlation, payload string) *routerpb.SendMessageResponse {
	t.Helper()
	resp, err := routerpb.NewRouterServiceClient(conn).SendMessage(context.Background(), &routerpb.SendMessageRequest{Msg: &commonpb.Envelope{
		MessageId: uuid.NewString(), ProducerId: producer, CorrelationId: correlation, MessageType: commonpb.MessageType_ACKNOWLEDGEMENT,
		ContentType: "application/json", Payload: []byte(payload), ContentLength: uint64(len(payload)),
	}})
	require.NoError(t, err)
	return resp
}

// TestNumericAckEnums covers ACK payloads whose ack_stage and error_code are enum numbers,
// as the published JS and Python SDKs write them, on both stores: B's numeric READ and
// FULFILLED are accepted and move A's message to FULFILLED, and A, which writes names,
// receives them in names; a numeric REJECTED with error_code 6 rejects the next message with
// validation_error. The ACK RECEIVED and the NACK the server writes itself spell the enums
// by name (RFC §13's example) for A. TestAckDialects covers agents that use numbers.
func TestNumericAckEnums(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			a, b, aIn, bIn := twoAgents(t, sys)
			state := func(id string) store.MessageRecord {
				rec, err := sys.app.Store().Messages().GetMessage(ctx, id)
				require.NoError(t, err)
				return rec
			}

			m1, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"n":1}`)})
			require.NoError(t, err)
			bIn.next(t, true, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == m1.GetMessageId() })
			received := aIn.next(t, true, ackFor(m1.GetMessageId(), commonpb.AckStage_RECEIVED))
			assert.Contains(t, string(received.Envelope.GetPayload()), `"ack_stage":"RECEIVED"`, "the server writes names")

			read := `{"ack_for_message_id":"` + m1.GetMessageId() + `","ack_stage":2}`
			resp := rawAck(t, b.Conn(), b.ID(), m1.GetCorrelationId(), read)
			require.True(t, resp.GetAccepted(), resp.GetReason())
			fulfilled := `{"ack_for_message_id":"` + m1.GetMessageId() + `","ack_stage":3,"error_code":0}`
			resp = rawAck(t, b.Conn(), b.ID(), m1.GetCorrelationId(), fulfilled)
			require.True(t, resp.GetAccepted(), resp.GetReason())
			assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED, state(m1.GetMessageId()).State)
			// B's ACKs reach A in A's dialect: A writes names (docs/messaging.md "ACK dialects").
			got := aIn.next(t, true, ackFor(m1.GetMessageId(), commonpb.AckStage_READ))
			assert.JSONEq(t, `{"ack_for_message_id":"`+m1.GetMessageId()+`","ack_stage":"READ"}`, string(got.Envelope.GetPayload()), "forwarded in A's dialect")
			got = aIn.next(t, true, ackFor(m1.GetMessageId(), commonpb.AckStage_FULFILLED))
			assert.JSONEq(t, `{"ack_for_message_id":"`+m1.GetMessageId()+`","ack_stage":"FULFILLED"}`, string(got.Envelope.GetPayload()), "forwarded in A's dialect")
			assert.Equal(t, b.ID(), got.Envelope.GetProducerId())

			m2, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"n":2}`)})
			require.NoError(t, err)
			bIn.next(t, true, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == m2.GetMessageId() })
			resp = rawAck(t, b.Conn(), b.ID(), m2.GetCorrelationId(), `{"ack_for_message_id":"`+m2.GetMessageId()+`","ack_stage":4,"error_code":6,"note":"n must be odd"}`)
			require.True(t, resp.GetAccepted(), resp.GetReason())
			rec := state(m2.GetMessageId())
			assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED, rec.State)
			assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, rec.ErrorCode)
			nack := aIn.next(t, true, ackFor(m2.GetMessageId(), commonpb.AckStage_REJECTED))
			assert.Equal(t, protocol.SchedulerID, nack.Envelope.GetProducerId())
			assert.Contains(t, string(nack.Envelope.GetPayload()), `"ack_stage":"REJECTED","error_code":"VALIDATION_ERROR"`, "the server writes names")

			// A number that names no stage is still refused, saying what is accepted.
			resp = rawAck(t, b.Conn(), b.ID(), m2.GetCorrelationId(), `{"ack_for_message_id":"`+m2.GetMessageId()+`","ack_stage":9}`)
			assert.False(t, resp.GetAccepted())
			assert.Contains(t, resp.GetReason(), "validation_error: ack_stage 9 is not one of")
		})
	}
}

// TestReusedSequenceNumber covers a producer on the published JS SDK's defaults — every
// envelope with sequence_number 1 and no idempotency_token — on both stores: its second,
// different message is admitted and delivered (a reused sequence number is not a retry when
// the message differs); a true retry, the same message again, is answered
// already_in_progress while the first is in flight, with a reason that says how to send a
// new message; and once the first is fulfilled, duplicate_detected with its outcome.
func TestReusedSequenceNumber(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			b := dialAgent(t, sys, "b")
			bIn := openInbox(t, b)
			waitState(t, sys, b.ID(), commonpb.AgentState_RUNNABLE)
			a := newRawAgent(t, sys, "a")
			jsDefaults := func(payload string) *commonpb.Envelope {
				env := a.envelope([]byte(payload))
				env.SequenceNumber = 1
				return env
			}
			delivered := func(id string) *sdk.Delivery {
				return bIn.next(t, true, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == id })
			}

			m1, m2 := jsDefaults(`{"n":1}`), jsDefaults(`{"n":2}`)
			for _, m := range []*commonpb.Envelope{m1, m2} {
				resp, code, err := a.send(t, m, b.ID())
				require.NoError(t, err)
				require.True(t, resp.GetAccepted(), "%s: %s", code, resp.GetReason())
			}
			d1 := delivered(m1.GetMessageId())
			delivered(m2.GetMessageId())

			retry := jsDefaults(`{"n":1}`)
			resp, code, err := a.send(t, retry, b.ID())
			require.NoError(t, err)
			assert.False(t, resp.GetAccepted())
			assert.Equal(t, "ALREADY_IN_PROGRESS", code)
			assert.Contains(t, resp.GetReason(), m1.GetMessageId())
			assert.Contains(t, resp.GetReason(), "A new message needs a new sequence_number (monotonic per producer, §11) or its own idempotency_token")

			require.NoError(t, d1.Ack(ctx, commonpb.AckStage_FULFILLED, 0, "n=1 done"))
			require.Eventually(t, func() bool {
				rec, err := sys.app.Store().Messages().GetMessage(ctx, m1.GetMessageId())
				return err == nil && rec.State == commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED
			}, 10*time.Second, 20*time.Millisecond)
			resp, code, err = a.send(t, jsDefaults(`{"n":1}`), b.ID())
			require.NoError(t, err)
			assert.False(t, resp.GetAccepted())
			assert.Equal(t, "DUPLICATE_DETECTED", code)
			assert.Contains(t, resp.GetReason(), `"original_message_id":"`+m1.GetMessageId()+`"`)
			assert.Contains(t, resp.GetReason(), "n=1 done")

			quiet := time.After(300 * time.Millisecond)
			for done := false; !done; {
				select {
				case d := <-bIn.ch:
					require.NotEqual(t, a.id, d.Envelope.GetProducerId(), "a retry was delivered: %s", d.Envelope.GetPayload())
				case <-quiet:
					done = true
				}
			}
		})
	}
}

// TestOversizePayloadAnswer covers payloads over SW4RM_MAX_PAYLOAD_BYTES (64 KiB here) sent by
// a raw client, on both stores. Payloads larger than the limit plus 64 KiB, which gRPC itself
// used to refuse with RESOURCE_EXHAUSTED, up to four times the limit (what the transport reads,
// frontend.MaxRequestBytes), get the protocol's answer: accepted=false with oversize_payload
// and its trailer, a NACK to the producer and a dead letter.
func TestOversizePayloadAnswer(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := newConfig(t, kind)
			cfg.MaxPayloadBytes = 64 << 10
			sys := start(t, cfg)
			ctx := context.Background()
			a, b, aIn, _ := twoAgents(t, sys)
			raw := &rawAgent{id: a.ID(), router: routerpb.NewRouterServiceClient(a.Conn())}

			for _, size := range []int{cfg.MaxPayloadBytes + 65<<10, 4 * cfg.MaxPayloadBytes} {
				env := raw.envelope(append(append([]byte(`{"blob":"`), bytes.Repeat([]byte("x"), size-11)...), '"', '}'))
				require.Len(t, env.GetPayload(), size)
				resp, code, err := raw.send(t, env, b.ID())
				require.NoError(t, err, "%d bytes: a protocol answer, not a gRPC error", size)
				assert.False(t, resp.GetAccepted())
				assert.Equal(t, "OVERSIZE_PAYLOAD", code)
				assert.Contains(t, resp.GetReason(), "oversize_payload:")
				nack := aIn.next(t, true, ackFor(env.GetMessageId(), commonpb.AckStage_REJECTED))
				np, _ := nack.AckPayload()
				assert.Equal(t, commonpb.ErrorCode_OVERSIZE_PAYLOAD, np.ErrorCode)
				dead, err := sys.app.Store().DLQ().ListDeadLetters(ctx, store.DLQFilter{ProducerID: a.ID(), ErrorCode: commonpb.ErrorCode_OVERSIZE_PAYLOAD})
				require.NoError(t, err)
				require.NotEmpty(t, dead)
				last := dead[len(dead)-1]
				assert.Equal(t, env.GetMessageId(), last.MessageID)
				assert.Equal(t, store.DLQPolicyViolation, last.Class)
				assert.Equal(t, size, last.PayloadSize)
			}
		})
	}
}
