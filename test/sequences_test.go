package test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// pair starts a system and two registered agents, A (RUNNABLE before B registers, so B's
// buffer starts empty) and B, with A's inbox open.
func pair(t *testing.T, sys *system) (a, b *sdk.Agent, aIn *inbox) {
	t.Helper()
	a = dialAgent(t, sys, "a")
	aIn = openInbox(t, a)
	waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)
	b = dialAgent(t, sys, "b")
	return a, b, aIn
}

// acksFor collects the stages of the ACKs A receives for one message until want arrives.
func acksUntil(t *testing.T, in *inbox, messageID string, want commonpb.AckStage) []commonpb.AckStage {
	t.Helper()
	var stages []commonpb.AckStage
	in.next(t, true, func(d *sdk.Delivery) bool {
		p, ok := d.AckPayload()
		if !ok || p.AckForMessageID != messageID {
			return false
		}
		stages = append(stages, p.Stage)
		return p.Stage == want
	})
	return stages
}

// TestSequenceC1 replays App. D C.1: the operator's DATA(TaskCreate v1) is delivered to B,
// B ACKs RECEIVED, executes, ACKs FULFILLED, and the producer hears FULFILLED.
func TestSequenceC1(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			op, b, opIn := pair(t, sys)
			bIn := openInbox(t, b)
			sent, err := op.Send(ctx, sdk.Message{To: b.ID(), CorrelationID: "wf-1111",
				Payload: []byte(`{"task_type":"CreateTicket","title":"Fix header overlap"}`)})
			require.NoError(t, err)
			got := bIn.next(t, false, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == sent.GetMessageId() })
			require.NoError(t, got.Ack(ctx, commonpb.AckStage_RECEIVED, 0, ""))
			require.NoError(t, got.Ack(ctx, commonpb.AckStage_FULFILLED, 0, "ticket created"))
			stages := acksUntil(t, opIn, sent.GetMessageId(), commonpb.AckStage_FULFILLED)
			assert.Equal(t, []commonpb.AckStage{commonpb.AckStage_RECEIVED, commonpb.AckStage_FULFILLED}, stages)
			rec, err := sys.app.Store().Messages().GetMessage(ctx, sent.GetMessageId())
			require.NoError(t, err)
			assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED, rec.State)
			assert.Equal(t, "wf-1111", rec.CorrelationID)
		})
	}
}

