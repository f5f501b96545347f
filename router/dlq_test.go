package router

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// TestRequeueRevalidates: a dead letter that admission refused (here an oversize payload,
// as a policy violation holds it) is not let in by a requeue; the entry stays requeueable
// and nothing reaches the recipient.
func TestRequeueRevalidates(t *testing.T) {
	st := memory.New()
	t.Cleanup(st.Close)
	r := sweepFixture(t, st, time.Minute)
	r.cfg.MaxPayloadBytes = 1024
	payload := bytes.Repeat([]byte("x"), 2048)
	env := &commonpb.Envelope{MessageId: uuid.NewString(), ProducerId: "p", CorrelationId: uuid.NewString(), SequenceNumber: 1,
		MessageType: commonpb.MessageType_DATA, ContentType: "text/plain", Payload: payload, ContentLength: uint64(len(payload))}
	e, err := st.DLQ().PutDeadLetter(t.Context(), store.DLQEntry{MessageID: env.GetMessageId(), Envelope: env, RecipientID: "c",
		Class: store.DLQPolicyViolation, ErrorCode: commonpb.ErrorCode_OVERSIZE_PAYLOAD, FailedAt: time.Now()})
	require.NoError(t, err)

	_, err = r.Requeue(t.Context(), e.ID)
	require.Error(t, err)
	require.Equal(t, commonpb.ErrorCode_OVERSIZE_PAYLOAD, protocol.CodeOf(err), "%v", err)
	depth, err := st.Messages().Depth(t.Context(), "c")
	require.NoError(t, err)
	require.Zero(t, depth, "nothing was admitted")
	after, err := st.DLQ().GetDeadLetter(t.Context(), e.ID)
	require.NoError(t, err)
	require.Empty(t, after.RequeuedAs, "the entry stays requeueable")
}

// deadLetterOf waits for the dead letter of messageID and returns it.
func deadLetterOf(t *testing.T, r *Router, st store.Store, messageID string) store.DLQEntry {
	t.Helper()
	var found store.DLQEntry
	require.Eventually(t, func() bool {
		require.NoError(t, r.SweepOnce(t.Context()))
		es, err := st.DLQ().ListDeadLetters(t.Context(), store.DLQFilter{IncludeRequeued: true})
		require.NoError(t, err)
		for _, e := range es {
			if e.MessageID == messageID {
				found = e
				return true
			}
		}
		return false
	}, 5*time.Second, 20*time.Millisecond, "no dead letter for %s", messageID)
	return found
}

func attemptIDs(as []store.DLQAttempt) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.MessageID
	}
	return out
}

// TestDeadLetterHistoryFollowsARequeue: a message refused at admission (no_route: its
// recipient is not registered) is dead-lettered without a message record; the operator
// requeues it once the recipient is there, and the requeued attempt times out. The second
// dead letter's history holds both attempts (§21.1), the refused one found only in the first
// dead letter, and its first-seen time is the operation's.
func TestDeadLetterHistoryFollowsARequeue(t *testing.T) {
	st := memory.New()
	t.Cleanup(st.Close)
	r := sweepFixture(t, st, 50*time.Millisecond)
	r.cfg.MaxRetries = 1 // the requeue (retry_count 1) uses the budget up
	env := &commonpb.Envelope{MessageId: uuid.NewString(), ProducerId: "p", CorrelationId: uuid.NewString(), SequenceNumber: 1,
		IdempotencyToken: "p:charge:1", MessageType: commonpb.MessageType_DATA, ContentType: "application/json",
		Payload: []byte(`{}`), ContentLength: 2}
	perr, err := r.Send(t.Context(), env, "d")
	require.NoError(t, err)
	require.Equal(t, commonpb.ErrorCode_NO_ROUTE, perr.Code)
	first := deadLetterOf(t, r, st, env.GetMessageId())
	require.Equal(t, []string{env.GetMessageId()}, attemptIDs(first.Attempts))
	require.Equal(t, "REJECTED", first.Attempts[0].State)
	require.Equal(t, "NO_ROUTE", first.Attempts[0].ErrorCode)

	require.NoError(t, st.Registry().PutAgent(t.Context(), store.AgentRecord{
		Descriptor: &registrypb.AgentDescriptor{AgentId: "d", Name: "d"}, State: commonpb.AgentState_RUNNABLE}))
	r.ForgetAgent("d")
	requeued, err := r.Requeue(t.Context(), first.ID)
	require.NoError(t, err)
	second := deadLetterOf(t, r, st, requeued)
	require.Equal(t, store.DLQRetriesExhausted, second.Class)
	require.Equal(t, []string{env.GetMessageId(), requeued}, attemptIDs(second.Attempts))
	require.Equal(t, first.Attempts[0], second.Attempts[0])
	last := second.Attempts[1]
	require.Equal(t, "TIMED_OUT", last.State)
	require.Equal(t, "ACK_TIMEOUT", last.ErrorCode)
	require.Contains(t, last.Reason, "retry budget")
	require.False(t, last.UpdatedAt.Before(last.At))
	require.Zero(t, second.AttemptsDropped)
	require.True(t, second.FirstSeenAt.Equal(first.Attempts[0].At), "first seen %v, first attempt %v", second.FirstSeenAt, first.Attempts[0].At)
}

