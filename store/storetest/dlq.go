package storetest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// deadLetter returns a dead letter with every field set that failed at failedAt; the put
// must ignore ID, RequeuedAt and RequeuedAs.
func deadLetter(messageID string, failedAt time.Time) store.DLQEntry {
	env := Envelope(messageID)
	env.IdempotencyToken = "tok-" + messageID
	env.RetryCount = 2
	env.Timestamp = timestamppb.New(failedAt.Add(-time.Minute))
	return store.DLQEntry{
		ID:               999,
		MessageID:        messageID,
		ProducerID:       env.GetProducerId(),
		RecipientID:      "bob",
		CorrelationID:    env.GetCorrelationId(),
		IdempotencyToken: env.GetIdempotencyToken(),
		ErrorCode:        commonpb.ErrorCode_ACK_TIMEOUT,
		Class:            store.DLQRetriesExhausted,
		Reason:           "no ACK after 3 attempts",
		Attempts: []store.DLQAttempt{
			{MessageID: messageID + "-a1", At: failedAt.Add(-time.Minute), State: "TIMED_OUT", ErrorCode: "ACK_TIMEOUT",
				Reason: "ack_timeout", UpdatedAt: failedAt.Add(-50 * time.Second)},
			{MessageID: messageID, At: failedAt.Add(-30 * time.Second), State: "TIMED_OUT", Reason: "ack_timeout"},
		},
		AttemptsDropped: 1,
		Envelope:        env,
		PayloadSize:     len(env.GetPayload()),
		ContentType:     env.GetContentType(),
		PayloadExcerpt:  bytes.Clone(env.GetPayload()),
		FirstSeenAt:     failedAt.Add(-time.Minute),
		FailedAt:        failedAt,
		RequeuedAt:      failedAt.Add(time.Hour),
		RequeuedAs:      "should-be-ignored",
	}
}

func dlqIDs(es []store.DLQEntry) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

func dlqMessageIDs(es []store.DLQEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.MessageID
	}
	return out
}

// requireDeadLetter checks that got holds what a put of want stored: every field but ID,
// with times in UTC at microsecond precision.
func requireDeadLetter(t *testing.T, want, got store.DLQEntry) {
	t.Helper()
	require.Equal(t, want.MessageID, got.MessageID)
	require.Equal(t, want.ProducerID, got.ProducerID)
	require.Equal(t, want.RecipientID, got.RecipientID)
	require.Equal(t, want.CorrelationID, got.CorrelationID)
	require.Equal(t, want.IdempotencyToken, got.IdempotencyToken)
	require.Equal(t, want.ErrorCode, got.ErrorCode)
	require.Equal(t, want.Class, got.Class)
	require.Equal(t, want.Reason, got.Reason)
	require.Len(t, got.Attempts, len(want.Attempts))
	for i, a := range want.Attempts {
		g := got.Attempts[i]
		require.Equal(t, a.MessageID, g.MessageID, "attempt %d", i)
		require.Equal(t, a.State, g.State, "attempt %d", i)
		require.Equal(t, a.ErrorCode, g.ErrorCode, "attempt %d", i)
		require.Equal(t, a.Reason, g.Reason, "attempt %d", i)
		requireSameTime(t, a.At.Truncate(time.Microsecond), g.At, fmt.Sprintf("attempt %d at", i))
		if a.UpdatedAt.IsZero() {
			require.True(t, g.UpdatedAt.IsZero(), "attempt %d updated_at %v", i, g.UpdatedAt)
		} else {
			requireSameTime(t, a.UpdatedAt.Truncate(time.Microsecond), g.UpdatedAt, fmt.Sprintf("attempt %d updated_at", i))
		}
	}
	require.Equal(t, want.AttemptsDropped, got.AttemptsDropped)
	if want.Envelope == nil {
		require.Nil(t, got.Envelope)
	} else {
		requireProtoEqual(t, want.Envelope, got.Envelope)
	}
	require.Equal(t, want.PayloadSize, got.PayloadSize)
	require.Equal(t, want.ContentType, got.ContentType)
	require.Equal(t, want.PayloadExcerpt, got.PayloadExcerpt)
	if want.FirstSeenAt.IsZero() {
		require.True(t, got.FirstSeenAt.IsZero(), "first_seen_at %v", got.FirstSeenAt)
	} else {
		requireSameTime(t, want.FirstSeenAt.Truncate(time.Microsecond), got.FirstSeenAt, "first_seen_at")
	}
	requireSameTime(t, want.FailedAt.Truncate(time.Microsecond), got.FailedAt, "failed_at")
}

// runDLQ checks the dead-letter queue (§21.1), one concern per function; every subtest stays a
// direct child of DLQ.
func runDLQ(t *testing.T, newStore func(t *testing.T) store.Store) {
	runDLQPut(t, newStore)
	runDLQDuplicates(t, newStore)
	runDLQListFilters(t, newStore)
	runDLQListOrder(t, newStore)
	runDLQRequeue(t, newStore)
	runDLQPurge(t, newStore)
	runDLQCopies(t, newStore)
	runDLQAttemptHistory(t, newStore)
}