// TestSequenceC2 replays App. D C.2: m1 (token T) is delivered but not acknowledged in time;
// A gets NACK ack_timeout and its SDK retries as m2 (same token, retry_count 1), which is
// delivered; B's late ACK RECEIVED for m1 leaves m1 TIMED_OUT; B's late FULFILLED for m1
// reconciles token T to the earliest completion, and A gets DUPLICATE_DETECTED for m2 naming
// m1. A third attempt is answered from the cache without delivery.
func TestSequenceC2(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := newConfig(t, kind)
			cfg.AckTimeout = time.Second
			sys := start(t, cfg)
			ctx := context.Background()
			a, b, aIn := pair(t, sys)
			bIn := openInbox(t, b)
			token := a.ID() + ":create:" + uuid.NewString()[:8]
			payload := []byte(`{"user":"alice"}`)

			m1, err := a.Send(ctx, sdk.Message{To: b.ID(), CorrelationID: "wf123", IdempotencyToken: token, Payload: payload})
			require.NoError(t, err)
			d1 := bIn.next(t, false, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == m1.GetMessageId() })
			// B sits on it: no confirmation, no ACK, past the 1 s ACK timeout.
			nack := aIn.next(t, true, ackFor(m1.GetMessageId(), commonpb.AckStage_TIMED_OUT))
			np, _ := nack.AckPayload()
			assert.Equal(t, commonpb.ErrorCode_ACK_TIMEOUT, np.ErrorCode)

			// A's SDK retries on reading the NACK: new message_id, same token, retry_count+1.
			require.NoError(t, nack.RetryErr, "a retry of a timed-out operation is admitted")
			m2 := nack.Retry
			require.NotNil(t, m2, "the SDK retried")
			d2 := bIn.next(t, false, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == m2.GetMessageId() })
			assert.Equal(t, token, d2.Envelope.GetIdempotencyToken(), "B can see it is the same operation")
			assert.Equal(t, uint32(1), d2.Envelope.GetRetryCount())

			// Late ACK RECEIVED for m1: recorded, m1 stays TIMED_OUT.
			require.NoError(t, d1.Ack(ctx, commonpb.AckStage_RECEIVED, 0, "late"))
			rec, err := sys.app.Store().Messages().GetMessage(ctx, m1.GetMessageId())
			require.NoError(t, err)
			assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT, rec.State)
			requireAudit(t, sys, m1.GetMessageId(), "message.late_ack")

			// B completes m1: token T is reconciled, m2 is a duplicate of m1.
			require.NoError(t, d1.Ack(ctx, commonpb.AckStage_FULFILLED, 0, "user alice created"))
			dup := aIn.next(t, true, ackFor(m2.GetMessageId(), commonpb.AckStage_REJECTED))
			dp, _ := dup.AckPayload()
			assert.Equal(t, commonpb.ErrorCode_DUPLICATE_DETECTED, dp.ErrorCode)
			var report router.DuplicateReport
			require.NoError(t, json.Unmarshal([]byte(dp.Note), &report), dp.Note)
			assert.Equal(t, "DUPLICATE_DETECTED", report.Status)
			assert.Equal(t, m1.GetMessageId(), report.OriginalMessageID)
			assert.Equal(t, "FULFILLED", report.OriginalStatus)
			assert.Equal(t, "user alice created", report.CachedResult)
			_, err = time.Parse(time.RFC3339, report.CachedAt)
			assert.NoError(t, err)
			rec, err = sys.app.Store().Messages().GetMessage(ctx, m1.GetMessageId())
			require.NoError(t, err)
			assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT, rec.State, "§11.1 rule 1: TIMED_OUT stays terminal")

			// A third attempt: answered from the cache, not delivered.
			m3, err := a.Send(ctx, sdk.Message{To: b.ID(), CorrelationID: "wf123", IdempotencyToken: token, Payload: payload, RetryCount: 2})
			require.Error(t, err)
			assert.Equal(t, commonpb.ErrorCode_DUPLICATE_DETECTED, sdk.CodeOf(err))
			assert.Contains(t, err.Error(), m1.GetMessageId())
			rec, err = sys.app.Store().Messages().GetMessage(ctx, m3.GetMessageId())
			require.NoError(t, err, "the cache decision is recorded and linked (§19)")
			assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED, rec.State, "m3 was never admitted to B's buffer")
			assert.Equal(t, commonpb.ErrorCode_DUPLICATE_DETECTED, rec.ErrorCode)
		})
	}
}

// requireAudit waits for an audit event of a type about a message.
func requireAudit(t *testing.T, sys *system, messageID, typ string) store.Event {
	t.Helper()
	var found store.Event
	require.Eventually(t, func() bool {
		evs, err := sys.app.Store().Audit().List(context.Background(), store.AuditFilter{MessageID: messageID, TypePrefix: typ})
		if err != nil || len(evs) == 0 {
			return false
		}
		found = evs[0]
		return true
	}, 10*time.Second, 20*time.Millisecond, "no %s event for %s", typ, messageID)
	return found
}

// TestSequenceC3 replays App. D C.3 on both stores: B's buffer is full, A's DATA is rejected
// with buffer_full and A receives ACK REJECTED (buffer_full) from the scheduler.
func TestSequenceC3(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := newConfig(t, kind)
			cfg.BufferCapacity = 2
			sys := start(t, cfg)
			ctx := context.Background()
			a, b, aIn := pair(t, sys)
			for range 2 {
				_, err := a.Send(ctx, sdk.Message{To: b.ID(), CorrelationID: "wf-3333", Payload: []byte(`{}`)})
				require.NoError(t, err)
			}
			mX, err := a.Send(ctx, sdk.Message{To: b.ID(), CorrelationID: "wf-3333", Payload: []byte(`{}`)})
			require.Error(t, err)
			assert.Equal(t, commonpb.ErrorCode_BUFFER_FULL, sdk.CodeOf(err))
			nack := aIn.next(t, true, ackFor(mX.GetMessageId(), commonpb.AckStage_REJECTED))
			p, _ := nack.AckPayload()
			assert.Equal(t, commonpb.ErrorCode_BUFFER_FULL, p.ErrorCode)
			assert.Equal(t, protocol.SchedulerID, nack.Envelope.GetProducerId())
			assert.Equal(t, "wf-3333", nack.Envelope.GetCorrelationId())
			entries, err := sys.app.Store().DLQ().ListDeadLetters(ctx, store.DLQFilter{ProducerID: a.ID()})
			require.NoError(t, err)
			assert.Empty(t, entries, "buffer_full is back-pressure, not a dead letter")
		})
	}
}

