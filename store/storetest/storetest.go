// Package storetest is the one conformance suite for store.Store implementations. Every
// implementation's tests call Run; a promise made in a doc comment of package store is tested
// here, so the memory and postgres stores cannot drift apart.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// wakeTimeout bounds how long a test waits for a Subscribe wake-up that must come; generous,
// since a cross-process wake-up travels through PostgreSQL's NOTIFY.
const wakeTimeout = 5 * time.Second

// quiet is how long a test watches a subscription that must stay silent.
const quiet = 300 * time.Millisecond

// Run runs the conformance suite as subtests of t. newStore must return a fresh, empty store
// for each call and arrange (with t.Cleanup) for it to be closed.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("Kind", func(t *testing.T) {
		s := newStore(t)
		require.NotEmpty(t, s.Kind())
	})
	t.Run("Messages", func(t *testing.T) { runMessages(t, newStore) })
	t.Run("Lanes", func(t *testing.T) { runLanes(t, newStore) })
	t.Run("Expire", func(t *testing.T) { runExpire(t, newStore) })
	t.Run("Idempotency", func(t *testing.T) { runIdempotency(t, newStore) })
	t.Run("Resume", func(t *testing.T) { runResume(t, newStore) })
	t.Run("PendingResponses", func(t *testing.T) { runPendingResponses(t, newStore) })
	t.Run("Steps", func(t *testing.T) { runSteps(t, newStore) })
	t.Run("Subscribe", func(t *testing.T) { runSubscribe(t, newStore) })
	t.Run("Copies", func(t *testing.T) { runCopies(t, newStore) })
	t.Run("Registry", func(t *testing.T) { runRegistry(t, newStore) })
	t.Run("Audit", func(t *testing.T) { runAudit(t, newStore) })
	t.Run("Artifacts", func(t *testing.T) { runArtifacts(t, newStore) })
	t.Run("HITL", func(t *testing.T) { runHITL(t, newStore) })
	t.Run("DLQ", func(t *testing.T) { runDLQ(t, newStore) })
	t.Run("AuditBatch", func(t *testing.T) { runAuditBatch(t, newStore) })
	t.Run("Outbox", func(t *testing.T) { runOutbox(t, newStore) })
	t.Run("Keys", func(t *testing.T) { runKeys(t, newStore) })
	t.Run("Handoffs", func(t *testing.T) { runHandoffs(t, newStore) })
	t.Run("Definitions", func(t *testing.T) { runDefinitions(t, newStore) })
	t.Run("NegotiationPolicies", func(t *testing.T) { runNegotiationPolicies(t, newStore) })
	t.Run("Worktrees", func(t *testing.T) { runWorktrees(t, newStore) })
	t.Run("ToolProviders", func(t *testing.T) { runToolProviders(t, newStore) })
	t.Run("ToolCalls", func(t *testing.T) { runToolCalls(t, newStore) })
}

// Envelope returns a fully populated test envelope with the given message_id.
func Envelope(messageID string) *commonpb.Envelope {
	return &commonpb.Envelope{
		MessageId:      messageID,
		ProducerId:     "alice",
		CorrelationId:  "corr-" + messageID,
		SequenceNumber: 7,
		MessageType:    commonpb.MessageType_DATA,
		ContentType:    "application/json",
		ContentLength:  11,
		Payload:        []byte(`{"n":"one"}`),
		State:          commonpb.EnvelopeState_ENVELOPE_STATE_SENT,
	}
}

func admit(t *testing.T, mp store.MessagePlane, messageID, recipient string, capacity int, track bool) int64 {
	t.Helper()
	seq, err := mp.Admit(t.Context(), store.AdmitRequest{
		Envelope: Envelope(messageID), RecipientID: recipient, Capacity: capacity, Track: track,
	})
	require.NoError(t, err, "admit %s to %s", messageID, recipient)
	require.Positive(t, seq)
	return seq
}

func claim(t *testing.T, mp store.MessagePlane, agentID string, limit int, lease time.Duration) []store.Delivery {
	t.Helper()
	ds, err := mp.Claim(t.Context(), store.ClaimRequest{AgentID: agentID, Limit: limit, Lease: lease})
	require.NoError(t, err)
	return ds
}

func depth(t *testing.T, mp store.MessagePlane, agentID string) int {
	t.Helper()
	n, err := mp.Depth(t.Context(), agentID)
	require.NoError(t, err)
	return n
}

func messageIDs(ds []store.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Envelope.GetMessageId()
	}
	return out
}

func seqs(ds []store.Delivery) []int64 {
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.Seq
	}
	return out
}

func requireProtoEqual(t *testing.T, want, got proto.Message) {
	t.Helper()
	require.Truef(t, proto.Equal(want, got), "protos differ:\nwant %v\n got %v", want, got)
}

func requireRecent(t *testing.T, ts time.Time) {
	t.Helper()
	require.False(t, ts.IsZero(), "time is zero")
	require.WithinDuration(t, time.Now(), ts, time.Minute)
}

func requireWake(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wakeTimeout):
		t.Fatalf("no Subscribe wake-up within %v after %s", wakeTimeout, what)
	}
}

func requireNoWake(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("unexpected Subscribe wake-up after %s", what)
	case <-time.After(quiet):
	}
}