// runDLQPut checks that a dead letter reads back whole, that invalid ones are refused and that
// the payload excerpt is bounded.
func runDLQPut(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("PutGetRoundTrip", func(t *testing.T) {
		q := newStore(t).DLQ()
		ctx := t.Context()
		zone := time.FixedZone("UTC+2", 2*60*60)
		failed := time.Date(2025, 3, 4, 5, 6, 7, 123456789, zone)
		in := deadLetter("m1", failed)
		in.ErrorCode = commonpb.ErrorCode_TTL_EXPIRED
		in.Class = store.DLQTTLExpired
		put, err := q.PutDeadLetter(ctx, in)
		require.NoError(t, err)
		require.Positive(t, put.ID)
		require.NotEqual(t, int64(999), put.ID, "the store assigns the ID")
		requireDeadLetter(t, in, put)
		require.True(t, put.RequeuedAt.IsZero(), "a put records the entry as not requeued, got %v", put.RequeuedAt)
		require.Empty(t, put.RequeuedAs)

		got, err := q.GetDeadLetter(ctx, put.ID)
		require.NoError(t, err)
		require.Equal(t, put.ID, got.ID)
		requireDeadLetter(t, in, got)
		require.True(t, got.RequeuedAt.IsZero())
		require.Empty(t, got.RequeuedAs)

		// The minimum: a zero FailedAt means now, a zero FirstSeenAt stays zero, and no
		// envelope, attempts or excerpt read back as nil.
		bare := store.DLQEntry{MessageID: "m2", Class: store.DLQTerminalError}
		put2, err := q.PutDeadLetter(ctx, bare)
		require.NoError(t, err)
		require.Greater(t, put2.ID, put.ID, "IDs increase")
		got, err = q.GetDeadLetter(ctx, put2.ID)
		require.NoError(t, err)
		require.Equal(t, "m2", got.MessageID)
		require.Equal(t, store.DLQTerminalError, got.Class)
		require.Equal(t, commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED, got.ErrorCode)
		require.Empty(t, got.ProducerID)
		require.Empty(t, got.RecipientID)
		require.Nil(t, got.Attempts)
		require.Zero(t, got.AttemptsDropped)
		require.Nil(t, got.Envelope)
		require.Nil(t, got.PayloadExcerpt)
		require.Zero(t, got.PayloadSize)
		require.True(t, got.FirstSeenAt.IsZero(), "first_seen_at %v", got.FirstSeenAt)
		requireRecent(t, got.FailedAt)
		require.Equal(t, time.UTC, got.FailedAt.Location())
		require.True(t, put2.FailedAt.Equal(got.FailedAt), "the put returns the stored failed_at")

		// An empty (but present) envelope is kept as one.
		put3, err := q.PutDeadLetter(ctx, store.DLQEntry{MessageID: "m3", Class: store.DLQPolicyViolation, Envelope: &commonpb.Envelope{}})
		require.NoError(t, err)
		got, err = q.GetDeadLetter(ctx, put3.ID)
		require.NoError(t, err)
		require.NotNil(t, got.Envelope)
		requireProtoEqual(t, &commonpb.Envelope{}, got.Envelope)

		_, err = q.GetDeadLetter(ctx, put3.ID+100)
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("PutRejectsInvalidEntries", func(t *testing.T) {
		q := newStore(t).DLQ()
		ctx := t.Context()
		now := time.Now()
		noID := deadLetter("", now)
		_, err := q.PutDeadLetter(ctx, noID)
		require.Error(t, err, "a message_id is required")
		for _, class := range []string{"", "bogus", "TTL_EXPIRED"} {
			e := deadLetter("m1", now)
			e.Class = class
			_, err := q.PutDeadLetter(ctx, e)
			require.Error(t, err, "class %q is not a DLQ class", class)
		}
		list, err := q.ListDeadLetters(ctx, store.DLQFilter{IncludeRequeued: true})
		require.NoError(t, err)
		require.Empty(t, list, "a refused put stores nothing")
		for _, class := range []string{store.DLQRetriesExhausted, store.DLQTerminalError, store.DLQPolicyViolation, store.DLQTTLExpired} {
			e := deadLetter("m-"+class, now)
			e.Class = class
			_, err := q.PutDeadLetter(ctx, e)
			require.NoError(t, err, "class %q", class)
		}
	})

	t.Run("ExcerptIsAtMost256Bytes", func(t *testing.T) {
		q := newStore(t).DLQ()
		ctx := t.Context()
		long := bytes.Repeat([]byte("0123456789abcdef"), 20) // 320 bytes
		e := deadLetter("m1", time.Now())
		e.PayloadExcerpt = long
		e.PayloadSize = len(long)
		put, err := q.PutDeadLetter(ctx, e)
		require.NoError(t, err)
		require.Equal(t, long[:256], put.PayloadExcerpt)
		got, err := q.GetDeadLetter(ctx, put.ID)
		require.NoError(t, err)
		require.Equal(t, long[:256], got.PayloadExcerpt)
		require.Equal(t, 320, got.PayloadSize, "the size is the payload's, not the excerpt's")
		require.Len(t, long, 320, "the caller's slice is untouched")
	})
}

// runDLQDuplicates checks that a second dead letter for one message_id returns the first, also
// when racing.
func runDLQDuplicates(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("DuplicateMessageIDReturnsExisting", func(t *testing.T) {
		q := newStore(t).DLQ()
		ctx := t.Context()
		base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		first := deadLetter("m1", base)
		put, err := q.PutDeadLetter(ctx, first)
		require.NoError(t, err)

		again := deadLetter("m1", base.Add(time.Hour))
		again.Class = store.DLQTerminalError
		again.ErrorCode = commonpb.ErrorCode_VALIDATION_ERROR
		again.Reason = "changed"
		again.RecipientID = "carol"
		again.Attempts = nil
		again.Envelope = nil
		dup, err := q.PutDeadLetter(ctx, again)
		require.NoError(t, err, "a retried sweep is not an error")
		require.Equal(t, put.ID, dup.ID)
		requireDeadLetter(t, first, dup)

		got, err := q.GetDeadLetter(ctx, put.ID)
		require.NoError(t, err)
		requireDeadLetter(t, first, got)
		list, err := q.ListDeadLetters(ctx, store.DLQFilter{IncludeRequeued: true})
		require.NoError(t, err)
		require.Equal(t, []int64{put.ID}, dlqIDs(list), "nothing was added")

		// Once requeued, a duplicate put returns the requeued entry as it is.
		requeuedAt := base.Add(2 * time.Hour)
		require.NoError(t, q.MarkRequeued(ctx, put.ID, "m1-r", requeuedAt))
		dup, err = q.PutDeadLetter(ctx, first)
		require.NoError(t, err)
		require.Equal(t, put.ID, dup.ID)
		requireSameTime(t, requeuedAt, dup.RequeuedAt, "requeued_at")
		require.Equal(t, "m1-r", dup.RequeuedAs)
	})

	t.Run("ConcurrentDuplicatePutsShareOneEntry", func(t *testing.T) {
		q := newStore(t).DLQ()
		ctx := t.Context()
		const n = 16
		var (
			ids  [n]int64
			errs [n]error
		)
		atOnce(n, func(i int) {
			e := deadLetter("m1", time.Now())
			e.Reason = fmt.Sprintf("put %d", i)
			got, err := q.PutDeadLetter(ctx, e)
			ids[i], errs[i] = got.ID, err
		})
		for i := range n {
			require.NoError(t, errs[i], "put %d", i)
			require.Equal(t, ids[0], ids[i], "put %d got another entry", i)
		}
		list, err := q.ListDeadLetters(ctx, store.DLQFilter{IncludeRequeued: true})
		require.NoError(t, err)
		require.Len(t, list, 1)
	})
}

// runDLQListFilters checks ListDeadLetters' filters (§21.1: time range, error class, route,
// producer); its one subtest is a seed table and a query per filter, which reads best whole.
func runDLQListFilters(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("ListFilters", func(t *testing.T) {
		q := newStore(t).DLQ()
		ctx := t.Context()
		base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		seed := []struct {
			id                  string
			sec                 int
			class               string
			code                commonpb.ErrorCode
			producer, recipient string
		}{
			{"d0", 0, store.DLQRetriesExhausted, commonpb.ErrorCode_ACK_TIMEOUT, "alice", "bob"},
			{"d1", 10, store.DLQTTLExpired, commonpb.ErrorCode_TTL_EXPIRED, "alice", "carol"},
			{"d2", 20, store.DLQPolicyViolation, commonpb.ErrorCode_OVERSIZE_PAYLOAD, "dave", "bob"},
			{"d3", 30, store.DLQTerminalError, commonpb.ErrorCode_VALIDATION_ERROR, "dave", "carol"},
			{"d4", 40, store.DLQRetriesExhausted, commonpb.ErrorCode_ACK_TIMEOUT, "alice", "carol"},
			{"d5", 50, store.DLQTerminalError, commonpb.ErrorCode_PERMISSION_DENIED, "erin", "bob"},
		}
		ids := map[string]int64{}
		for _, x := range seed {
			e := deadLetter(x.id, base.Add(time.Duration(x.sec)*time.Second))
			e.Class, e.ErrorCode, e.ProducerID, e.RecipientID = x.class, x.code, x.producer, x.recipient
			put, err := q.PutDeadLetter(ctx, e)
			require.NoError(t, err)
			ids[x.id] = put.ID
		}
		require.NoError(t, q.MarkRequeued(ctx, ids["d4"], "d4-r", base.Add(time.Hour)))

		list := func(f store.DLQFilter) []string {
			t.Helper()
			es, err := q.ListDeadLetters(ctx, f)
			require.NoError(t, err)
			for _, e := range es {
				if f.Class != "" {
					require.Equal(t, f.Class, e.Class)
				}
				if f.ErrorCode != 0 {
					require.Equal(t, f.ErrorCode, e.ErrorCode)
				}
				if f.ProducerID != "" {
					require.Equal(t, f.ProducerID, e.ProducerID)
				}
				if f.RecipientID != "" {
					require.Equal(t, f.RecipientID, e.RecipientID)
				}
				if !f.IncludeRequeued {
					require.True(t, e.RequeuedAt.IsZero(), "requeued entry %s listed", e.MessageID)
				}
			}
			return dlqMessageIDs(es)
		}
		at := func(sec int) time.Time { return base.Add(time.Duration(sec) * time.Second) }

		require.Equal(t, []string{"d0", "d1", "d2", "d3", "d5"}, list(store.DLQFilter{}), "requeued entries are left out by default")
		require.Equal(t, []string{"d0", "d1", "d2", "d3", "d4", "d5"}, list(store.DLQFilter{IncludeRequeued: true}))

		// Time range: Since inclusive, Until exclusive, on FailedAt.
		require.Equal(t, []string{"d2", "d3", "d5"}, list(store.DLQFilter{Since: at(20)}))
		require.Equal(t, []string{"d3", "d5"}, list(store.DLQFilter{Since: at(20).Add(time.Microsecond)}))
		require.Equal(t, []string{"d0", "d1"}, list(store.DLQFilter{Until: at(20)}))
		require.Equal(t, []string{"d0", "d1", "d2"}, list(store.DLQFilter{Until: at(20).Add(time.Microsecond)}))
		require.Equal(t, []string{"d1", "d2", "d3"}, list(store.DLQFilter{Since: at(10), Until: at(40)}))
		require.Equal(t, []string{"d1", "d2", "d3", "d4"}, list(store.DLQFilter{Since: at(10), Until: at(50), IncludeRequeued: true}))
		require.Empty(t, list(store.DLQFilter{Since: at(30), Until: at(30)}))
		require.Empty(t, list(store.DLQFilter{Since: at(60)}))
		// Bounds in another zone mean the same instants.
		zone := time.FixedZone("UTC-5", -5*60*60)
		require.Equal(t, []string{"d1", "d2"}, list(store.DLQFilter{Since: at(10).In(zone), Until: at(30).In(zone)}))

		// Class, error code, route and producer.
		require.Equal(t, []string{"d3", "d5"}, list(store.DLQFilter{Class: store.DLQTerminalError}))
		require.Equal(t, []string{"d0"}, list(store.DLQFilter{Class: store.DLQRetriesExhausted}))
		require.Equal(t, []string{"d0", "d4"}, list(store.DLQFilter{Class: store.DLQRetriesExhausted, IncludeRequeued: true}))
		require.Empty(t, list(store.DLQFilter{Class: "unknown"}))
		require.Equal(t, []string{"d0"}, list(store.DLQFilter{ErrorCode: commonpb.ErrorCode_ACK_TIMEOUT}))
		require.Equal(t, []string{"d2"}, list(store.DLQFilter{ErrorCode: commonpb.ErrorCode_OVERSIZE_PAYLOAD}))
		require.Empty(t, list(store.DLQFilter{ErrorCode: commonpb.ErrorCode_BUFFER_FULL}))
		require.Equal(t, []string{"d0", "d2", "d5"}, list(store.DLQFilter{RecipientID: "bob"}))
		require.Equal(t, []string{"d1", "d3"}, list(store.DLQFilter{RecipientID: "carol"}))
		require.Equal(t, []string{"d1", "d3", "d4"}, list(store.DLQFilter{RecipientID: "carol", IncludeRequeued: true}))
		require.Empty(t, list(store.DLQFilter{RecipientID: "nobody"}))
		require.Equal(t, []string{"d0", "d1"}, list(store.DLQFilter{ProducerID: "alice"}))
		require.Equal(t, []string{"d2", "d3"}, list(store.DLQFilter{ProducerID: "dave"}))
		require.Empty(t, list(store.DLQFilter{ProducerID: "nobody"}))

		// Combinations must all match.
		require.Equal(t, []string{"d3"}, list(store.DLQFilter{ProducerID: "dave", RecipientID: "carol"}))
		require.Equal(t, []string{"d5"}, list(store.DLQFilter{Class: store.DLQTerminalError, RecipientID: "bob"}))
		require.Equal(t, []string{"d4"}, list(store.DLQFilter{
			Since: at(40), Until: at(41), Class: store.DLQRetriesExhausted, ErrorCode: commonpb.ErrorCode_ACK_TIMEOUT,
			ProducerID: "alice", RecipientID: "carol", IncludeRequeued: true,
		}))
		require.Empty(t, list(store.DLQFilter{ProducerID: "alice", RecipientID: "bob", Since: at(1)}))

		// Listed entries carry every field.
		es, err := q.ListDeadLetters(ctx, store.DLQFilter{ProducerID: "dave", RecipientID: "carol"})
		require.NoError(t, err)
		require.Len(t, es, 1)
		want := deadLetter("d3", at(30))
		want.Class, want.ErrorCode, want.ProducerID, want.RecipientID = store.DLQTerminalError, commonpb.ErrorCode_VALIDATION_ERROR, "dave", "carol"
		require.Equal(t, ids["d3"], es[0].ID)
		requireDeadLetter(t, want, es[0])
		es, err = q.ListDeadLetters(ctx, store.DLQFilter{Class: store.DLQRetriesExhausted, IncludeRequeued: true})
		require.NoError(t, err)
		require.Len(t, es, 2)
		requireSameTime(t, base.Add(time.Hour), es[1].RequeuedAt, "requeued_at")
		require.Equal(t, "d4-r", es[1].RequeuedAs)
	})
}

// runDLQListOrder checks ListDeadLetters' order and its limits.
func runDLQListOrder(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("ListOrderAndLimit", func(t *testing.T) {
		q := newStore(t).DLQ()
		ctx := t.Context()
		base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		// Failure times out of insertion order: the listing follows the IDs, not the times.
		secs := []int{50, 10, 40, 20, 30, 0}
		var want []int64
		for i, sec := range secs {
			put, err := q.PutDeadLetter(ctx, deadLetter(fmt.Sprintf("m%d", i), base.Add(time.Duration(sec)*time.Second)))
			require.NoError(t, err)
			want = append(want, put.ID)
		}
		list := func(f store.DLQFilter) []int64 {
			t.Helper()
			es, err := q.ListDeadLetters(ctx, f)
			require.NoError(t, err)
			return dlqIDs(es)
		}
		require.Equal(t, want, list(store.DLQFilter{}))
		require.Equal(t, want[4:], list(store.DLQFilter{Limit: 2}), "the limit keeps the newest, oldest first")
		require.Equal(t, want[3:], list(store.DLQFilter{Limit: 3}))
		require.Equal(t, want, list(store.DLQFilter{Limit: 100}))
		// The limit applies after the filters.
		require.Equal(t, []int64{want[2], want[4]}, list(store.DLQFilter{Since: base.Add(30 * time.Second), Limit: 2}))
		require.NoError(t, q.MarkRequeued(ctx, want[5], "m5-r", time.Time{}))
		require.Equal(t, []int64{want[3], want[4]}, list(store.DLQFilter{Limit: 2}))
		require.Equal(t, want[4:], list(store.DLQFilter{Limit: 2, IncludeRequeued: true}))
	})

	t.Run("DefaultLimitIs1000", func(t *testing.T) {
		q := newStore(t).DLQ()
		ctx := t.Context()
		base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		var ids []int64
		for i := range 1005 {
			put, err := q.PutDeadLetter(ctx, store.DLQEntry{
				MessageID: fmt.Sprintf("m%04d", i), Class: store.DLQTTLExpired, FailedAt: base.Add(time.Duration(i) * time.Millisecond),
			})
			require.NoError(t, err)
			ids = append(ids, put.ID)
		}
		es, err := q.ListDeadLetters(ctx, store.DLQFilter{})
		require.NoError(t, err)
		require.Equal(t, ids[5:], dlqIDs(es))
	})
}

// runDLQRequeue checks MarkRequeued, once only, also when racing.
func runDLQRequeue(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("MarkRequeued", func(t *testing.T) {
		q := newStore(t).DLQ()
		ctx := t.Context()
		base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		require.ErrorIs(t, q.MarkRequeued(ctx, 12345, "x", base), store.ErrNotFound)

		e1, err := q.PutDeadLetter(ctx, deadLetter("m1", base))
		require.NoError(t, err)
		e2, err := q.PutDeadLetter(ctx, deadLetter("m2", base))
		require.NoError(t, err)
		require.Error(t, q.MarkRequeued(ctx, e1.ID, "", base), "a new message_id is required")
		got, err := q.GetDeadLetter(ctx, e1.ID)
		require.NoError(t, err)
		require.True(t, got.RequeuedAt.IsZero(), "a refused requeue changes nothing")

		at := time.Date(2025, 1, 1, 13, 0, 0, 987654321, time.FixedZone("UTC+1", 60*60))
		require.NoError(t, q.MarkRequeued(ctx, e1.ID, "m1-r", at))
		got, err = q.GetDeadLetter(ctx, e1.ID)
		require.NoError(t, err)
		requireSameTime(t, at.Truncate(time.Microsecond), got.RequeuedAt, "requeued_at")
		require.Equal(t, "m1-r", got.RequeuedAs)
		requireDeadLetter(t, deadLetter("m1", base), got)

		// A second requeue is refused and changes nothing, whatever it names.
		require.ErrorIs(t, q.MarkRequeued(ctx, e1.ID, "m1-r2", at.Add(time.Hour)), store.ErrAlreadyRequeued)
		require.ErrorIs(t, q.MarkRequeued(ctx, e1.ID, "m1-r", at), store.ErrAlreadyRequeued, "even the same one")
		got, err = q.GetDeadLetter(ctx, e1.ID)
		require.NoError(t, err)
		requireSameTime(t, at.Truncate(time.Microsecond), got.RequeuedAt, "requeued_at")
		require.Equal(t, "m1-r", got.RequeuedAs)

		// The other entry is untouched; a zero time means now.
		got, err = q.GetDeadLetter(ctx, e2.ID)
		require.NoError(t, err)
		require.True(t, got.RequeuedAt.IsZero())
		require.Empty(t, got.RequeuedAs)
		require.NoError(t, q.MarkRequeued(ctx, e2.ID, "m2-r", time.Time{}))
		got, err = q.GetDeadLetter(ctx, e2.ID)
		require.NoError(t, err)
		requireRecent(t, got.RequeuedAt)
		require.Equal(t, time.UTC, got.RequeuedAt.Location())
		require.Equal(t, "m2-r", got.RequeuedAs)

		list, err := q.ListDeadLetters(ctx, store.DLQFilter{})
		require.NoError(t, err)
		require.Empty(t, list, "requeued entries leave the default listing")
	})

	t.Run("ConcurrentMarkRequeuedOneWins", func(t *testing.T) {
		q := newStore(t).DLQ()
		ctx := t.Context()
		e, err := q.PutDeadLetter(ctx, deadLetter("m1", time.Now()))
		require.NoError(t, err)
		winner := oneWins(t, 16, store.ErrAlreadyRequeued, func(i int) error {
			return q.MarkRequeued(ctx, e.ID, fmt.Sprintf("m1-r%d", i), time.Now())
		})
		got, err := q.GetDeadLetter(ctx, e.ID)
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("m1-r%d", winner), got.RequeuedAs, "the winner's message_id is stored")
	})
}

// runDLQPurge checks the retention purge.
func runDLQPurge(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("Purge", func(t *testing.T) {
		q := newStore(t).DLQ()
		ctx := t.Context()
		base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		var ids []int64
		for i, sec := range []int{0, 10, 20, 30} {
			put, err := q.PutDeadLetter(ctx, deadLetter(fmt.Sprintf("m%d", i), base.Add(time.Duration(sec)*time.Second)))
			require.NoError(t, err)
			ids = append(ids, put.ID)
		}
		require.NoError(t, q.MarkRequeued(ctx, ids[0], "m0-r", time.Time{}))

		n, err := q.PurgeDeadLetters(ctx, base)
		require.NoError(t, err)
		require.Zero(t, n, "the cutoff is exclusive")
		// Requeued or not, every entry that failed before the cutoff goes.
		n, err = q.PurgeDeadLetters(ctx, base.Add(20*time.Second))
		require.NoError(t, err)
		require.Equal(t, 2, n)
		for _, id := range ids[:2] {
			_, err := q.GetDeadLetter(ctx, id)
			require.ErrorIs(t, err, store.ErrNotFound, "entry %d was purged", id)
		}
		require.ErrorIs(t, q.MarkRequeued(ctx, ids[1], "m1-r", time.Time{}), store.ErrNotFound)
		es, err := q.ListDeadLetters(ctx, store.DLQFilter{IncludeRequeued: true})
		require.NoError(t, err)
		require.Equal(t, ids[2:], dlqIDs(es))
		n, err = q.PurgeDeadLetters(ctx, base.Add(20*time.Second))
		require.NoError(t, err)
		require.Zero(t, n, "nothing left to purge")

		// A purged message_id can be dead-lettered again, as a new entry.
		again, err := q.PutDeadLetter(ctx, deadLetter("m0", base))
		require.NoError(t, err)
		require.Greater(t, again.ID, ids[3], "IDs are not reused")
		require.True(t, again.RequeuedAt.IsZero())

		n, err = q.PurgeDeadLetters(ctx, base.Add(time.Hour))
		require.NoError(t, err)
		require.Equal(t, 3, n)
		es, err = q.ListDeadLetters(ctx, store.DLQFilter{IncludeRequeued: true})
		require.NoError(t, err)
		require.Empty(t, es)
	})
}

// runDLQCopies checks that the queue aliases nothing its caller passed in or got back.
func runDLQCopies(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("Copies", func(t *testing.T) {
		q := newStore(t).DLQ()
		ctx := t.Context()
		base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		in := deadLetter("m1", base)
		want := deadLetter("m1", base)
		put, err := q.PutDeadLetter(ctx, in)
		require.NoError(t, err)

		mutate := func(e *store.DLQEntry) {
			e.Envelope.Payload[0] = 'X'
			e.Envelope.ProducerId = "mallory"
			e.Attempts[0].Reason = "changed"
			e.Attempts = append(e.Attempts[:1], store.DLQAttempt{MessageID: "extra"})
			e.PayloadExcerpt[0] = 'X'
		}
		// The caller's input, then everything handed out, is the caller's to change.
		mutate(&in)
		requireUnchanged := func(what string) {
			t.Helper()
			got, err := q.GetDeadLetter(ctx, put.ID)
			require.NoError(t, err, what)
			requireDeadLetter(t, want, got)
		}
		requireUnchanged("after changing the put's input")
		mutate(&put)
		requireUnchanged("after changing the put's result")
		got, err := q.GetDeadLetter(ctx, put.ID)
		require.NoError(t, err)
		mutate(&got)
		requireUnchanged("after changing a get's result")
		list, err := q.ListDeadLetters(ctx, store.DLQFilter{})
		require.NoError(t, err)
		require.Len(t, list, 1)
		mutate(&list[0])
		requireUnchanged("after changing a list's result")
		dup, err := q.PutDeadLetter(ctx, deadLetter("m1", base))
		require.NoError(t, err)
		mutate(&dup)
		requireUnchanged("after changing a duplicate put's result")
	})
}

// runDLQAttemptHistory checks what a dead letter's attempt history is made of (§21.1): the
// bound on what is stored, the dead letters of one operation and the records of its
// attempts (MessagePlane.OperationAttempts), from which the router assembles it.
func runDLQAttemptHistory(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("AttemptHistoryIsBounded", func(t *testing.T) {
		q := newStore(t).DLQ()
		ctx := t.Context()
		base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		history := func(n int) []store.DLQAttempt {
			out := make([]store.DLQAttempt, n)
			for i := range out {
				out[i] = store.DLQAttempt{MessageID: fmt.Sprintf("a%02d", i), At: base.Add(time.Duration(i) * time.Second),
					State: "TIMED_OUT", ErrorCode: "ACK_TIMEOUT", Reason: fmt.Sprintf("attempt %d", i)}
			}
			return out
		}

		// 30 attempts keep the first 5 and the last 15; the 10 between them are counted,
		// on top of what the caller had dropped already.
		long := deadLetter("m1", base.Add(time.Minute))
		long.Attempts = history(30)
		long.AttemptsDropped = 2
		want := long
		want.Attempts = append(history(30)[:store.DLQAttemptsHead:store.DLQAttemptsHead], history(30)[15:]...)
		want.AttemptsDropped = 12
		require.Len(t, want.Attempts, store.MaxDLQAttempts)
		put, err := q.PutDeadLetter(ctx, long)
		require.NoError(t, err)
		requireDeadLetter(t, want, put)
		got, err := q.GetDeadLetter(ctx, put.ID)
		require.NoError(t, err)
		requireDeadLetter(t, want, got)
		list, err := q.ListDeadLetters(ctx, store.DLQFilter{ProducerID: long.ProducerID})
		require.NoError(t, err)
		require.Len(t, list, 1)
		requireDeadLetter(t, want, list[0])
		require.Len(t, long.Attempts, 30, "the caller's history is untouched")
		require.Equal(t, "a05", long.Attempts[5].MessageID)

		// A history at the bound is kept whole.
		full := deadLetter("m2", base.Add(time.Minute))
		full.Attempts = history(store.MaxDLQAttempts)
		full.AttemptsDropped = 0
		put, err = q.PutDeadLetter(ctx, full)
		require.NoError(t, err)
		got, err = q.GetDeadLetter(ctx, put.ID)
		require.NoError(t, err)
		requireDeadLetter(t, full, got)

		bad := deadLetter("m3", base)
		bad.AttemptsDropped = -1
		_, err = q.PutDeadLetter(ctx, bad)
		require.Error(t, err, "a negative count is refused")
	})

	t.Run("ListByOperation", func(t *testing.T) {
		q := newStore(t).DLQ()
		ctx := t.Context()
		base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		seed := []struct{ id, producer, corr, token string }{
			{"d0", "alice", "c1", "op"},
			{"d1", "alice", "c1", "other"},
			{"d2", "alice", "c2", "op"},
			{"d3", "bob", "c1", "op"},
			{"d4", "alice", "c1", "op"},
		}
		for i, x := range seed {
			e := deadLetter(x.id, base.Add(time.Duration(i)*time.Second))
			e.ProducerID, e.CorrelationID, e.IdempotencyToken = x.producer, x.corr, x.token
			put, err := q.PutDeadLetter(ctx, e)
			require.NoError(t, err)
			if x.id == "d4" {
				require.NoError(t, q.MarkRequeued(ctx, put.ID, "d4-r", time.Time{}))
			}
		}
		list := func(f store.DLQFilter) []string {
			t.Helper()
			es, err := q.ListDeadLetters(ctx, f)
			require.NoError(t, err)
			return dlqMessageIDs(es)
		}
		op := store.DLQFilter{ProducerID: "alice", CorrelationID: "c1", IdempotencyToken: "op", IncludeRequeued: true}
		require.Equal(t, []string{"d0", "d4"}, list(op))
		op.IncludeRequeued = false
		require.Equal(t, []string{"d0"}, list(op))
		require.Equal(t, []string{"d0", "d2", "d3"}, list(store.DLQFilter{IdempotencyToken: "op"}))
		require.Equal(t, []string{"d0", "d1", "d3"}, list(store.DLQFilter{CorrelationID: "c1"}))
		require.Empty(t, list(store.DLQFilter{CorrelationID: "c1", IdempotencyToken: "nothing"}))
	})

	t.Run("OperationAttempts", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		env := func(id, producer, corr, token string) *commonpb.Envelope {
			e := Envelope(id)
			e.ProducerId, e.CorrelationId, e.IdempotencyToken = producer, corr, token
			return e
		}
		admit := func(e *commonpb.Envelope, track bool, dedupKey string) error {
			req := store.AdmitRequest{Envelope: e, RecipientID: "bob", Track: track}
			if dedupKey != "" {
				req.Dedup = &store.Dedup{ProducerID: e.GetProducerId(), Key: dedupKey}
			}
			_, err := mp.Admit(ctx, req)
			return err
		}
		// The operation's attempts, in the order they come (ids sort the same way, so a tie
		// of creation times orders them alike): the first through the idempotency cache, one
		// refused by it while the first is in progress, one around it (a requeue).
		require.NoError(t, admit(env("op-1", "alice", "c1", "tok"), true, "t:tok"))
		_, err := mp.Admit(ctx, store.AdmitRequest{Envelope: env("op-2", "alice", "c1", "tok"), RecipientID: "bob", Track: true,
			Dedup: &store.Dedup{ProducerID: "alice", Key: "t:tok"}})
		_ = requireDedupError(t, err, true)
		advance(t, mp, "op-1", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "no ACK")
		require.NoError(t, admit(env("op-3", "alice", "c1", "tok"), true, ""))
		// Not the operation's: another token, correlation or producer, no token, untracked,
		// and a payload that holds the token's bytes.
		require.NoError(t, admit(env("x-token", "alice", "c1", "tok2"), true, "t:tok2"))
		require.NoError(t, admit(env("x-corr", "alice", "c2", "tok"), true, ""))
		require.NoError(t, admit(env("x-producer", "carol", "c1", "tok"), true, ""))
		require.NoError(t, admit(env("x-none", "alice", "c1", ""), true, ""))
		require.NoError(t, admit(env("x-untracked", "alice", "c1", "tok"), false, ""))
		lookalike := env("x-payload", "alice", "c1", "")
		lookalike.Payload = []byte(`{"token":"tok"}`)
		lookalike.ContentLength = uint64(len(lookalike.Payload))
		require.NoError(t, admit(lookalike, true, ""))

		recs, err := mp.OperationAttempts(ctx, store.Operation{ProducerID: "alice", CorrelationID: "c1", IdempotencyToken: "tok"})
		require.NoError(t, err)
		ids := make([]string, len(recs))
		for i, r := range recs {
			ids[i] = r.MessageID
			require.Equal(t, "tok", r.Envelope.GetIdempotencyToken())
			requireRecent(t, r.CreatedAt)
			require.Equal(t, time.UTC, r.CreatedAt.Location())
			if i > 0 {
				require.False(t, r.CreatedAt.Before(recs[i-1].CreatedAt), "oldest first")
			}
		}
		require.Equal(t, []string{"op-1", "op-2", "op-3"}, ids)
		require.Equal(t, stTimedOut, recs[0].State)
		require.Equal(t, commonpb.ErrorCode_ACK_TIMEOUT, recs[0].ErrorCode)
		require.Equal(t, "no ACK", recs[0].Note)
		require.Equal(t, stRejected, recs[1].State)
		require.Equal(t, commonpb.ErrorCode_ALREADY_IN_PROGRESS, recs[1].ErrorCode)
		require.Equal(t, stSent, recs[2].State)

		for _, op := range []store.Operation{
			{ProducerID: "alice", CorrelationID: "c1"},
			{ProducerID: "alice", IdempotencyToken: "tok"},
			{CorrelationID: "c1", IdempotencyToken: "tok"},
			{ProducerID: "alice", CorrelationID: "c1", IdempotencyToken: "nothing"},
		} {
			recs, err := mp.OperationAttempts(ctx, op)
			require.NoError(t, err)
			require.Empty(t, recs, "%+v has no attempts", op)
		}
	})
}