// TestDeadLetterRequeueRoundTrip: B fails a message for good, it lands in the DLQ with its
// diagnostic context, an operator requeues it with the CLI, B gets it again (new message_id,
// same token, retry_count+1) and fulfils it.
func TestDeadLetterRequeueRoundTrip(t *testing.T) {
	cfg := hitlConfig(t, "postgres")
	sys := start(t, cfg)
	ctx := context.Background()
	a, b, aIn := pair(t, sys)
	bIn := openInbox(t, b)
	token := a.ID() + ":charge:" + uuid.NewString()[:8]
	m, err := a.Send(ctx, sdk.Message{To: b.ID(), IdempotencyToken: token, Payload: []byte(`{"amount":42}`)})
	require.NoError(t, err)
	d := bIn.next(t, true, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == m.GetMessageId() })
	require.NoError(t, d.Ack(ctx, commonpb.AckStage_FAILED, commonpb.ErrorCode_PERMISSION_DENIED, "card processor refused"))
	aIn.next(t, true, ackFor(m.GetMessageId(), commonpb.AckStage_FAILED))

	var entry store.DLQEntry
	require.Eventually(t, func() bool {
		es, err := sys.app.Store().DLQ().ListDeadLetters(ctx, store.DLQFilter{ProducerID: a.ID()})
		if err != nil || len(es) != 1 {
			return false
		}
		entry = es[0]
		return true
	}, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, m.GetMessageId(), entry.MessageID)
	assert.Equal(t, b.ID(), entry.RecipientID)
	assert.Equal(t, store.DLQTerminalError, entry.Class)
	assert.Equal(t, commonpb.ErrorCode_PERMISSION_DENIED, entry.ErrorCode)
	assert.Equal(t, "card processor refused", entry.Reason)
	assert.Equal(t, `{"amount":42}`, string(entry.PayloadExcerpt))
	assert.NotEmpty(t, entry.Attempts)

	out, err := runDLQCLI(t, sys, "list")
	require.NoError(t, err, out)
	assert.Contains(t, out, fmt.Sprint(entry.ID))
	assert.Contains(t, out, "terminal_error")
	out, err = runDLQCLI(t, sys, "requeue", fmt.Sprint(entry.ID))
	require.NoError(t, err, out)

	again := bIn.next(t, true, func(d *sdk.Delivery) bool {
		return d.Envelope.GetIdempotencyToken() == token && d.Envelope.GetMessageId() != m.GetMessageId()
	})
	assert.Equal(t, uint32(1), again.Envelope.GetRetryCount())
	assert.Equal(t, `{"amount":42}`, string(again.Envelope.GetPayload()))
	require.NoError(t, again.Ack(ctx, commonpb.AckStage_FULFILLED, 0, "charged"))
	aIn.next(t, true, ackFor(again.Envelope.GetMessageId(), commonpb.AckStage_FULFILLED))

	out, err = runDLQCLI(t, sys, "requeue", fmt.Sprint(entry.ID))
	require.Error(t, err, "a dead letter is requeued once")
	assert.Contains(t, out, "requeued")
	out, err = runDLQCLI(t, sys, "export", "--id", fmt.Sprint(entry.ID))
	require.NoError(t, err, out)
	assert.Contains(t, out, m.GetMessageId())
}

func runDLQCLI(t *testing.T, sys *system, args ...string) (string, error) {
	t.Helper()
	return runCLIArgs(t, sys, "alice-token", append([]string{"dlq", "--server", sys.app.GRPCAddr()}, args...)...)
}