// settle lets in-flight wake-ups arrive (a cross-process one may trail the local one) and
// then empties the channel, so the next assertion sees only what follows.
func settle(ch <-chan struct{}) {
	time.Sleep(quiet)
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// ---------------------------------------------------------------------------------------------
// Message plane

func runMessages(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("AdmitClaimConfirmRoundTrip", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		env := Envelope("m1")
		seq, err := mp.Admit(ctx, store.AdmitRequest{Envelope: env, RecipientID: "bob", Capacity: 10, Track: true})
		require.NoError(t, err)
		require.Positive(t, seq)
		require.Equal(t, 1, depth(t, mp, "bob"))

		ds := claim(t, mp, "bob", 10, time.Minute)
		require.Len(t, ds, 1)
		d := ds[0]
		require.Equal(t, seq, d.Seq)
		require.Equal(t, "bob", d.AgentID)
		requireProtoEqual(t, env, d.Envelope)
		require.Equal(t, 1, d.Attempts)
		requireRecent(t, d.EnqueuedAt)
		require.Empty(t, claim(t, mp, "alice", 10, time.Minute), "another agent's buffer")

		got, ok, err := mp.Confirm(ctx, "bob", seq, "m1")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, seq, got.Seq)
		require.Equal(t, "bob", got.AgentID)
		requireProtoEqual(t, env, got.Envelope)
		require.Equal(t, 1, got.Attempts)
		require.True(t, d.EnqueuedAt.Equal(got.EnqueuedAt))

		require.Equal(t, 0, depth(t, mp, "bob"))
		require.NoError(t, mp.ReleaseLeases(ctx, "bob"))
		require.Empty(t, claim(t, mp, "bob", 10, time.Minute), "confirmed rows are never redelivered")
	})

	t.Run("SeqIncreasesAcrossAgents", func(t *testing.T) {
		mp := newStore(t).Messages()
		var last int64
		for i := range 8 {
			recipient := []string{"bob", "carol", "dave"}[i%3]
			seq := admit(t, mp, fmt.Sprintf("m%d", i), recipient, 0, i%2 == 0)
			require.Greater(t, seq, last)
			last = seq
		}
	})

	t.Run("AdmitRejectsInvalidRequests", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		_, err := mp.Admit(ctx, store.AdmitRequest{RecipientID: "bob"})
		require.Error(t, err, "nil envelope")
		_, err = mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope(""), RecipientID: "bob"})
		require.Error(t, err, "empty message_id")
		_, err = mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope("m1")})
		require.Error(t, err, "empty recipient")
		require.Equal(t, 0, depth(t, mp, "bob"))
		// A refused request recorded nothing: the id is still free.
		admit(t, mp, "m1", "bob", 0, true)
	})

	t.Run("CapacityEnforced", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		for i := range 10 {
			admit(t, mp, fmt.Sprintf("m%d", i), "bob", 10, true)
		}
		// Claimed but unconfirmed rows still occupy the buffer.
		require.Len(t, claim(t, mp, "bob", 3, time.Minute), 3)

		_, err := mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope("m10"), RecipientID: "bob", Capacity: 10, Track: true})
		require.ErrorIs(t, err, store.ErrBufferFull)
		require.Equal(t, 10, depth(t, mp, "bob"))
		rec, err := mp.GetMessage(ctx, "m10")
		require.NoError(t, err, "a tracked rejection is recorded (§13: never a silent drop)")
		require.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED, rec.State)
		require.Equal(t, commonpb.ErrorCode_BUFFER_FULL, rec.ErrorCode)
		require.Equal(t, "bob", rec.RecipientID)
		require.Equal(t, "alice", rec.ProducerID)
		requireProtoEqual(t, Envelope("m10"), rec.Envelope)

		_, err = mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope("m11"), RecipientID: "bob", Capacity: 10})
		require.ErrorIs(t, err, store.ErrBufferFull)
		_, err = mp.GetMessage(ctx, "m11")
		require.ErrorIs(t, err, store.ErrNotFound, "an untracked rejection leaves no record")

		require.NoError(t, mp.ReleaseLeases(ctx, "bob"))
		ds := claim(t, mp, "bob", 100, time.Minute)
		require.Len(t, ds, 10)
		require.NotContains(t, messageIDs(ds), "m10", "a rejected message never enters the buffer")
		require.NotContains(t, messageIDs(ds), "m11")

		// The limit is per recipient.
		admit(t, mp, "c1", "carol", 10, true)
		// A larger capacity admits more into the same buffer: the limit is the request's.
		admit(t, mp, "m12", "bob", 11, true)
		require.Equal(t, 11, depth(t, mp, "bob"))
	})

	t.Run("ConfirmFreesSlot", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		first := admit(t, mp, "m0", "bob", 2, true)
		admit(t, mp, "m1", "bob", 2, true)
		_, err := mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope("m2"), RecipientID: "bob", Capacity: 2})
		require.ErrorIs(t, err, store.ErrBufferFull)
		_, ok, err := mp.Confirm(ctx, "bob", first, "m0")
		require.NoError(t, err)
		require.True(t, ok)
		admit(t, mp, "m2", "bob", 2, true)
		require.Equal(t, 2, depth(t, mp, "bob"))
	})

	t.Run("CapacityZeroIsUnlimited", func(t *testing.T) {
		mp := newStore(t).Messages()
		for i := range 25 {
			admit(t, mp, fmt.Sprintf("m%d", i), "bob", 0, i%2 == 0)
		}
		require.Equal(t, 25, depth(t, mp, "bob"))
		// Control traffic (Capacity 0) gets in even when a limited admit would not.
		admit(t, mp, "data", "bob", 1, true)
		_, err := mp.Admit(t.Context(), store.AdmitRequest{Envelope: Envelope("limited"), RecipientID: "bob", Capacity: 1})
		require.ErrorIs(t, err, store.ErrBufferFull)
		admit(t, mp, "control", "bob", 0, false)
		require.Equal(t, 27, depth(t, mp, "bob"))
	})

	t.Run("ControlTrafficOutsideCapacity", func(t *testing.T) {
		// §13: the capacity is about data. Rows admitted without a capacity (the router's
		// ACK forwards, NACKs and notifications; the scheduler's CONTROL messages) neither
		// take a slot nor free one when confirmed, in whatever lane they ride.
		mp := newStore(t).Messages()
		ctx := t.Context()
		const capacity = 3
		var control []int64
		for i := range 5 {
			control = append(control, admitReq(t, mp, store.AdmitRequest{Envelope: Envelope(fmt.Sprintf("c%d", i)), RecipientID: "bob",
				Track: i == 4, Lane: commonpb.CommunicationClass_PRIVILEGED}))
		}
		data := []int64{admitReq(t, mp, store.AdmitRequest{Envelope: Envelope("d0"), RecipientID: "bob", Capacity: capacity, Track: true,
			Lane: commonpb.CommunicationClass_PRIVILEGED})}
		for i := 1; i < capacity; i++ {
			data = append(data, admit(t, mp, fmt.Sprintf("d%d", i), "bob", capacity, i%2 == 0))
		}
		_, err := mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope("over"), RecipientID: "bob", Capacity: capacity, Track: true})
		require.ErrorIs(t, err, store.ErrBufferFull, "the capacity counts the data rows")
		require.Equal(t, capacity+len(control), depth(t, mp, "bob"), "the depth counts every unconfirmed row")

		// A step's follow-up is control traffic too: bob's ACK of a message he sent carol.
		admit(t, mp, "to-carol", "carol", 0, true)
		f := followUp("ack-to-bob")
		f.RecipientID = "bob"
		res, err := mp.AdvanceWith(ctx, store.StepRequest{MessageID: "to-carol", Plan: stepTo(commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, "", f).plan})
		require.NoError(t, err)
		require.True(t, res.Applied)
		control = append(control, res.FollowUpSeq)

		// Control rows keep coming into the full buffer, and confirming them frees no slot.
		admit(t, mp, "c5", "bob", 0, false)
		for _, seq := range control {
			_, ok, err := mp.Confirm(ctx, "bob", seq, "")
			require.NoError(t, err)
			require.True(t, ok)
		}
		_, err = mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope("still-over"), RecipientID: "bob", Capacity: capacity})
		require.ErrorIs(t, err, store.ErrBufferFull)
		// Confirming a data row does.
		_, ok, err := mp.Confirm(ctx, "bob", data[0], "d0")
		require.NoError(t, err)
		require.True(t, ok)
		admit(t, mp, "d3", "bob", capacity, true)
		_, err = mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope("over-again"), RecipientID: "bob", Capacity: capacity})
		require.ErrorIs(t, err, store.ErrBufferFull)
	})

	t.Run("ConcurrentAdmitsNeverExceedCapacity", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		const n, capacity = 50, 10
		var (
			wg               sync.WaitGroup
			mu               sync.Mutex
			ok, full, failed int
			otherErrs        []error
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := mp.Admit(ctx, store.AdmitRequest{
					Envelope: Envelope(fmt.Sprintf("m%d", i)), RecipientID: "bob", Capacity: capacity, Track: true,
				})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok++
				case errors.Is(err, store.ErrBufferFull):
					full++
				default:
					failed++
					otherErrs = append(otherErrs, err)
				}
			}()
		}
		wg.Wait()
		require.Empty(t, otherErrs)
		require.Equal(t, capacity, ok)
		require.Equal(t, n-capacity, full)
		require.Equal(t, 0, failed)
		require.Equal(t, capacity, depth(t, mp, "bob"))
		rejected := 0
		for i := range n {
			rec, err := mp.GetMessage(ctx, fmt.Sprintf("m%d", i))
			require.NoError(t, err)
			if rec.State == commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED {
				require.Equal(t, commonpb.ErrorCode_BUFFER_FULL, rec.ErrorCode)
				rejected++
			}
		}
		require.Equal(t, n-capacity, rejected)
	})

	t.Run("CapacityHoldsWhileConfirming", func(t *testing.T) {
		// Producers admit to a small buffer while its consumer claims and confirms: every
		// confirmation frees exactly one slot, and no snapshot of the buffer ever holds more
		// than the capacity.
		mp := newStore(t).Messages()
		ctx := t.Context()
		const producers, perProducer, capacity = 4, 25, 5
		var (
			wg                  sync.WaitGroup
			mu                  sync.Mutex
			admitted, confirmed int
			maxDepth            int
			errs                []error
		)
		fail := func(err error) {
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, err)
		}
		done := make(chan struct{})
		for p := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perProducer {
					_, err := mp.Admit(ctx, store.AdmitRequest{
						Envelope: Envelope(fmt.Sprintf("p%d-%d", p, i)), RecipientID: "bob", Capacity: capacity, Track: i%2 == 0,
					})
					switch {
					case err == nil:
						mu.Lock()
						admitted++
						mu.Unlock()
					case !errors.Is(err, store.ErrBufferFull):
						fail(err)
					}
				}
			}()
		}
		var side sync.WaitGroup
		side.Add(2)
		go func() { // the consumer
			defer side.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				ds, err := mp.Claim(ctx, store.ClaimRequest{AgentID: "bob", Limit: 2, Lease: time.Hour})
				if err != nil {
					fail(err)
					return
				}
				for _, d := range ds {
					_, ok, err := mp.Confirm(ctx, "bob", d.Seq, d.Envelope.GetMessageId())
					if err != nil || !ok {
						fail(fmt.Errorf("confirm %d: ok=%v err=%v", d.Seq, ok, err))
						return
					}
					mu.Lock()
					confirmed++
					mu.Unlock()
				}
			}
		}()
		go func() { // the observer
			defer side.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				n, err := mp.Depth(ctx, "bob")
				if err != nil {
					fail(err)
					return
				}
				mu.Lock()
				maxDepth = max(maxDepth, n)
				mu.Unlock()
			}
		}()
		wg.Wait()
		// The producers can finish before the consumer is first scheduled (the memory store
		// is that fast): let it confirm something before stopping it.
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return confirmed > 0 || len(errs) > 0
		}, 5*time.Second, time.Millisecond)
		close(done)
		side.Wait()
		require.Empty(t, errs)
		require.LessOrEqual(t, maxDepth, capacity)
		require.Positive(t, confirmed)
		require.Equal(t, admitted-confirmed, depth(t, mp, "bob"))
		require.LessOrEqual(t, admitted-confirmed, capacity)
	})

	t.Run("DuplicateMessageID", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		admit(t, mp, "m1", "bob", 10, true)
		_, err := mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope("m1"), RecipientID: "bob", Capacity: 10, Track: true})
		require.ErrorIs(t, err, store.ErrDuplicateMessage)
		_, err = mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope("m1"), RecipientID: "carol"})
		require.ErrorIs(t, err, store.ErrDuplicateMessage, "duplicates are global, not per recipient")
		require.Equal(t, 1, depth(t, mp, "bob"))
		require.Equal(t, 0, depth(t, mp, "carol"))
		rec, err := mp.GetMessage(ctx, "m1")
		require.NoError(t, err)
		require.Equal(t, "bob", rec.RecipientID)
		require.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_SENT, rec.State)

		// Untracked messages are remembered for duplicate detection too.
		admit(t, mp, "u1", "bob", 0, false)
		_, err = mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope("u1"), RecipientID: "bob", Track: true})
		require.ErrorIs(t, err, store.ErrDuplicateMessage)
		_, err = mp.GetMessage(ctx, "u1")
		require.ErrorIs(t, err, store.ErrNotFound, "the duplicate did not create a record")
		require.Equal(t, 2, depth(t, mp, "bob"))

		// A duplicate into a full buffer is a duplicate, and changes nothing: m1 is not
		// turned into a BUFFER_FULL rejection.
		admit(t, mp, "d1", "dave", 1, true)
		_, err = mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope("m1"), RecipientID: "dave", Capacity: 1, Track: true})
		require.ErrorIs(t, err, store.ErrDuplicateMessage)
		_, err = mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope("u1"), RecipientID: "dave", Capacity: 1})
		require.ErrorIs(t, err, store.ErrDuplicateMessage)
		rec, err = mp.GetMessage(ctx, "m1")
		require.NoError(t, err)
		require.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_SENT, rec.State)
		require.Equal(t, commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED, rec.ErrorCode)
		require.Equal(t, "bob", rec.RecipientID)

		// A tracked rejection is a recorded message_id as well.
		_, err = mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope("r1"), RecipientID: "dave", Capacity: 1, Track: true})
		require.ErrorIs(t, err, store.ErrBufferFull)
		_, err = mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope("r1"), RecipientID: "carol", Track: true})
		require.ErrorIs(t, err, store.ErrDuplicateMessage)
		require.Equal(t, 0, depth(t, mp, "carol"))
	})

	t.Run("ConcurrentDuplicatesAdmitOnce", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		const n = 20
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			ok, dup   int
			otherErrs []error
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := mp.Admit(ctx, store.AdmitRequest{
					Envelope: Envelope("same"), RecipientID: fmt.Sprintf("agent%d", i%4), Capacity: 5, Track: i%2 == 0,
				})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok++
				case errors.Is(err, store.ErrDuplicateMessage):
					dup++
				default:
					otherErrs = append(otherErrs, err)
				}
			}()
		}
		wg.Wait()
		require.Empty(t, otherErrs)
		require.Equal(t, 1, ok)
		require.Equal(t, n-1, dup)
		total := 0
		for i := range 4 {
			total += depth(t, mp, fmt.Sprintf("agent%d", i))
		}
		require.Equal(t, 1, total)
	})

	t.Run("ConfirmRefusals", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		bobSeq := admit(t, mp, "m1", "bob", 0, true)
		carolSeq := admit(t, mp, "m2", "carol", 0, true)

		confirm := func(agentID string, seq int64, messageID string) bool {
			t.Helper()
			_, ok, err := mp.Confirm(ctx, agentID, seq, messageID)
			require.NoError(t, err)
			return ok
		}
		require.False(t, confirm("bob", carolSeq+1000, ""), "unknown seq")
		require.False(t, confirm("bob", carolSeq, ""), "another agent's seq")
		require.False(t, confirm("bob", carolSeq, "m2"), "another agent's seq, right message_id")
		require.Equal(t, 1, depth(t, mp, "carol"))
		require.False(t, confirm("bob", bobSeq, "m2"), "mismatched message_id")
		require.Equal(t, 1, depth(t, mp, "bob"))

		require.True(t, confirm("bob", bobSeq, ""), "an empty message_id matches any")
		require.False(t, confirm("bob", bobSeq, ""), "already confirmed")
		require.False(t, confirm("bob", bobSeq, "m1"), "already confirmed")
		require.Equal(t, 0, depth(t, mp, "bob"))
		require.True(t, confirm("carol", carolSeq, "m2"))
	})

	t.Run("ConfirmBatch", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		b1 := admit(t, mp, "m1", "bob", 0, true)
		b2 := admit(t, mp, "m2", "bob", 0, true)
		b3 := admit(t, mp, "m3", "bob", 0, true)
		c1 := admit(t, mp, "m4", "carol", 0, true)
		_, ok, err := mp.Confirm(ctx, "bob", b3, "")
		require.NoError(t, err)
		require.True(t, ok)

		n, err := mp.ConfirmBatch(ctx, []store.DeliveryRef{
			{AgentID: "bob", Seq: b1},                    // confirmed
			{AgentID: "bob", Seq: b2, MessageID: "m1"},   // mismatched message_id: skipped
			{AgentID: "bob", Seq: b3},                    // already confirmed: skipped
			{AgentID: "bob", Seq: c1, MessageID: "m4"},   // another agent's seq: skipped
			{AgentID: "bob", Seq: c1 + 1000},             // unknown seq: skipped
			{AgentID: "carol", Seq: c1, MessageID: "m4"}, // confirmed
		})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.Equal(t, 1, depth(t, mp, "bob"), "only m2 is left in bob's buffer")
		require.Equal(t, 0, depth(t, mp, "carol"))
		require.Equal(t, []string{"m2"}, messageIDs(claim(t, mp, "bob", 10, time.Hour)), "confirmed rows are not delivered again")
		_, ok, err = mp.Confirm(ctx, "bob", b1, "")
		require.NoError(t, err)
		require.False(t, ok, "a batch-confirmed row is confirmed")

		n, err = mp.ConfirmBatch(ctx, []store.DeliveryRef{{AgentID: "bob", Seq: b1}, {AgentID: "bob", Seq: b2}, {AgentID: "bob", Seq: b2}})
		require.NoError(t, err)
		require.Equal(t, 1, n, "a row listed twice is confirmed once")
		n, err = mp.ConfirmBatch(ctx, nil)
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("LeaseBlocksReclaimUntilExpiry", func(t *testing.T) {
		mp := newStore(t).Messages()
		admit(t, mp, "m1", "bob", 0, true)
		admit(t, mp, "m2", "bob", 0, true)
		const lease = 500 * time.Millisecond
		start := time.Now()
		ds := claim(t, mp, "bob", 10, lease)
		require.Equal(t, []string{"m1", "m2"}, messageIDs(ds))
		require.Equal(t, []int{1, 1}, []int{ds[0].Attempts, ds[1].Attempts})

		// Still leased: the leased rows are skipped, a newly admitted one is handed out.
		admit(t, mp, "m3", "bob", 0, true)
		ds = claim(t, mp, "bob", 10, time.Hour)
		require.Less(t, time.Since(start), lease, "the machine is too slow for this test's lease")
		require.Equal(t, []string{"m3"}, messageIDs(ds), "leased rows are not re-claimed before expiry")

		time.Sleep(time.Until(start.Add(lease + 200*time.Millisecond)))
		ds = claim(t, mp, "bob", 10, time.Hour)
		require.Equal(t, []string{"m1", "m2"}, messageIDs(ds), "expired leases make rows deliverable again")
		require.Equal(t, []int{2, 2}, []int{ds[0].Attempts, ds[1].Attempts})
		require.Empty(t, claim(t, mp, "bob", 10, time.Hour))
		require.Equal(t, 3, depth(t, mp, "bob"))
	})

	t.Run("ReleaseLeases", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		for i := range 3 {
			admit(t, mp, fmt.Sprintf("m%d", i), "bob", 0, true)
		}
		admit(t, mp, "c0", "carol", 0, true)
		require.Len(t, claim(t, mp, "bob", 2, time.Hour), 2)
		require.Len(t, claim(t, mp, "carol", 10, time.Hour), 1)
		ds := claim(t, mp, "bob", 10, time.Hour)
		require.Equal(t, []string{"m2"}, messageIDs(ds))

		require.NoError(t, mp.ReleaseLeases(ctx, "bob"))
		ds = claim(t, mp, "bob", 10, time.Hour)
		require.Equal(t, []string{"m0", "m1", "m2"}, messageIDs(ds), "released rows are deliverable at once, in seq order")
		require.Equal(t, []int{2, 2, 2}, []int{ds[0].Attempts, ds[1].Attempts, ds[2].Attempts})
		require.Empty(t, claim(t, mp, "carol", 10, time.Hour), "another agent's leases are untouched")
		require.NoError(t, mp.ReleaseLeases(ctx, "nobody"), "releasing an empty buffer is fine")
	})

	t.Run("ClaimOrderAndLimit", func(t *testing.T) {
		mp := newStore(t).Messages()
		var bobSeqs []int64
		for i := range 5 {
			bobSeqs = append(bobSeqs, admit(t, mp, fmt.Sprintf("b%d", i), "bob", 0, true))
			admit(t, mp, fmt.Sprintf("c%d", i), "carol", 0, false)
		}
		ds := claim(t, mp, "bob", 2, time.Hour)
		require.Equal(t, bobSeqs[:2], seqs(ds))
		require.Equal(t, []string{"b0", "b1"}, messageIDs(ds))
		ds = claim(t, mp, "bob", 10, time.Hour)
		require.Equal(t, bobSeqs[2:], seqs(ds))
		require.Empty(t, claim(t, mp, "bob", 10, time.Hour))
		ds = claim(t, mp, "carol", 10, time.Hour)
		require.Equal(t, []string{"c0", "c1", "c2", "c3", "c4"}, messageIDs(ds))
		for _, d := range ds {
			require.Equal(t, "carol", d.AgentID)
		}
	})

	t.Run("ConcurrentClaimsHandOutEachRowOnce", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		const n = 40
		for i := range n {
			admit(t, mp, fmt.Sprintf("m%d", i), "bob", 0, false)
		}
		drainOnce(t, 8, n, func() ([]int64, error) {
			ds, err := mp.Claim(ctx, store.ClaimRequest{AgentID: "bob", Limit: 3, Lease: time.Hour})
			seqs := make([]int64, len(ds))
			for i, d := range ds {
				seqs[i] = d.Seq
			}
			return seqs, err
		})
	})

	t.Run("Depth", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		require.Equal(t, 0, depth(t, mp, "bob"))
		var first int64
		for i := range 3 {
			seq := admit(t, mp, fmt.Sprintf("m%d", i), "bob", 0, true)
			if i == 0 {
				first = seq
			}
		}
		admit(t, mp, "c", "carol", 0, true)
		require.Equal(t, 3, depth(t, mp, "bob"))
		require.Len(t, claim(t, mp, "bob", 10, time.Hour), 3)
		require.Equal(t, 3, depth(t, mp, "bob"), "leased rows are still unconfirmed")
		_, ok, err := mp.Confirm(ctx, "bob", first, "")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, 2, depth(t, mp, "bob"))
		require.Equal(t, 1, depth(t, mp, "carol"))
	})

	t.Run("GetMessage", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		env := Envelope("m1")
		env.MessageType = commonpb.MessageType_NEGOTIATION
		_, err := mp.Admit(ctx, store.AdmitRequest{Envelope: env, RecipientID: "bob", Track: true})
		require.NoError(t, err)
		rec, err := mp.GetMessage(ctx, "m1")
		require.NoError(t, err)
		require.Equal(t, "m1", rec.MessageID)
		require.Equal(t, "alice", rec.ProducerID)
		require.Equal(t, "bob", rec.RecipientID)
		require.Equal(t, "corr-m1", rec.CorrelationID)
		require.Equal(t, commonpb.MessageType_NEGOTIATION, rec.MessageType)
		require.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_SENT, rec.State)
		require.Equal(t, commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED, rec.ErrorCode)
		requireProtoEqual(t, env, rec.Envelope)
		requireRecent(t, rec.CreatedAt)
		require.False(t, rec.UpdatedAt.Before(rec.CreatedAt))

		admit(t, mp, "untracked", "bob", 0, false)
		_, err = mp.GetMessage(ctx, "untracked")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = mp.GetMessage(ctx, "unknown")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("Advance", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		admit(t, mp, "m1", "bob", 0, true)
		admit(t, mp, "untracked", "bob", 0, false)
		before, err := mp.GetMessage(ctx, "m1")
		require.NoError(t, err)

		type edge struct{ from, to commonpb.EnvelopeState }
		var calls []edge
		allowed := map[edge]bool{
			{commonpb.EnvelopeState_ENVELOPE_STATE_SENT, commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED}:   true,
			{commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, commonpb.EnvelopeState_ENVELOPE_STATE_READ}:   true,
			{commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, commonpb.EnvelopeState_ENVELOPE_STATE_FAILED}: true,
		}
		legal := func(from, to commonpb.EnvelopeState) bool {
			calls = append(calls, edge{from, to})
			return allowed[edge{from, to}]
		}

		rec, applied, err := mp.Advance(ctx, store.Transition{
			MessageID: "m1", To: commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, Note: "received by bob",
		}, legal)
		require.NoError(t, err)
		require.True(t, applied)
		require.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, rec.State)
		require.Equal(t, "received by bob", rec.Note)
		require.Equal(t, []edge{{commonpb.EnvelopeState_ENVELOPE_STATE_SENT, commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED}}, calls)
		require.False(t, rec.UpdatedAt.Before(before.UpdatedAt))
		require.True(t, rec.CreatedAt.Equal(before.CreatedAt))
		got, err := mp.GetMessage(ctx, "m1")
		require.NoError(t, err)
		require.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, got.State)
		require.Equal(t, "received by bob", got.Note)

		// Illegal: unchanged, false, no error.
		rec, applied, err = mp.Advance(ctx, store.Transition{
			MessageID: "m1", To: commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED, Note: "skipping READ",
		}, legal)
		require.NoError(t, err)
		require.False(t, applied)
		require.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, rec.State)
		require.Equal(t, "received by bob", rec.Note)
		got, err = mp.GetMessage(ctx, "m1")
		require.NoError(t, err)
		require.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, got.State)
		require.Equal(t, "received by bob", got.Note)

		// No-op: same state is not applied even when legal() would say yes.
		rec, applied, err = mp.Advance(ctx, store.Transition{
			MessageID: "m1", To: commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, Note: "again",
		}, func(_, _ commonpb.EnvelopeState) bool { return true })
		require.NoError(t, err)
		require.False(t, applied)
		require.Equal(t, "received by bob", rec.Note)

		// Error states carry an error code.
		rec, applied, err = mp.Advance(ctx, store.Transition{
			MessageID: "m1", To: commonpb.EnvelopeState_ENVELOPE_STATE_FAILED,
			ErrorCode: commonpb.ErrorCode_AGENT_UNAVAILABLE, Note: "agent gone",
		}, legal)
		require.NoError(t, err)
		require.True(t, applied)
		require.Equal(t, commonpb.EnvelopeState_ENVELOPE_STATE_FAILED, rec.State)
		require.Equal(t, commonpb.ErrorCode_AGENT_UNAVAILABLE, rec.ErrorCode)
		got, err = mp.GetMessage(ctx, "m1")
		require.NoError(t, err)
		require.Equal(t, commonpb.ErrorCode_AGENT_UNAVAILABLE, got.ErrorCode)
		require.Equal(t, "agent gone", got.Note)

		always := func(_, _ commonpb.EnvelopeState) bool { return true }
		_, _, err = mp.Advance(ctx, store.Transition{MessageID: "unknown", To: commonpb.EnvelopeState_ENVELOPE_STATE_READ}, always)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, _, err = mp.Advance(ctx, store.Transition{MessageID: "untracked", To: commonpb.EnvelopeState_ENVELOPE_STATE_READ}, always)
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("ConcurrentAdvanceIsAtomic", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		admit(t, mp, "m1", "bob", 0, true)
		// Only SENT -> RECEIVED is legal, so of many racing Advances exactly one may apply:
		// a store that checked and wrote without holding the record's lock would apply several.
		legal := func(from, to commonpb.EnvelopeState) bool {
			return from == commonpb.EnvelopeState_ENVELOPE_STATE_SENT && to == commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED
		}
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			applied int
			errs    []error
		)
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, ok, err := mp.Advance(ctx, store.Transition{
					MessageID: "m1", To: commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, Note: fmt.Sprint(i),
				}, legal)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				}
				if ok {
					applied++
				}
			}()
		}
		wg.Wait()
		require.Empty(t, errs)
		require.Equal(t, 1, applied)
	})
}