// TestDeadLetterHistoryHoldsRequestRetries: a response-required request that is never
// answered is retried by the router with new message_ids (004 §1) and then dead-lettered;
// the dead letter lists every attempt, oldest first, the last FAILED with ack_timeout.
func TestDeadLetterHistoryHoldsRequestRetries(t *testing.T) {
	st := memory.New()
	t.Cleanup(st.Close)
	r := sweepFixture(t, st, time.Minute)
	env := &commonpb.Envelope{MessageId: uuid.NewString(), ProducerId: "p", CorrelationId: uuid.NewString(), SequenceNumber: 1,
		MessageType: commonpb.MessageType_DATA, ContentType: "application/json; sw4rm-response-timeout-ms=30; sw4rm-max-attempts=3",
		Payload: []byte(`{}`), ContentLength: 2}
	perr, err := r.Send(t.Context(), env, "c")
	require.NoError(t, err)
	require.Nil(t, perr)

	var entry store.DLQEntry
	require.Eventually(t, func() bool {
		require.NoError(t, r.SweepOnce(t.Context()))
		es, err := st.DLQ().ListDeadLetters(t.Context(), store.DLQFilter{ProducerID: "p"})
		require.NoError(t, err)
		if len(es) == 0 {
			return false
		}
		entry = es[0]
		return true
	}, 5*time.Second, 10*time.Millisecond)
	require.Len(t, entry.Attempts, 3, "%+v", entry.Attempts)
	require.Equal(t, env.GetMessageId(), entry.Attempts[0].MessageID, "the original request comes first")
	require.Equal(t, entry.MessageID, entry.Attempts[2].MessageID, "the dead-lettered attempt comes last")
	for i, a := range entry.Attempts {
		rec, err := st.Messages().GetMessage(t.Context(), a.MessageID)
		require.NoError(t, err)
		require.Equal(t, uint32(i), rec.Envelope.GetRetryCount(), "attempt %d", i)
		require.True(t, a.At.Equal(rec.CreatedAt), "attempt %d at", i)
	}
	require.Equal(t, "FAILED", entry.Attempts[2].State)
	require.Equal(t, "ACK_TIMEOUT", entry.Attempts[2].ErrorCode)
	require.True(t, entry.FirstSeenAt.Equal(entry.Attempts[0].At))
}

// TestConsumerFailuresOfSchedulerControlsAreNotDeadLetters: an agent that answers the
// scheduler's RUN with FAILED ends the message FAILED with its error_code and note — its
// task's outcome, which the scheduler records — and leaves no dead letter, while the same
// answer to another agent's DATA message is dead-lettered as a terminal error (§21.1).
func TestConsumerFailuresOfSchedulerControlsAreNotDeadLetters(t *testing.T) {
	st := memory.New()
	t.Cleanup(st.Close)
	r := sweepFixture(t, st, time.Minute)
	// fail answers messageID as its consumer c does: READ, then FAILED validation_error.
	fail := func(messageID, correlationID, note string) {
		t.Helper()
		for _, ack := range []protocol.AckPayload{
			{AckForMessageID: messageID, Stage: commonpb.AckStage_READ},
			{AckForMessageID: messageID, Stage: commonpb.AckStage_FAILED, ErrorCode: commonpb.ErrorCode_VALIDATION_ERROR, Note: note},
		} {
			perr, err := r.Send(t.Context(), protocol.NewAckEnvelope(protocol.AckEnvelopeInput{MessageID: uuid.NewString(),
				ProducerID: "c", CorrelationID: correlationID, Ack: ack}), "")
			require.NoError(t, err)
			require.Nil(t, perr)
		}
	}

	run, err := protocol.NewControlEnvelope(uuid.NewString(), protocol.SchedulerID, protocol.Control{Type: protocol.ControlRun, TaskID: "t1"})
	require.NoError(t, err)
	require.NoError(t, r.SendControl(t.Context(), "c", run))
	fail(run.GetMessageId(), run.GetCorrelationId(), "1 finding: main.go:42: exported function Serve has no doc comment")
	rec, err := st.Messages().GetMessage(t.Context(), run.GetMessageId())
	require.NoError(t, err)
	require.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_FAILED, rec.State)
	require.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, rec.ErrorCode)
	require.Equal(t, "1 finding: main.go:42: exported function Serve has no doc comment", rec.Note)
	es, err := st.DLQ().ListDeadLetters(t.Context(), store.DLQFilter{IncludeRequeued: true})
	require.NoError(t, err)
	require.Empty(t, es, "a task's failure is its outcome, not a dead letter")

	data := sendToC(t, r, 0)
	drec, err := st.Messages().GetMessage(t.Context(), data)
	require.NoError(t, err)
	fail(data, drec.CorrelationID, "cannot take it")
	es, err = st.DLQ().ListDeadLetters(t.Context(), store.DLQFilter{IncludeRequeued: true})
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.Equal(t, data, es[0].MessageID)
	require.Equal(t, store.DLQTerminalError, es[0].Class)
	require.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, es[0].ErrorCode)
}