// TestPrivilegedFloodDoesNotStarveStandard: a PRIVILEGED producer floods B while a STANDARD
// producer sends a few; B's stream serves the urgent lane first but interleaves STANDARD by
// weighted round robin (§7.3), and a burst beyond the PRIVILEGED rate limit is demoted to
// STANDARD.
func TestPrivilegedFloodDoesNotStarveStandard(t *testing.T) {
	cfg := newConfig(t, "memory")
	cfg.BufferCapacity = 500
	cfg.PrivilegedRate, cfg.PrivilegedBurst = 1, 60
	sys := start(t, cfg)
	ctx := context.Background()
	urgent, err := sdk.Dial(sys.app.GRPCAddr(), uniq(t, "urgent"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = urgent.Close() })
	require.NoError(t, urgent.Register(ctx, &registrypb.AgentDescriptor{Name: "urgent", CommunicationClass: commonpb.CommunicationClass_PRIVILEGED}))
	std := dialAgent(t, sys, "std")
	b := dialAgent(t, sys, "b")

	for i := range 60 {
		_, err := urgent.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(fmt.Sprintf(`{"urgent":%d}`, i))})
		require.NoError(t, err)
	}
	for i := range 20 {
		_, err := std.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(fmt.Sprintf(`{"std":%d}`, i))})
		require.NoError(t, err)
	}
	bIn := openInbox(t, b)
	var order []string
	for len(order) < 80 {
		d := bIn.next(t, true, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageType() == commonpb.MessageType_DATA })
		order = append(order, d.Envelope.GetProducerId())
	}
	firstThirty := strings.Count(strings.Join(order[:30], ","), std.ID())
	assert.GreaterOrEqual(t, firstThirty, 9, "with weights 6:3:1 a third of the first 30 deliveries are STANDARD: %v", order[:30])
	assert.Equal(t, urgent.ID(), order[0], "the urgent lane is served first")

	// Beyond the burst, PRIVILEGED traffic overflows to STANDARD and is logged.
	for i := range 5 {
		_, err := urgent.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(fmt.Sprintf(`{"over":%d}`, i))})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { // audit rows are written asynchronously
		evs, err := sys.app.Store().Audit().List(ctx, store.AuditFilter{AgentID: urgent.ID(), TypePrefix: "router.privileged_overflow"})
		return err == nil && len(evs) >= 4
	}, 5*time.Second, 20*time.Millisecond, "PRIVILEGED overflow is audited")
}

// TestConsumerKilledMidStreamResumes: B processes and confirms half of its messages, its
// stream dies, and on reconnecting — from its last offset or plainly — it receives exactly
// the rest, nothing lost and nothing twice.
func TestConsumerKilledMidStreamResumes(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := newConfig(t, kind)
			cfg.BufferCapacity = 20
			sys := start(t, cfg)
			ctx := context.Background()
			a, b, _ := pair(t, sys)
			var sent []string
			for i := range 10 {
				env, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))})
				require.NoError(t, err)
				sent = append(sent, env.GetMessageId())
			}
			s1, err := b.Receive(ctx)
			require.NoError(t, err)
			var lastSeq int64
			for i := range 5 {
				d, err := s1.Next()
				require.NoError(t, err)
				require.Equal(t, sent[i], d.Envelope.GetMessageId())
				lastSeq = d.Seq
				if i < 4 {
					ok, err := d.Confirm(ctx)
					require.NoError(t, err)
					require.True(t, ok)
				} // the fifth was processed but the consumer died before confirming
			}
			s1.Close()

			s2, err := b.ResumeAfter(ctx, lastSeq) // "I processed up to here"
			require.NoError(t, err)
			defer s2.Close()
			for i := 5; i < 10; i++ {
				d, err := s2.Next()
				require.NoError(t, err)
				assert.Equal(t, sent[i], d.Envelope.GetMessageId(), "nothing lost, nothing twice")
				ok, err := d.Confirm(ctx)
				require.NoError(t, err)
				require.True(t, ok)
			}
			depth, err := sys.app.Store().Messages().Depth(ctx, b.ID())
			require.NoError(t, err)
			assert.Zero(t, depth)

			// An offset beyond the stream is refused with a way out.
			s3, err := b.ResumeAfter(ctx, lastSeq+1_000_000)
			require.NoError(t, err)
			_, err = s3.Next()
			assert.Equal(t, codes.OutOfRange, status.Code(err))
			assert.Contains(t, status.Convert(err).Message(), "reconnect without sw4rm-resume-after")
			s3.Close()

			// After retention prunes confirmed rows, an old offset has expired: a clear error
			// that says how to recover.
			_, err = sys.app.Store().Messages().Prune(ctx, time.Now().Add(time.Hour), time.Now().Add(-time.Hour))
			require.NoError(t, err)
			s4, err := b.ResumeAfter(ctx, 0)
			require.NoError(t, err)
			_, err = s4.Next()
			assert.Equal(t, codes.FailedPrecondition, status.Code(err))
			assert.Contains(t, status.Convert(err).Message(), "expired")
			assert.Contains(t, status.Convert(err).Message(), "reconnect without sw4rm-resume-after")
			s4.Close()
		})
	}
}