// ---------------------------------------------------------------------------------------------
// Subscribe

func runSubscribe(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("WakesOnAdmit", func(t *testing.T) {
		mp := newStore(t).Messages()
		ch, cancel := mp.Subscribe(t.Context(), "bob")
		defer cancel()
		other, cancelOther := mp.Subscribe(t.Context(), "bob")
		defer cancelOther()
		admit(t, mp, "m1", "bob", 0, false)
		requireWake(t, ch, "Admit")
		requireWake(t, other, "Admit (second subscriber)")
		// The wake-up means a Claim now finds the row.
		require.Len(t, claim(t, mp, "bob", 10, time.Hour), 1)
	})

	t.Run("WakesOnReleaseLeases", func(t *testing.T) {
		mp := newStore(t).Messages()
		ch, cancel := mp.Subscribe(t.Context(), "bob")
		defer cancel()
		admit(t, mp, "m1", "bob", 0, true)
		requireWake(t, ch, "Admit")
		require.Len(t, claim(t, mp, "bob", 10, time.Hour), 1)
		settle(ch)
		require.NoError(t, mp.ReleaseLeases(t.Context(), "bob"))
		requireWake(t, ch, "ReleaseLeases")
		require.Len(t, claim(t, mp, "bob", 10, time.Hour), 1)
	})

	t.Run("CancelStops", func(t *testing.T) {
		mp := newStore(t).Messages()
		ch, cancel := mp.Subscribe(t.Context(), "bob")
		admit(t, mp, "m1", "bob", 0, false)
		requireWake(t, ch, "Admit")
		settle(ch)
		cancel()
		cancel() // idempotent
		admit(t, mp, "m2", "bob", 0, false)
		requireNoWake(t, ch, "Admit after cancel")
	})

	t.Run("NeverBlocksTheSender", func(t *testing.T) {
		mp := newStore(t).Messages()
		ch, cancel := mp.Subscribe(t.Context(), "bob")
		defer cancel()
		// Nobody reads ch while 20 admissions happen: a blocking send would hang here.
		ctx, stop := context.WithTimeout(t.Context(), 30*time.Second)
		defer stop()
		for i := range 20 {
			_, err := mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope(fmt.Sprintf("m%d", i)), RecipientID: "bob"})
			require.NoError(t, err)
		}
		requireWake(t, ch, "20 admits")
		require.Len(t, claim(t, mp, "bob", 100, time.Hour), 20)
	})
}

