package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/dlqadminpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// requireAttemptHistory checks that a dead letter's history is the bounded form of all,
// every attempt of its operation in order (store.BoundAttempts), oldest first.
func requireAttemptHistory(t *testing.T, e *dlqadminpb.DeadLetter, all []string) {
	t.Helper()
	kept, dropped := all, 0
	if len(all) > store.MaxDLQAttempts {
		kept = append(all[:store.DLQAttemptsHead:store.DLQAttemptsHead], all[len(all)-(store.MaxDLQAttempts-store.DLQAttemptsHead):]...)
		dropped = len(all) - store.MaxDLQAttempts
	}
	got := make([]string, len(e.GetAttempts()))
	for i, a := range e.GetAttempts() {
		got[i] = a.GetMessageId()
		if i > 0 {
			assert.False(t, a.GetAt().AsTime().Before(e.GetAttempts()[i-1].GetAt().AsTime()), "attempt %d is older than the one before", i)
		}
	}
	require.Equal(t, kept, got)
	require.Equal(t, uint32(dropped), e.GetAttemptsDropped())
	require.True(t, e.GetFirstSeenAt().AsTime().Equal(e.GetAttempts()[0].GetAt().AsTime()), "first seen is the first attempt's")
}

// TestDeadLetterAttemptHistory drives one operation (one producer, correlation and token)
// through failed attempts over gRPC, on both stores, and reads the attempt history back
// through the DLQ admin RPCs and `sw4rm dlq show` (§21.1: "attempt history with timestamps
// and reasons"): the first attempt times out; 20 attempts sent while it is in progress are
// refused by the idempotency cache; the producer's retry times out too and, with the retry
// budget used, is dead-lettered. An operator requeues that dead letter and the recipient
// fails the requeued attempt for good: the second dead letter's history is the whole
// operation, 23 attempts, bounded to the first 5 and the last 15 with 3 counted as dropped.
func TestDeadLetterAttemptHistory(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := hitlConfig(t, kind)
			// The 20 refused sends must all land while the first attempt is in progress: a
			// 1 s timeout let a loaded machine's PostgreSQL run out of it mid-loop.
			cfg.AckTimeout = 5 * time.Second
			cfg.MaxRetries = 1
			sys := start(t, cfg)
			ctx := context.Background()
			a, b, aIn := pair(t, sys) // b opens no stream at first: nothing it is sent is confirmed
			a.SetMaxRetries(0)        // the test sends the retries itself
			admin := dlqadminpb.NewDlqAdminServiceClient(dialRaw(t, sys))
			octx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer alice-token")
			corr, token := uuid.NewString(), a.ID()+":charge:1"
			send := func(retry uint32) (*commonpb.Envelope, error) {
				return a.Send(ctx, sdk.Message{To: b.ID(), CorrelationID: corr, IdempotencyToken: token, Payload: []byte(`{"amount":42}`), RetryCount: retry})
			}

			m1, err := send(0)
			require.NoError(t, err)
			all := []string{m1.GetMessageId()}
			for range 20 {
				m, err := send(0)
				require.Error(t, err)
				require.Equal(t, commonpb.ErrorCode_ALREADY_IN_PROGRESS, sdk.CodeOf(err))
				all = append(all, m.GetMessageId())
			}
			aIn.next(t, true, ackFor(m1.GetMessageId(), commonpb.AckStage_TIMED_OUT))
			m2, err := send(1)
			require.NoError(t, err)
			all = append(all, m2.GetMessageId())
			aIn.next(t, true, ackFor(m2.GetMessageId(), commonpb.AckStage_TIMED_OUT))

			listed, err := admin.ListDeadLetters(octx, &dlqadminpb.ListDeadLettersRequest{Filter: &dlqadminpb.DeadLetterFilter{Producer: a.ID()}})
			require.NoError(t, err)
			require.Len(t, listed.GetDeadLetters(), 1)
			first := listed.GetDeadLetters()[0]
			assert.Equal(t, m2.GetMessageId(), first.GetMessageId())
			assert.Equal(t, "retries_exhausted", first.GetErrorClass())
			requireAttemptHistory(t, first, all)
			h := first.GetAttempts()
			assert.Equal(t, "TIMED_OUT", h[0].GetState())
			assert.Equal(t, "ACK_TIMEOUT", h[0].GetErrorCode())
			assert.True(t, h[0].GetUpdatedAt().AsTime().After(h[0].GetAt().AsTime()), "the timeout came after the admission")
			assert.Equal(t, "REJECTED", h[1].GetState())
			assert.Equal(t, "ALREADY_IN_PROGRESS", h[1].GetErrorCode())
			assert.Contains(t, h[1].GetReason(), m1.GetMessageId(), "refused while the first attempt was in progress")
			assert.Equal(t, "TIMED_OUT", h[len(h)-1].GetState())
			assert.Equal(t, "ACK_TIMEOUT", h[len(h)-1].GetErrorCode())
			assert.Contains(t, h[len(h)-1].GetReason(), "retry budget of 1 exhausted")

			// The operator requeues it; the recipient gets the new attempt and fails it.
			rq, err := admin.Requeue(octx, &dlqadminpb.RequeueRequest{Ids: []int64{first.GetId()}})
			require.NoError(t, err)
			require.Len(t, rq.GetResults(), 1)
			require.Empty(t, rq.GetResults()[0].GetCode(), rq.GetResults()[0].GetError())
			m3 := rq.GetResults()[0].GetMessageId()
			all = append(all, m3)
			bIn := openInbox(t, b)
			d := bIn.next(t, true, func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == m3 })
			require.NoError(t, d.Ack(ctx, commonpb.AckStage_FAILED, commonpb.ErrorCode_PERMISSION_DENIED, "card processor refused"))
			aIn.next(t, true, ackFor(m3, commonpb.AckStage_FAILED))

			var second *dlqadminpb.DeadLetter
			require.Eventually(t, func() bool {
				resp, err := admin.ListDeadLetters(octx, &dlqadminpb.ListDeadLettersRequest{Filter: &dlqadminpb.DeadLetterFilter{Producer: a.ID()}})
				require.NoError(t, err)
				for _, e := range resp.GetDeadLetters() {
					if e.GetMessageId() == m3 {
						second = e
					}
				}
				return second != nil
			}, 10*time.Second, 20*time.Millisecond)
			got, err := admin.GetDeadLetter(octx, &dlqadminpb.GetDeadLetterRequest{Id: second.GetId()})
			require.NoError(t, err)
			second = got.GetDeadLetter()
			assert.Equal(t, "terminal_error", second.GetErrorClass())
			requireAttemptHistory(t, second, all)
			last := second.GetAttempts()[len(second.GetAttempts())-1]
			assert.Equal(t, m3, last.GetMessageId())
			assert.Equal(t, "FAILED", last.GetState())
			assert.Equal(t, "PERMISSION_DENIED", last.GetErrorCode())
			assert.Equal(t, "card processor refused", last.GetReason())
			assert.True(t, second.GetFirstSeenAt().AsTime().Equal(first.GetFirstSeenAt().AsTime()))

			// The first dead letter reads the same through GetDeadLetter, now requeued.
			got, err = admin.GetDeadLetter(octx, &dlqadminpb.GetDeadLetterRequest{Id: first.GetId()})
			require.NoError(t, err)
			assert.Equal(t, m3, got.GetDeadLetter().GetRequeuedAs())
			requireAttemptHistory(t, got.GetDeadLetter(), all[:len(all)-1])

			_, err = admin.GetDeadLetter(octx, &dlqadminpb.GetDeadLetterRequest{Id: 0})
			assert.Equal(t, codes.InvalidArgument, status.Code(err))
			_, err = admin.GetDeadLetter(octx, &dlqadminpb.GetDeadLetterRequest{Id: second.GetId() + 1000})
			assert.Equal(t, codes.NotFound, status.Code(err))
			_, err = admin.GetDeadLetter(ctx, &dlqadminpb.GetDeadLetterRequest{Id: second.GetId()})
			assert.Equal(t, codes.Unauthenticated, status.Code(err), "operators only")

			out, err := runDLQCLI(t, sys, "show", fmt.Sprint(second.GetId()))
			require.NoError(t, err, out)
			assert.Regexp(t, `(?m)^ATTEMPTS:\s+23 \(20 shown: the first 5 and the last 15\)$`, out)
			assert.Regexp(t, `(?m)^1\s+\S+\s+TIMED_OUT\s+ACK_TIMEOUT\s+\S+\s+`+m1.GetMessageId()+`\s`, out)
			assert.Regexp(t, `(?m)^…\s+\(3 attempts not kept\)`, out)
			assert.Regexp(t, `(?m)^23\s+\S+\s+FAILED\s+PERMISSION_DENIED\s+\S+\s+`+m3+`\s+card processor refused$`, out)
		})
	}
}