// TestTTLExpiry: a message whose TTL runs out before B takes it fails with ttl_expired, A is
// told, it is dead-lettered, and B never receives it.
func TestTTLExpiry(t *testing.T) {
	sys := start(t, newConfig(t, "memory"))
	ctx := context.Background()
	a, b, aIn := pair(t, sys)
	m, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{}`), TTLMillis: 200})
	require.NoError(t, err)
	nack := aIn.next(t, true, ackFor(m.GetMessageId(), commonpb.AckStage_FAILED))
	p, _ := nack.AckPayload()
	assert.Equal(t, commonpb.ErrorCode_TTL_EXPIRED, p.ErrorCode)
	es, err := sys.app.Store().DLQ().ListDeadLetters(ctx, store.DLQFilter{Class: store.DLQTTLExpired, ProducerID: a.ID()})
	require.NoError(t, err)
	require.Len(t, es, 1)
	depth, err := sys.app.Store().Messages().Depth(ctx, b.ID())
	require.NoError(t, err)
	assert.Zero(t, depth, "the expired message left B's buffer")
}

// TestRequestResponse (004 §1–§3, §5–§7): a request requiring a response is answered, the
// response is routed to the requester by in_response_to and the request reaches FULFILLED; an
// unanswered request is retried with the same token and then FAILS with ack_timeout.
func TestRequestResponse(t *testing.T) {
	sys := start(t, newConfig(t, "postgres"))
	ctx := context.Background()
	a, b, aIn := pair(t, sys)
	bIn := openInbox(t, b)

	req, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"q":"status?"}`), ResponseTimeout: 5 * time.Second})
	require.NoError(t, err)
	pending, err := sys.app.Store().Messages().PendingResponses(ctx, a.ID())
	require.NoError(t, err)
	require.Len(t, pending, 1, "A's pending response is tracked: it waits on B")
	assert.Equal(t, b.ID(), pending[0].ResponderID)
	got := bIn.next(t, true, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == req.GetMessageId() })
	require.True(t, got.RequiresResponse())
	resp, err := got.Respond(ctx, []byte(`{"a":"green"}`))
	require.NoError(t, err)
	// The response and the request's ACK FULFILLED arrive in either order: ACKs ride the
	// PRIVILEGED lane.
	var answer *sdk.Delivery
	fulfilled := false
	aIn.next(t, true, func(d *sdk.Delivery) bool {
		if d.InResponseTo() == req.GetMessageId() {
			answer = d
		}
		if p, ok := d.AckPayload(); ok && p.AckForMessageID == req.GetMessageId() && p.Stage == commonpb.AckStage_FULFILLED {
			fulfilled = true
		}
		return answer != nil && fulfilled
	})
	assert.Equal(t, `{"a":"green"}`, string(answer.Envelope.GetPayload()))
	assert.Equal(t, req.GetCorrelationId(), answer.Envelope.GetCorrelationId(), "the response echoes the correlation_id")
	assert.Equal(t, protocol.ResponseToken(b.ID(), a.ID()+":request:"+req.GetMessageId()), answer.Envelope.GetIdempotencyToken())
	rec, err := sys.app.Store().Messages().GetMessage(ctx, req.GetMessageId())
	require.NoError(t, err)
	assert.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED, rec.State, "the response moved the request to FULFILLED")
	// A duplicate response is deduplicated by its deterministic token.
	_, err = got.Respond(ctx, []byte(`{"a":"green"}`))
	require.Error(t, err)
	assert.Contains(t, []commonpb.ErrorCode{commonpb.ErrorCode_DUPLICATE_DETECTED, commonpb.ErrorCode_ALREADY_IN_PROGRESS}, sdk.CodeOf(err))
	_ = resp

	// Unanswered: retried once with the same token, then FAILED ack_timeout.
	req2, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"q":"again?"}`), ResponseTimeout: 400 * time.Millisecond, MaxAttempts: 2})
	require.NoError(t, err)
	first := bIn.next(t, true, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == req2.GetMessageId() })
	retry := bIn.next(t, true, func(d *sdk.Delivery) bool {
		return d.Envelope.GetIdempotencyToken() == first.Envelope.GetIdempotencyToken() && d.Envelope.GetMessageId() != req2.GetMessageId()
	})
	assert.Equal(t, uint32(1), retry.Envelope.GetRetryCount())
	fail := aIn.next(t, true, func(d *sdk.Delivery) bool {
		p, ok := d.AckPayload()
		return ok && p.AckForMessageID == retry.Envelope.GetMessageId() && p.Stage == commonpb.AckStage_FAILED
	})
	fp, _ := fail.AckPayload()
	assert.Equal(t, commonpb.ErrorCode_ACK_TIMEOUT, fp.ErrorCode)
	assert.Contains(t, fp.Note, "no response")
}