// ---------------------------------------------------------------------------------------------
// Copies

func runCopies(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("Envelopes", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		env := Envelope("m1")
		seq, err := mp.Admit(ctx, store.AdmitRequest{Envelope: env, RecipientID: "bob", Track: true})
		require.NoError(t, err)
		// The caller's envelope is not aliased.
		env.Payload[0] = 'X'
		env.ProducerId = "mallory"

		ds := claim(t, mp, "bob", 1, time.Hour)
		require.Len(t, ds, 1)
		requireProtoEqual(t, Envelope("m1"), ds[0].Envelope)
		ds[0].Envelope.Payload[0] = 'Y'
		ds[0].Envelope.CorrelationId = "changed"

		rec, err := mp.GetMessage(ctx, "m1")
		require.NoError(t, err)
		requireProtoEqual(t, Envelope("m1"), rec.Envelope)
		rec.Envelope.Payload[0] = 'Z'
		rec.Envelope.MessageId = "changed"

		again, err := mp.GetMessage(ctx, "m1")
		require.NoError(t, err)
		requireProtoEqual(t, Envelope("m1"), again.Envelope)
		require.NoError(t, mp.ReleaseLeases(ctx, "bob"))
		ds = claim(t, mp, "bob", 1, time.Hour)
		require.Len(t, ds, 1)
		requireProtoEqual(t, Envelope("m1"), ds[0].Envelope)
		d, ok, err := mp.Confirm(ctx, "bob", seq, "m1")
		require.NoError(t, err)
		require.True(t, ok)
		requireProtoEqual(t, Envelope("m1"), d.Envelope)
	})

	t.Run("RegistryRecords", func(t *testing.T) {
		reg := newStore(t).Registry()
		ctx := t.Context()
		desc := descriptor("a1")
		health := map[string]string{"cpu": "ok"}
		require.NoError(t, reg.PutAgent(ctx, store.AgentRecord{Descriptor: desc, Health: health}))
		desc.Name = "changed"
		desc.Capabilities[0] = "changed"
		health["cpu"] = "changed"

		got, err := reg.GetAgent(ctx, "a1")
		require.NoError(t, err)
		requireProtoEqual(t, descriptor("a1"), got.Descriptor)
		require.Equal(t, map[string]string{"cpu": "ok"}, got.Health)
		got.Descriptor.Name = "changed"
		got.Health["cpu"] = "changed"

		list, err := reg.ListAgents(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		requireProtoEqual(t, descriptor("a1"), list[0].Descriptor)
		require.Equal(t, map[string]string{"cpu": "ok"}, list[0].Health)

		hb := map[string]string{"load": "low"}
		require.NoError(t, reg.RecordHeartbeat(ctx, "a1", hb, time.Now()))
		hb["load"] = "changed"
		got, err = reg.GetAgent(ctx, "a1")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"load": "low"}, got.Health)
	})

	t.Run("AuditAndArtifacts", func(t *testing.T) {
		s := newStore(t)
		ctx := t.Context()
		details := []byte(`{"k":"v"}`)
		e, err := s.Audit().Append(ctx, store.Event{Type: "x", Details: details})
		require.NoError(t, err)
		details[2] = 'X'
		e.Details[2] = 'Y'
		events, err := s.Audit().List(ctx, store.AuditFilter{})
		require.NoError(t, err)
		require.Len(t, events, 1)
		require.JSONEq(t, `{"k":"v"}`, string(events[0].Details))

		content := []byte("proposal body")
		require.NoError(t, s.Artifacts().AppendArtifact(ctx, store.Artifact{NegotiationID: "n1", Kind: "proposal", Version: "1", Content: content}))
		content[0] = 'X'
		arts, err := s.Artifacts().ListArtifacts(ctx, "n1", "")
		require.NoError(t, err)
		require.Len(t, arts, 1)
		require.Equal(t, "proposal body", string(arts[0].Content))
		arts[0].Content[0] = 'Y'
		arts, err = s.Artifacts().ListArtifacts(ctx, "n1", "")
		require.NoError(t, err)
		require.Equal(t, "proposal body", string(arts[0].Content))
	})

	t.Run("HITLRecords", func(t *testing.T) {
		h := newStore(t).HITL()
		ctx := t.Context()
		rec := hitlRecord("i1", "SECURITY_APPROVAL", time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
		require.NoError(t, h.PutInvocation(ctx, rec))
		// The caller's slice is not aliased.
		rec.Invocation[2] = 'X'

		got, err := h.GetInvocation(ctx, "i1")
		require.NoError(t, err)
		require.Equal(t, `{"invocation_id":"i1"}`, string(got.Invocation))
		got.Invocation[2] = 'Y'
		list, err := h.ListInvocations(ctx, store.HITLFilter{})
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, `{"invocation_id":"i1"}`, string(list[0].Invocation))
		list[0].Invocation[2] = 'Z'

		outcome := []byte(`{"decision":"approve"}`)
		require.NoError(t, h.CompleteInvocation(ctx, "i1", outcome, time.Now()))
		outcome[2] = 'X'
		got, err = h.GetInvocation(ctx, "i1")
		require.NoError(t, err)
		require.Equal(t, `{"invocation_id":"i1"}`, string(got.Invocation))
		require.Equal(t, `{"decision":"approve"}`, string(got.Outcome))
		got.Outcome[2] = 'Y'
		list, err = h.ListInvocations(ctx, store.HITLFilter{})
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, `{"decision":"approve"}`, string(list[0].Outcome))
		list[0].Outcome[2] = 'Z'
		got, err = h.GetInvocation(ctx, "i1")
		require.NoError(t, err)
		require.Equal(t, `{"invocation_id":"i1"}`, string(got.Invocation))
		require.Equal(t, `{"decision":"approve"}`, string(got.Outcome))
		// The stored outcome was copied too: the original bytes still complete idempotently.
		require.NoError(t, h.CompleteInvocation(ctx, "i1", []byte(`{"decision":"approve"}`), time.Now()))
	})
}

// ---------------------------------------------------------------------------------------------
// Registry

func descriptor(agentID string) *registrypb.AgentDescriptor {
	return &registrypb.AgentDescriptor{
		AgentId:             agentID,
		Name:                "Agent " + agentID,
		Description:         "a test agent",
		Capabilities:        []string{"plan", "code"},
		CommunicationClass:  commonpb.CommunicationClass_STANDARD,
		ModalitiesSupported: []string{"application/json"},
		PublicKey:           []byte{1, 2, 3},
	}
}

func runRegistry(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("PutGetReplace", func(t *testing.T) {
		reg := newStore(t).Registry()
		ctx := t.Context()
		registered := time.Date(2025, 3, 4, 5, 6, 7, 123456000, time.UTC)
		beat := registered.Add(time.Minute)
		require.NoError(t, reg.PutAgent(ctx, store.AgentRecord{
			Descriptor:    descriptor("a1"),
			State:         commonpb.AgentState_RUNNABLE,
			Health:        map[string]string{"cpu": "ok", "mem": "high"},
			RegisteredAt:  registered,
			LastHeartbeat: beat,
		}))
		got, err := reg.GetAgent(ctx, "a1")
		require.NoError(t, err)
		requireProtoEqual(t, descriptor("a1"), got.Descriptor)
		require.Equal(t, commonpb.AgentState_RUNNABLE, got.State)
		require.Equal(t, map[string]string{"cpu": "ok", "mem": "high"}, got.Health)
		require.True(t, registered.Equal(got.RegisteredAt), "registered_at %v, want %v", got.RegisteredAt, registered)
		require.True(t, beat.Equal(got.LastHeartbeat), "last_heartbeat %v, want %v", got.LastHeartbeat, beat)

		// Re-registration replaces the record; a zero RegisteredAt means "now".
		desc := descriptor("a1")
		desc.Name = "renamed"
		require.NoError(t, reg.PutAgent(ctx, store.AgentRecord{Descriptor: desc, State: commonpb.AgentState_INITIALIZING}))
		got, err = reg.GetAgent(ctx, "a1")
		require.NoError(t, err)
		requireProtoEqual(t, desc, got.Descriptor)
		require.Equal(t, commonpb.AgentState_INITIALIZING, got.State)
		require.Empty(t, got.Health)
		requireRecent(t, got.RegisteredAt)
		require.True(t, got.LastHeartbeat.IsZero(), "never sent a heartbeat")

		_, err = reg.GetAgent(ctx, "unknown")
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Error(t, reg.PutAgent(ctx, store.AgentRecord{}), "a descriptor is required")
		require.Error(t, reg.PutAgent(ctx, store.AgentRecord{Descriptor: &registrypb.AgentDescriptor{}}), "an agent_id is required")
	})

	t.Run("ListOrderedByAgentID", func(t *testing.T) {
		reg := newStore(t).Registry()
		ctx := t.Context()
		list, err := reg.ListAgents(ctx)
		require.NoError(t, err)
		require.Empty(t, list)
		// Byte order: upper case sorts before lower case, "a-2" before "a1".
		for _, id := range []string{"c", "a1", "B", "a-2", "b"} {
			require.NoError(t, reg.PutAgent(ctx, store.AgentRecord{Descriptor: descriptor(id)}))
		}
		list, err = reg.ListAgents(ctx)
		require.NoError(t, err)
		var ids []string
		for _, rec := range list {
			ids = append(ids, rec.Descriptor.GetAgentId())
		}
		require.Equal(t, []string{"B", "a-2", "a1", "b", "c"}, ids)
	})

	t.Run("Delete", func(t *testing.T) {
		reg := newStore(t).Registry()
		ctx := t.Context()
		require.NoError(t, reg.PutAgent(ctx, store.AgentRecord{Descriptor: descriptor("a1")}))
		require.NoError(t, reg.PutAgent(ctx, store.AgentRecord{Descriptor: descriptor("a2")}))
		removed, err := reg.DeleteAgent(ctx, "a1")
		require.NoError(t, err)
		require.True(t, removed)
		removed, err = reg.DeleteAgent(ctx, "a1")
		require.NoError(t, err)
		require.False(t, removed)
		_, err = reg.GetAgent(ctx, "a1")
		require.ErrorIs(t, err, store.ErrNotFound)
		list, err := reg.ListAgents(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, "a2", list[0].Descriptor.GetAgentId())
	})

	t.Run("RecordHeartbeat", func(t *testing.T) {
		reg := newStore(t).Registry()
		ctx := t.Context()
		require.NoError(t, reg.PutAgent(ctx, store.AgentRecord{
			Descriptor: descriptor("a1"), State: commonpb.AgentState_RUNNING, Health: map[string]string{"old": "1"},
		}))
		at := time.Date(2025, 6, 7, 8, 9, 10, 500000000, time.UTC)
		require.NoError(t, reg.RecordHeartbeat(ctx, "a1", map[string]string{"load": "0.5"}, at))
		got, err := reg.GetAgent(ctx, "a1")
		require.NoError(t, err)
		require.True(t, at.Equal(got.LastHeartbeat), "last_heartbeat %v, want %v", got.LastHeartbeat, at)
		require.Equal(t, map[string]string{"load": "0.5"}, got.Health)
		require.Equal(t, commonpb.AgentState_RUNNING, got.State, "a heartbeat does not change the state")
		requireProtoEqual(t, descriptor("a1"), got.Descriptor)

		err = reg.RecordHeartbeat(ctx, "unknown", nil, at)
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("SetAgentState", func(t *testing.T) {
		reg := newStore(t).Registry()
		ctx := t.Context()
		require.NoError(t, reg.PutAgent(ctx, store.AgentRecord{Descriptor: descriptor("a1"), State: commonpb.AgentState_RUNNABLE}))
		require.NoError(t, reg.SetAgentState(ctx, "a1", commonpb.AgentState_SUSPENDED))
		got, err := reg.GetAgent(ctx, "a1")
		require.NoError(t, err)
		require.Equal(t, commonpb.AgentState_SUSPENDED, got.State)
		requireProtoEqual(t, descriptor("a1"), got.Descriptor)
		require.ErrorIs(t, reg.SetAgentState(ctx, "unknown", commonpb.AgentState_RUNNING), store.ErrNotFound)
	})
}

// ---------------------------------------------------------------------------------------------
// Audit

func eventIDs(events []store.Event) []int64 {
	out := make([]int64, len(events))
	for i, e := range events {
		out[i] = e.ID
	}
	return out
}

func runAudit(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("AppendAssignsIDAndTime", func(t *testing.T) {
		log := newStore(t).Audit()
		ctx := t.Context()
		e1, err := log.Append(ctx, store.Event{
			CorrelationID: "c1", Actor: "bob", Type: "message.admitted", AgentID: "bob", MessageID: "m1",
			Details: []byte(`{"capacity":10}`),
		})
		require.NoError(t, err)
		require.Positive(t, e1.ID)
		requireRecent(t, e1.Time)
		require.Equal(t, time.UTC, e1.Time.Location())
		require.Equal(t, "c1", e1.CorrelationID)
		require.Equal(t, "bob", e1.Actor)
		require.JSONEq(t, `{"capacity":10}`, string(e1.Details))

		at := time.Date(2024, 1, 2, 3, 4, 5, 6000, time.UTC)
		e2, err := log.Append(ctx, store.Event{Type: "agent.state", Time: at})
		require.NoError(t, err)
		require.Greater(t, e2.ID, e1.ID)
		require.True(t, at.Equal(e2.Time), "a set Time is kept")

		e3, err := log.Append(ctx, store.Event{Type: "agent.state"})
		require.NoError(t, err)
		require.Greater(t, e3.ID, e2.ID)

		events, err := log.List(ctx, store.AuditFilter{})
		require.NoError(t, err)
		require.Equal(t, []int64{e1.ID, e2.ID, e3.ID}, eventIDs(events))
		got := events[0]
		require.Equal(t, e1.ID, got.ID)
		require.True(t, e1.Time.Equal(got.Time))
		require.Equal(t, "c1", got.CorrelationID)
		require.Equal(t, "bob", got.Actor)
		require.Equal(t, "message.admitted", got.Type)
		require.Equal(t, "bob", got.AgentID)
		require.Equal(t, "m1", got.MessageID)
		require.JSONEq(t, `{"capacity":10}`, string(got.Details))
		require.True(t, at.Equal(events[1].Time))
		require.Empty(t, events[1].Details)
	})

	t.Run("ListFilters", func(t *testing.T) {
		log := newStore(t).Audit()
		ctx := t.Context()
		base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		seed := []store.Event{
			{CorrelationID: "c1", AgentID: "a", MessageID: "m1", Type: "message.admitted"},
			{CorrelationID: "c1", AgentID: "b", MessageID: "m2", Type: "message.acked"},
			{CorrelationID: "c2", AgentID: "a", MessageID: "m3", Type: "agent.state"},
			{CorrelationID: "c2", AgentID: "b", MessageID: "m1", Type: "message.admitted"},
			{CorrelationID: "c1", AgentID: "a", Type: "message_x"},
			{CorrelationID: "c3", Type: "messages.y"},
		}
		var ids []int64
		for i, e := range seed {
			e.Actor = "test"
			e.Time = base.Add(time.Duration(i) * time.Second)
			got, err := log.Append(ctx, e)
			require.NoError(t, err)
			ids = append(ids, got.ID)
		}
		list := func(f store.AuditFilter) []int64 {
			t.Helper()
			events, err := log.List(ctx, f)
			require.NoError(t, err)
			return eventIDs(events)
		}
		pick := func(idx ...int) []int64 {
			out := []int64{}
			for _, i := range idx {
				out = append(out, ids[i])
			}
			return out
		}
		require.Equal(t, pick(0, 1, 2, 3, 4, 5), list(store.AuditFilter{}))
		require.Equal(t, pick(0, 1, 4), list(store.AuditFilter{CorrelationID: "c1"}))
		require.Equal(t, pick(0, 2, 4), list(store.AuditFilter{AgentID: "a"}))
		require.Equal(t, pick(0, 3), list(store.AuditFilter{MessageID: "m1"}))
		require.Equal(t, pick(0, 1, 3), list(store.AuditFilter{TypePrefix: "message."}))
		require.Equal(t, pick(4), list(store.AuditFilter{TypePrefix: "message_"}), "the prefix is literal, not a pattern")
		require.Equal(t, pick(0, 1, 3, 4, 5), list(store.AuditFilter{TypePrefix: "message"}))
		require.Equal(t, pick(2, 3, 4, 5), list(store.AuditFilter{Since: base.Add(2 * time.Second)}), "Since is inclusive")
		require.Equal(t, pick(0, 4), list(store.AuditFilter{CorrelationID: "c1", AgentID: "a"}))
		require.Equal(t, pick(4, 5), list(store.AuditFilter{Limit: 2}), "the limit keeps the newest, oldest first")
		require.Equal(t, pick(1, 4), list(store.AuditFilter{CorrelationID: "c1", Limit: 2}))
		require.Equal(t, pick(3), list(store.AuditFilter{MessageID: "m1", Since: base.Add(time.Second)}))
		require.Empty(t, list(store.AuditFilter{CorrelationID: "none"}))
	})

	t.Run("DefaultLimitIs1000", func(t *testing.T) {
		log := newStore(t).Audit()
		ctx := t.Context()
		var ids []int64
		for range 1005 {
			e, err := log.Append(ctx, store.Event{Type: "bulk"})
			require.NoError(t, err)
			ids = append(ids, e.ID)
		}
		events, err := log.List(ctx, store.AuditFilter{})
		require.NoError(t, err)
		require.Equal(t, ids[5:], eventIDs(events))
	})
}

// ---------------------------------------------------------------------------------------------
// Artifacts

func runArtifacts(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("AppendListFilterDuplicate", func(t *testing.T) {
		arts := newStore(t).Artifacts()
		ctx := t.Context()
		in := []store.Artifact{
			{NegotiationID: "n1", Kind: "proposal", Version: "v10", ContentType: "application/json", Content: []byte(`{"p":10}`)},
			{NegotiationID: "n1", Kind: "decision", Version: "v1", ContentType: "text/plain", Content: []byte("accept")},
			{NegotiationID: "n2", Kind: "proposal", Version: "v10", ContentType: "application/json", Content: []byte(`{"other":true}`)},
			{NegotiationID: "n1", Kind: "proposal", Version: "v2", ContentType: "application/json", Content: []byte(`{"p":2}`)},
		}
		for _, a := range in {
			require.NoError(t, arts.AppendArtifact(ctx, a))
		}
		check := func(want []store.Artifact, got []store.Artifact) {
			t.Helper()
			require.Len(t, got, len(want))
			for i := range want {
				require.Equal(t, want[i].NegotiationID, got[i].NegotiationID)
				require.Equal(t, want[i].Kind, got[i].Kind)
				require.Equal(t, want[i].Version, got[i].Version)
				require.Equal(t, want[i].ContentType, got[i].ContentType)
				require.Equal(t, want[i].Content, got[i].Content)
				requireRecent(t, got[i].CreatedAt)
			}
		}
		got, err := arts.ListArtifacts(ctx, "n1", "")
		require.NoError(t, err)
		check([]store.Artifact{in[0], in[1], in[3]}, got) // insertion order, not version order
		got, err = arts.ListArtifacts(ctx, "n1", "proposal")
		require.NoError(t, err)
		check([]store.Artifact{in[0], in[3]}, got)
		got, err = arts.ListArtifacts(ctx, "n2", "")
		require.NoError(t, err)
		check([]store.Artifact{in[2]}, got)
		got, err = arts.ListArtifacts(ctx, "n1", "vote")
		require.NoError(t, err)
		require.Empty(t, got)
		got, err = arts.ListArtifacts(ctx, "unknown", "")
		require.NoError(t, err)
		require.Empty(t, got)

		dup := in[0]
		dup.Content = []byte(`{"p":"replaced"}`)
		require.ErrorIs(t, arts.AppendArtifact(ctx, dup), store.ErrDuplicateArtifact)
		got, err = arts.ListArtifacts(ctx, "n1", "proposal")
		require.NoError(t, err)
		check([]store.Artifact{in[0], in[3]}, got) // unchanged
	})
}

// ---------------------------------------------------------------------------------------------
// HITL

// hitlRecord returns a pending invocation with every field set.
func hitlRecord(invocationID, reasonType string, createdAt time.Time) store.HITLRecord {
	return store.HITLRecord{
		InvocationID:  invocationID,
		WorkflowID:    "hitl/" + invocationID,
		ReasonType:    reasonType,
		CorrelationID: "corr-" + invocationID,
		Subject:       "task t1 in repo r",
		Priority:      5,
		Deadline:      createdAt.Add(time.Hour),
		Invocation:    []byte(`{"invocation_id":"` + invocationID + `"}`),
		CreatedAt:     createdAt,
	}
}

func invocationIDs(recs []store.HITLRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.InvocationID
	}
	return out
}

func requireSameTime(t *testing.T, want, got time.Time, what string) {
	t.Helper()
	require.True(t, want.Equal(got), "%s %v, want %v", what, got, want)
	require.Equal(t, time.UTC, got.Location(), "%s is in UTC", what)
}

func runHITL(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("PutGetRoundTrip", func(t *testing.T) {
		h := newStore(t).HITL()
		ctx := t.Context()
		zone := time.FixedZone("UTC+2", 2*60*60)
		created := time.Date(2025, 3, 4, 5, 6, 7, 123456789, zone)
		deadline := time.Date(2025, 3, 5, 5, 6, 7, 987654321, zone)
		// Odd spacing and key order: the bytes must come back exactly, not re-encoded.
		invocation := `{"z": 1,  "a" : [true, null], "s":"\u00e9 \"q\""}`
		require.NoError(t, h.PutInvocation(ctx, store.HITLRecord{
			InvocationID:  "i1",
			WorkflowID:    "hitl/i1",
			ReasonType:    "SECURITY_APPROVAL",
			CorrelationID: "c1",
			Subject:       "task t1 in repo r",
			Priority:      -7,
			Deadline:      deadline,
			// A put always records a pending invocation, whatever these say.
			Status:     store.HITLDecided,
			Invocation: []byte(invocation),
			Outcome:    []byte(`{"decision":"approve"}`),
			CreatedAt:  created,
			DecidedAt:  created,
		}))
		got, err := h.GetInvocation(ctx, "i1")
		require.NoError(t, err)
		require.Equal(t, "i1", got.InvocationID)
		require.Equal(t, "hitl/i1", got.WorkflowID)
		require.Equal(t, "SECURITY_APPROVAL", got.ReasonType)
		require.Equal(t, "c1", got.CorrelationID)
		require.Equal(t, "task t1 in repo r", got.Subject)
		require.Equal(t, int32(-7), got.Priority)
		// Times are kept at microsecond precision, in UTC.
		requireSameTime(t, deadline.Truncate(time.Microsecond), got.Deadline, "deadline")
		requireSameTime(t, created.Truncate(time.Microsecond), got.CreatedAt, "created_at")
		require.Equal(t, store.HITLPending, got.Status)
		require.Equal(t, invocation, string(got.Invocation))
		require.Nil(t, got.Outcome, "no outcome while pending")
		require.True(t, got.DecidedAt.IsZero(), "decided_at is zero while pending, got %v", got.DecidedAt)

		// Zero times: a zero CreatedAt means now, a zero Deadline stays zero; an empty
		// Invocation reads back empty.
		require.NoError(t, h.PutInvocation(ctx, store.HITLRecord{InvocationID: "i2", ReasonType: "CONFLICT"}))
		got, err = h.GetInvocation(ctx, "i2")
		require.NoError(t, err)
		require.Equal(t, store.HITLPending, got.Status)
		requireRecent(t, got.CreatedAt)
		require.Equal(t, time.UTC, got.CreatedAt.Location())
		require.True(t, got.Deadline.IsZero(), "deadline %v", got.Deadline)
		require.Empty(t, got.Invocation)
		require.True(t, got.DecidedAt.IsZero())

		_, err = h.GetInvocation(ctx, "unknown")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("PutRejectsInvalidRecords", func(t *testing.T) {
		h := newStore(t).HITL()
		ctx := t.Context()
		require.Error(t, h.PutInvocation(ctx, store.HITLRecord{Invocation: []byte(`{}`)}), "an invocation_id is required")
		require.Error(t, h.PutInvocation(ctx, store.HITLRecord{InvocationID: "i1", Invocation: []byte(`{"a":`)}), "invalid JSON")
		_, err := h.GetInvocation(ctx, "i1")
		require.ErrorIs(t, err, store.ErrNotFound, "a refused put stores nothing")
		list, err := h.ListInvocations(ctx, store.HITLFilter{})
		require.NoError(t, err)
		require.Empty(t, list)
	})

	t.Run("RePutWhilePendingReplaces", func(t *testing.T) {
		h := newStore(t).HITL()
		ctx := t.Context()
		base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		require.NoError(t, h.PutInvocation(ctx, hitlRecord("i1", "SECURITY_APPROVAL", base)))
		retry := store.HITLRecord{
			InvocationID:  "i1",
			WorkflowID:    "hitl/i1-retry",
			ReasonType:    "TASK_ESCALATION",
			CorrelationID: "c-retry",
			Subject:       "retried subject",
			Priority:      9,
			Deadline:      base.Add(2 * time.Hour),
			Invocation:    []byte(`{"retry":true}`),
			CreatedAt:     base.Add(time.Minute),
		}
		require.NoError(t, h.PutInvocation(ctx, retry))
		got, err := h.GetInvocation(ctx, "i1")
		require.NoError(t, err)
		require.Equal(t, "hitl/i1-retry", got.WorkflowID)
		require.Equal(t, "TASK_ESCALATION", got.ReasonType)
		require.Equal(t, "c-retry", got.CorrelationID)
		require.Equal(t, "retried subject", got.Subject)
		require.Equal(t, int32(9), got.Priority)
		requireSameTime(t, retry.Deadline, got.Deadline, "deadline")
		requireSameTime(t, retry.CreatedAt, got.CreatedAt, "created_at")
		require.Equal(t, `{"retry":true}`, string(got.Invocation))
		require.Equal(t, store.HITLPending, got.Status)

		list, err := h.ListInvocations(ctx, store.HITLFilter{})
		require.NoError(t, err)
		require.Equal(t, []string{"i1"}, invocationIDs(list), "replaced, not added")
	})

	t.Run("PutAfterDecided", func(t *testing.T) {
		h := newStore(t).HITL()
		ctx := t.Context()
		base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		require.NoError(t, h.PutInvocation(ctx, hitlRecord("i1", "SECURITY_APPROVAL", base)))
		decidedAt := base.Add(10 * time.Minute)
		require.NoError(t, h.CompleteInvocation(ctx, "i1", []byte(`{"decision":"approve"}`), decidedAt))

		again := hitlRecord("i1", "TASK_ESCALATION", base.Add(time.Hour))
		again.Subject = "changed"
		require.ErrorIs(t, h.PutInvocation(ctx, again), store.ErrAlreadyDecided)
		require.ErrorIs(t, h.PutInvocation(ctx, hitlRecord("i1", "SECURITY_APPROVAL", base)), store.ErrAlreadyDecided,
			"even an identical re-put")

		got, err := h.GetInvocation(ctx, "i1")
		require.NoError(t, err, "the decided invocation is unchanged")
		require.Equal(t, store.HITLDecided, got.Status)
		require.Equal(t, "SECURITY_APPROVAL", got.ReasonType)
		require.Equal(t, "task t1 in repo r", got.Subject)
		requireSameTime(t, base, got.CreatedAt, "created_at")
		require.Equal(t, `{"decision":"approve"}`, string(got.Outcome))
		requireSameTime(t, decidedAt, got.DecidedAt, "decided_at")
	})

	t.Run("Complete", func(t *testing.T) {
		h := newStore(t).HITL()
		ctx := t.Context()
		base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		require.ErrorIs(t, h.CompleteInvocation(ctx, "unknown", []byte(`{}`), base), store.ErrNotFound)
		_, err := h.GetInvocation(ctx, "unknown")
		require.ErrorIs(t, err, store.ErrNotFound, "completing an unknown id creates nothing")

		require.NoError(t, h.PutInvocation(ctx, hitlRecord("i1", "SECURITY_APPROVAL", base)))
		require.NoError(t, h.PutInvocation(ctx, hitlRecord("i2", "SECURITY_APPROVAL", base)))
		require.Error(t, h.CompleteInvocation(ctx, "i1", nil, base), "an outcome is required")
		require.Error(t, h.CompleteInvocation(ctx, "i1", []byte(`{"decision":`), base), "invalid JSON")
		got, err := h.GetInvocation(ctx, "i1")
		require.NoError(t, err)
		require.Equal(t, store.HITLPending, got.Status, "a refused completion changes nothing")

		outcome := `{"decision": "approve",  "rationale":"ok"}`
		decidedAt := time.Date(2025, 1, 1, 12, 30, 0, 555555999, time.FixedZone("UTC-5", -5*60*60))
		require.NoError(t, h.CompleteInvocation(ctx, "i1", []byte(outcome), decidedAt))
		got, err = h.GetInvocation(ctx, "i1")
		require.NoError(t, err)
		require.Equal(t, store.HITLDecided, got.Status)
		require.Equal(t, outcome, string(got.Outcome), "outcome bytes are kept exactly")
		requireSameTime(t, decidedAt.Truncate(time.Microsecond), got.DecidedAt, "decided_at")
		require.Equal(t, `{"invocation_id":"i1"}`, string(got.Invocation))
		requireSameTime(t, base, got.CreatedAt, "created_at")
		require.Equal(t, "SECURITY_APPROVAL", got.ReasonType)

		// The same bytes again: an idempotent retry, a no-op (decided_at stays).
		require.NoError(t, h.CompleteInvocation(ctx, "i1", []byte(outcome), decidedAt.Add(time.Hour)))
		// Different bytes — even the same JSON value spelled differently — are refused.
		require.ErrorIs(t, h.CompleteInvocation(ctx, "i1", []byte(`{"decision":"reject"}`), decidedAt), store.ErrAlreadyDecided)
		require.ErrorIs(t, h.CompleteInvocation(ctx, "i1", []byte(`{"decision":"approve","rationale":"ok"}`), decidedAt), store.ErrAlreadyDecided)
		got, err = h.GetInvocation(ctx, "i1")
		require.NoError(t, err)
		require.Equal(t, store.HITLDecided, got.Status)
		require.Equal(t, outcome, string(got.Outcome), "the stored outcome is unchanged")
		requireSameTime(t, decidedAt.Truncate(time.Microsecond), got.DecidedAt, "decided_at")

		// The other invocation was not touched; a zero decidedAt means now.
		got, err = h.GetInvocation(ctx, "i2")
		require.NoError(t, err)
		require.Equal(t, store.HITLPending, got.Status)
		require.Nil(t, got.Outcome)
		require.NoError(t, h.CompleteInvocation(ctx, "i2", []byte(`{"decision":"fallback"}`), time.Time{}))
		got, err = h.GetInvocation(ctx, "i2")
		require.NoError(t, err)
		require.Equal(t, store.HITLDecided, got.Status)
		requireRecent(t, got.DecidedAt)
		require.Equal(t, time.UTC, got.DecidedAt.Location())
	})

	t.Run("ListFilters", func(t *testing.T) {
		h := newStore(t).HITL()
		ctx := t.Context()
		base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		seed := []struct {
			id, reason string
			decide     bool
		}{
			{"i0", "SECURITY_APPROVAL", false},
			{"i1", "CONFLICT", true},
			{"i2", "SECURITY_APPROVAL", true},
			{"i3", "TASK_ESCALATION", false},
			{"i4", "CONFLICT", false},
			{"i5", "SECURITY_APPROVAL", false},
		}
		for i, x := range seed {
			require.NoError(t, h.PutInvocation(ctx, hitlRecord(x.id, x.reason, base.Add(time.Duration(i)*time.Second))))
			if x.decide {
				require.NoError(t, h.CompleteInvocation(ctx, x.id, []byte(`{"n":1}`), base.Add(time.Hour)))
			}
		}
		list := func(f store.HITLFilter) []string {
			t.Helper()
			recs, err := h.ListInvocations(ctx, f)
			require.NoError(t, err)
			for _, r := range recs {
				if f.Status != "" {
					require.Equal(t, f.Status, r.Status)
				}
				if f.ReasonType != "" {
					require.Equal(t, f.ReasonType, r.ReasonType)
				}
			}
			return invocationIDs(recs)
		}
		require.Equal(t, []string{"i0", "i1", "i2", "i3", "i4", "i5"}, list(store.HITLFilter{}))
		require.Equal(t, []string{"i0", "i3", "i4", "i5"}, list(store.HITLFilter{Status: store.HITLPending}))
		require.Equal(t, []string{"i1", "i2"}, list(store.HITLFilter{Status: store.HITLDecided}))
		require.Equal(t, []string{"i0", "i2", "i5"}, list(store.HITLFilter{ReasonType: "SECURITY_APPROVAL"}))
		require.Equal(t, []string{"i0", "i5"}, list(store.HITLFilter{Status: store.HITLPending, ReasonType: "SECURITY_APPROVAL"}))
		require.Equal(t, []string{"i1"}, list(store.HITLFilter{Status: store.HITLDecided, ReasonType: "CONFLICT"}))
		require.Empty(t, list(store.HITLFilter{ReasonType: "NONE"}))
		require.Empty(t, list(store.HITLFilter{Status: "unknown"}))

		// Listed records carry every field.
		recs, err := h.ListInvocations(ctx, store.HITLFilter{Status: store.HITLDecided, ReasonType: "CONFLICT"})
		require.NoError(t, err)
		require.Len(t, recs, 1)
		want := hitlRecord("i1", "CONFLICT", base.Add(time.Second))
		got := recs[0]
		require.Equal(t, want.WorkflowID, got.WorkflowID)
		require.Equal(t, want.CorrelationID, got.CorrelationID)
		require.Equal(t, want.Subject, got.Subject)
		require.Equal(t, want.Priority, got.Priority)
		requireSameTime(t, want.Deadline, got.Deadline, "deadline")
		requireSameTime(t, want.CreatedAt, got.CreatedAt, "created_at")
		require.Equal(t, string(want.Invocation), string(got.Invocation))
		require.Equal(t, `{"n":1}`, string(got.Outcome))
		requireSameTime(t, base.Add(time.Hour), got.DecidedAt, "decided_at")
	})

	t.Run("ListOrderAndLimit", func(t *testing.T) {
		h := newStore(t).HITL()
		ctx := t.Context()
		base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		// Inserted out of order; equal creation times are ordered by invocation_id in byte
		// order (upper case before lower case).
		seed := []struct {
			id  string
			sec int
		}{
			{"late", 9}, {"b", 5}, {"B", 5}, {"a", 5}, {"early", 1}, {"z", 3},
		}
		for _, x := range seed {
			require.NoError(t, h.PutInvocation(ctx, hitlRecord(x.id, "CONFLICT", base.Add(time.Duration(x.sec)*time.Second))))
		}
		list := func(f store.HITLFilter) []string {
			t.Helper()
			recs, err := h.ListInvocations(ctx, f)
			require.NoError(t, err)
			return invocationIDs(recs)
		}
		require.Equal(t, []string{"early", "z", "B", "a", "b", "late"}, list(store.HITLFilter{}))
		require.Equal(t, []string{"b", "late"}, list(store.HITLFilter{Limit: 2}), "the limit keeps the newest, oldest first")
		require.Equal(t, []string{"a", "b", "late"}, list(store.HITLFilter{Limit: 3}))
		require.Equal(t, []string{"early", "z", "B", "a", "b", "late"}, list(store.HITLFilter{Limit: 100}))

		// The limit applies after the filters.
		require.NoError(t, h.CompleteInvocation(ctx, "late", []byte(`{}`), time.Time{}))
		require.NoError(t, h.CompleteInvocation(ctx, "b", []byte(`{}`), time.Time{}))
		require.Equal(t, []string{"B", "a"}, list(store.HITLFilter{Status: store.HITLPending, Limit: 2}))
		require.Equal(t, []string{"late"}, list(store.HITLFilter{Status: store.HITLDecided, Limit: 1}))

		// A re-put while pending moves the invocation to its new creation time.
		require.NoError(t, h.PutInvocation(ctx, hitlRecord("early", "CONFLICT", base.Add(20*time.Second))))
		require.Equal(t, []string{"z", "B", "a", "early"}, list(store.HITLFilter{Status: store.HITLPending}))
	})

	t.Run("DefaultLimitIs1000", func(t *testing.T) {
		h := newStore(t).HITL()
		ctx := t.Context()
		base := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		var ids []string
		for i := range 1005 {
			id := fmt.Sprintf("i%04d", i)
			require.NoError(t, h.PutInvocation(ctx, store.HITLRecord{InvocationID: id, CreatedAt: base.Add(time.Duration(i) * time.Millisecond)}))
			ids = append(ids, id)
		}
		recs, err := h.ListInvocations(ctx, store.HITLFilter{})
		require.NoError(t, err)
		require.Equal(t, ids[5:], invocationIDs(recs))
	})

	t.Run("ConcurrentCompleteOneWins", func(t *testing.T) {
		h := newStore(t).HITL()
		ctx := t.Context()
		require.NoError(t, h.PutInvocation(ctx, hitlRecord("i1", "SECURITY_APPROVAL", time.Now())))
		winner := oneWins(t, 16, store.ErrAlreadyDecided, func(i int) error {
			return h.CompleteInvocation(ctx, "i1", []byte(fmt.Sprintf(`{"by":%d}`, i)), time.Now())
		})
		got, err := h.GetInvocation(ctx, "i1")
		require.NoError(t, err)
		require.Equal(t, store.HITLDecided, got.Status)
		require.Equal(t, fmt.Sprintf(`{"by":%d}`, winner), string(got.Outcome), "the winner's outcome is stored")
	})

	t.Run("ConcurrentIdempotentCompletes", func(t *testing.T) {
		h := newStore(t).HITL()
		ctx := t.Context()
		require.NoError(t, h.PutInvocation(ctx, hitlRecord("i1", "SECURITY_APPROVAL", time.Now())))
		const n = 16
		errs := make([]error, n)
		atOnce(n, func(i int) {
			errs[i] = h.CompleteInvocation(ctx, "i1", []byte(`{"decision":"approve"}`), time.Now())
		})
		for i, err := range errs {
			require.NoError(t, err, "completion %d: retries with the same outcome all succeed", i)
		}
		got, err := h.GetInvocation(ctx, "i1")
		require.NoError(t, err)
		require.Equal(t, store.HITLDecided, got.Status)
		require.Equal(t, `{"decision":"approve"}`, string(got.Outcome))
	})
}
