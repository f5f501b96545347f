package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// This file tests the message plane (store.MessagePlane): admission and capacity (§13),
// claims, leases and confirmation, the message lifecycle (§11), lanes and TTL (§7.3, §11),
// Subscribe, and stream resumption, retention and buffer metrics (§5.5, §13). Planned steps
// are in steps.go, the sweep in expiry.go, the idempotency cache in idempotency.go and the
// pending responses in responses.go.

// always allows every transition; the tests below are about what the store does around it.
func always(_, _ commonpb.EnvelopeState) bool { return true }

func seqs(ds []store.Delivery) []int64 {
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.Seq
	}
	return out
}

// laneReq is a tracked admission into a lane.
func laneReq(id, recipient string, lane commonpb.CommunicationClass) store.AdmitRequest {
	return store.AdmitRequest{Envelope: Envelope(id), RecipientID: recipient, Track: true, Lane: lane}
}

func claimW(t *testing.T, mp store.MessagePlane, agentID string, limit int, w store.LaneWeights) []store.Delivery {
	t.Helper()
	ds, err := mp.Claim(t.Context(), store.ClaimRequest{AgentID: agentID, Limit: limit, Lease: time.Hour, Weights: w})
	require.NoError(t, err)
	return ds
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

// runMessages checks the message plane's admission, capacity, claims, confirmation and
// lifecycle, one concern per function; every subtest stays a direct child of Messages.
func runMessages(t *testing.T, newStore func(t *testing.T) store.Store) {
	runAdmission(t, newStore)
	runCapacity(t, newStore)
	runControlTraffic(t, newStore)
	runConcurrentCapacity(t, newStore)
	runAdmitBatch(t, newStore)
	runDuplicateMessageIDs(t, newStore)
	runConfirm(t, newStore)
	runClaim(t, newStore)
	runMessageReads(t, newStore)
	runAdvance(t, newStore)
	runConcurrentAdvance(t, newStore)
	runTraceParent(t, newStore)
}

// runAdmission runs the basic admission promises: a round trip through Admit, Claim and
// Confirm, seq order across agents and the refusal of malformed requests.
func runAdmission(t *testing.T, newStore func(t *testing.T) store.Store) {
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
}

// runCapacity checks the inbound buffer's capacity (§13): enforced, freed by a confirmation,
// and unlimited at zero.
func runCapacity(t *testing.T, newStore func(t *testing.T) store.Store) {
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

	t.Run("AuditWrittenWithTheAdmission", func(t *testing.T) {
		st := newStore(t)
		mp, ctx := st.Messages(), t.Context()
		ev := func(detail string) *store.Event {
			return &store.Event{CorrelationID: "corr", Actor: "alice", Type: "message.admitted", AgentID: "bob",
				Details: []byte(`{"lane":"` + detail + `"}`), HLC: "0001725552000000.000001.n-" + detail, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}
		}
		seq := admitReq(t, mp, store.AdmitRequest{Envelope: Envelope("a1"), RecipientID: "bob", Capacity: 1, Track: true, Audit: ev("STANDARD")})
		// Refused admissions write no audit event: a full buffer, a duplicate message_id.
		_, err := mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope("a2"), RecipientID: "bob", Capacity: 1, Track: true, Audit: ev("full")})
		require.ErrorIs(t, err, store.ErrBufferFull)
		_, err = mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope("a1"), RecipientID: "bob", Capacity: 0, Track: true, Audit: ev("dup")})
		require.ErrorIs(t, err, store.ErrDuplicateMessage)
		// Untracked control traffic is audited the same way; no Audit writes nothing.
		seq3 := admitReq(t, mp, store.AdmitRequest{Envelope: Envelope("a3"), RecipientID: "bob", Audit: ev("PRIVILEGED")})
		admitReq(t, mp, store.AdmitRequest{Envelope: Envelope("a4"), RecipientID: "bob"})

		events, err := st.Audit().List(ctx, store.AuditFilter{TypePrefix: "message.admitted"})
		require.NoError(t, err)
		require.Len(t, events, 2, "one event per admitted message that carried one: %+v", events)
		for i, want := range []struct {
			id, lane string
			seq      int64
		}{{"a1", "STANDARD", seq}, {"a3", "PRIVILEGED", seq3}} {
			e := events[i]
			require.Equal(t, want.id, e.MessageID)
			require.Equal(t, "corr", e.CorrelationID)
			require.Equal(t, "alice", e.Actor)
			require.Equal(t, "bob", e.AgentID)
			require.Equal(t, "0001725552000000.000001.n-"+want.lane, e.HLC, "the HLC is written with the admission")
			require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", e.TraceID)
			actRequireRecent(t, e.Time, "the event's time")
			var d map[string]any
			require.NoError(t, json.Unmarshal(e.Details, &d))
			require.Equal(t, map[string]any{"lane": want.lane, "seq": float64(want.seq)}, d, "the details gain the delivery's seq")
		}
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
}

// runControlTraffic checks that control traffic (admitted without a capacity) takes no slot of
// the data it travels beside (§13).
func runControlTraffic(t *testing.T, newStore func(t *testing.T) store.Store) {
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
		dataDepth := func() int {
			n, err := mp.DataDepth(ctx, "bob")
			require.NoError(t, err)
			return n
		}
		require.Equal(t, capacity, dataDepth(), "the data depth counts what the capacity counts")

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
		require.Equal(t, capacity, dataDepth(), "confirmed control rows were never counted")
		// Confirming a data row does.
		_, ok, err := mp.Confirm(ctx, "bob", data[0], "d0")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, capacity-1, dataDepth(), "a confirmed data row frees its slot")
		admit(t, mp, "d3", "bob", capacity, true)
		_, err = mp.Admit(ctx, store.AdmitRequest{Envelope: Envelope("over-again"), RecipientID: "bob", Capacity: capacity})
		require.ErrorIs(t, err, store.ErrBufferFull)
	})
}

// runConcurrentCapacity checks that the capacity holds under concurrent admissions and while a
// consumer confirms.
func runConcurrentCapacity(t *testing.T, newStore func(t *testing.T) store.Store) {
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

	t.Run("CapacityHoldsWhileConfirming", func(t *testing.T) { capacityHoldsWhileConfirming(t, newStore) })
}

// capacityHoldsWhileConfirming is the CapacityHoldsWhileConfirming subtest, a function of its
// own for its length. Producers admit to a small buffer while its consumer claims and
// confirms: every confirmation frees exactly one slot, and no snapshot of the buffer ever
// holds more than the capacity.
func capacityHoldsWhileConfirming(t *testing.T, newStore func(t *testing.T) store.Store) {
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
}

// runDuplicateMessageIDs checks that a message_id is admitted at most once, also when racing.
func runDuplicateMessageIDs(t *testing.T, newStore func(t *testing.T) store.Store) {
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
}

// runConfirm checks what Confirm and ConfirmBatch refuse and what they confirm.
func runConfirm(t *testing.T, newStore func(t *testing.T) store.Store) {
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
}

// runClaim checks Claim's leases, their release, its order and limit, and that racing claims
// hand each row out once.
func runClaim(t *testing.T, newStore func(t *testing.T) store.Store) {
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
}

// runMessageReads checks the reads of the buffer and of a message's record: Depth and
// GetMessage.
func runMessageReads(t *testing.T, newStore func(t *testing.T) store.Store) {
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
}

// runAdvance checks lifecycle transitions through Advance (§11, Appendix C).
func runAdvance(t *testing.T, newStore func(t *testing.T) store.Store) {
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
}

// runConcurrentAdvance checks that Advance is atomic when callers race on one message.
func runConcurrentAdvance(t *testing.T, newStore func(t *testing.T) store.Store) {
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

// admitMix admits nP PRIVILEGED, nS STANDARD and nB BULK rows to bob, named p0.., s0..,
// b0.., interleaved so that seq order alone never gives the expected claim order.
func admitMix(t *testing.T, mp store.MessagePlane, nP, nS, nB int) {
	t.Helper()
	var p, s, b int
	for p < nP || s < nS || b < nB {
		if b < nB {
			admitReq(t, mp, laneReq(fmt.Sprintf("b%d", b), "bob", commonpb.CommunicationClass_BULK))
			b++
		}
		if s < nS {
			admitReq(t, mp, laneReq(fmt.Sprintf("s%d", s), "bob", commonpb.CommunicationClass_STANDARD))
			s++
		}
		for range 2 {
			if p < nP {
				admitReq(t, mp, laneReq(fmt.Sprintf("p%d", p), "bob", commonpb.CommunicationClass_PRIVILEGED))
				p++
			}
		}
	}
}

// laneIDs names the rows prefix<from>..prefix<to-1> that admitMix admits.
func laneIDs(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

// runLanes checks the communication class lanes (§7.3) and the TTL (§11) of admitted rows.
func runLanes(t *testing.T, newStore func(t *testing.T) store.Store) {
	runLaneOrder(t, newStore)
	runTTLRows(t, newStore)
}

// runLaneOrder checks how Claim interleaves the lanes: weighted round robin, PRIVILEGED first,
// whole rounds, and no lane starving another.
func runLaneOrder(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("WeightedRoundRobin", func(t *testing.T) {
		mp := newStore(t).Messages()
		admitMix(t, mp, 12, 6, 2)
		ds := claimW(t, mp, "bob", 20, store.LaneWeights{Privileged: 6, Standard: 3, Bulk: 1})
		want := slices.Concat(laneIDs("p", 0, 6), laneIDs("s", 0, 3), laneIDs("b", 0, 1), laneIDs("p", 6, 12), laneIDs("s", 3, 6), laneIDs("b", 1, 2))
		require.Equal(t, want, messageIDs(ds), "6P,3S,1B,6P,3S,1B")
		for _, d := range ds {
			require.Equal(t, 1, d.Attempts)
		}
		require.Empty(t, claimW(t, mp, "bob", 20, store.LaneWeights{Privileged: 6, Standard: 3, Bulk: 1}))
	})

	t.Run("EachClaimStartsARoundWithPrivileged", func(t *testing.T) {
		mp := newStore(t).Messages()
		admitMix(t, mp, 12, 6, 2)
		w := store.LaneWeights{Privileged: 6, Standard: 3, Bulk: 1}
		require.Equal(t, laneIDs("p", 0, 4), messageIDs(claimW(t, mp, "bob", 4, w)), "the limit cuts the first round")
		want := slices.Concat(laneIDs("p", 4, 10), laneIDs("s", 0, 3), laneIDs("b", 0, 1), laneIDs("p", 10, 12), laneIDs("s", 3, 6), laneIDs("b", 1, 2))
		require.Equal(t, want, messageIDs(claimW(t, mp, "bob", 20, w)))
	})

	t.Run("LimitTakesWholeRounds", func(t *testing.T) {
		mp := newStore(t).Messages()
		admitMix(t, mp, 12, 6, 2)
		w := store.LaneWeights{Privileged: 6, Standard: 3, Bulk: 1}
		want := slices.Concat(laneIDs("p", 0, 6), laneIDs("s", 0, 3), laneIDs("b", 0, 1))
		require.Equal(t, want, messageIDs(claimW(t, mp, "bob", 10, w)), "one round, not the first 10 PRIVILEGED rows")
		want = slices.Concat(laneIDs("p", 6, 12), laneIDs("s", 3, 6), laneIDs("b", 1, 2))
		require.Equal(t, want, messageIDs(claimW(t, mp, "bob", 10, w)))
	})

	t.Run("LaneWithNothingYields", func(t *testing.T) {
		mp := newStore(t).Messages()
		admitMix(t, mp, 8, 0, 3)
		ds := claimW(t, mp, "bob", 20, store.LaneWeights{Privileged: 2, Standard: 3, Bulk: 1})
		require.Equal(t, []string{"p0", "p1", "b0", "p2", "p3", "b1", "p4", "p5", "b2", "p6", "p7"}, messageIDs(ds))

		// Leased rows are not deliverable either: with the PRIVILEGED rows all leased, the
		// other lanes share the claim.
		mp = newStore(t).Messages()
		admitMix(t, mp, 4, 4, 4)
		require.Equal(t, laneIDs("p", 0, 4), messageIDs(claimW(t, mp, "bob", 4, store.LaneWeights{Privileged: 9})))
		ds = claimW(t, mp, "bob", 6, store.LaneWeights{Privileged: 9, Standard: 2, Bulk: 1})
		require.Equal(t, []string{"s0", "s1", "b0", "s2", "s3", "b1"}, messageIDs(ds))
	})

	t.Run("ZeroWeightCountsAsOne", func(t *testing.T) {
		mp := newStore(t).Messages()
		admitMix(t, mp, 3, 3, 3)
		ds := claimW(t, mp, "bob", 9, store.LaneWeights{})
		require.Equal(t, []string{"p0", "s0", "b0", "p1", "s1", "b1", "p2", "s2", "b2"}, messageIDs(ds))
	})

	t.Run("UnspecifiedIsStandard", func(t *testing.T) {
		mp := newStore(t).Messages()
		admitReq(t, mp, laneReq("u0", "bob", commonpb.CommunicationClass_COMM_CLASS_UNSPECIFIED))
		admitReq(t, mp, laneReq("p0", "bob", commonpb.CommunicationClass_PRIVILEGED))
		admitReq(t, mp, laneReq("s0", "bob", commonpb.CommunicationClass_STANDARD))
		admitReq(t, mp, laneReq("b0", "bob", commonpb.CommunicationClass_BULK))
		admitReq(t, mp, laneReq("u1", "bob", commonpb.CommunicationClass_COMM_CLASS_UNSPECIFIED))
		ds := claimW(t, mp, "bob", 10, store.LaneWeights{Privileged: 1, Standard: 1, Bulk: 1})
		require.Equal(t, []string{"p0", "u0", "b0", "s0", "u1"}, messageIDs(ds))
	})
}

// runTTLRows checks that a row whose TTL ran out is not delivered.
func runTTLRows(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("TTLRowsAreNotDeliverable", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		past := time.Now().Add(-time.Second)
		// Long enough that a loaded shared machine admits and claims within it.
		const ttl = 3 * time.Second
		soon := time.Now().Add(ttl)
		start := time.Now()
		admitReq(t, mp, store.AdmitRequest{Envelope: Envelope("gone"), RecipientID: "bob", Track: true, ExpiresAt: past})
		admitReq(t, mp, store.AdmitRequest{Envelope: Envelope("soon"), RecipientID: "bob", Track: true, ExpiresAt: soon})
		admitReq(t, mp, store.AdmitRequest{Envelope: Envelope("never"), RecipientID: "bob", Track: true})
		admitReq(t, mp, store.AdmitRequest{Envelope: Envelope("ctl"), RecipientID: "bob", ExpiresAt: past})

		rec := getMessage(t, mp, "soon")
		require.True(t, soon.Truncate(time.Microsecond).Equal(rec.ExpiresAt), "ExpiresAt round-trips: %v vs %v", soon, rec.ExpiresAt)
		require.Equal(t, time.UTC, rec.ExpiresAt.Location())
		require.True(t, getMessage(t, mp, "never").ExpiresAt.IsZero())

		ds := claim(t, mp, "bob", 10, time.Millisecond)
		require.Less(t, time.Since(start), ttl, "the machine is too slow for this test's TTL")
		require.Equal(t, []string{"soon", "never"}, messageIDs(ds), "a row whose TTL ran out is never handed out")

		time.Sleep(time.Until(soon.Add(200 * time.Millisecond)))
		require.NoError(t, mp.ReleaseLeases(ctx, "bob"))
		require.Equal(t, []string{"never"}, messageIDs(claim(t, mp, "bob", 10, time.Hour)), "not even when it was claimed before")
		require.Equal(t, 4, depth(t, mp, "bob"), "expired rows stay unconfirmed until the sweep")
	})
}

// runSubscribe checks Subscribe's wake-ups: on admission and released leases, never blocking
// the sender, and none after cancel.
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

// runResume checks stream resumption (§5.5), retention (Prune) and the buffer metrics (§13),
// one concern per function; every subtest stays a direct child of Resume.
func runResume(t *testing.T, newStore func(t *testing.T) store.Store) {
	runResumeAfter(t, newStore)
	runPrune(t, newStore)
	runBufferStats(t, newStore)
}

// runResumeAfter checks ResumeAfter: rows through the offset are confirmed, an offset past the
// stream is refused.
func runResumeAfter(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("ConfirmsThroughOffset", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		var bob []int64
		for i := range 5 {
			bob = append(bob, admit(t, mp, fmt.Sprintf("b%d", i), "bob", 0, true))
			if i < 2 {
				admit(t, mp, fmt.Sprintf("c%d", i), "carol", 0, true)
			}
		}
		require.Len(t, claim(t, mp, "bob", 10, time.Hour), 5)

		require.NoError(t, mp.ResumeAfter(ctx, "bob", bob[2]))
		require.Equal(t, 2, depth(t, mp, "bob"))
		require.Equal(t, 2, depth(t, mp, "carol"), "another agent's rows are untouched")
		require.NoError(t, mp.ReleaseLeases(ctx, "bob"))
		require.Equal(t, []string{"b3", "b4"}, messageIDs(claim(t, mp, "bob", 10, time.Hour)))
		_, ok, err := mp.Confirm(ctx, "bob", bob[1], "")
		require.NoError(t, err)
		require.False(t, ok, "already confirmed by the resume")
		require.NoError(t, mp.ResumeAfter(ctx, "bob", bob[2]), "resuming again is harmless")
		require.NoError(t, mp.ResumeAfter(ctx, "bob", 0), "nothing was pruned")
		require.Equal(t, 2, depth(t, mp, "bob"))
	})

	t.Run("InvalidPosition", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		require.ErrorIs(t, mp.ResumeAfter(ctx, "bob", 1), store.ErrInvalidPosition, "nothing assigned yet")
		require.NoError(t, mp.ResumeAfter(ctx, "bob", 0))
		admit(t, mp, "b0", "bob", 0, true)
		last := admit(t, mp, "c0", "carol", 0, true)
		require.ErrorIs(t, mp.ResumeAfter(ctx, "bob", last+1), store.ErrInvalidPosition)
		require.ErrorIs(t, mp.ResumeAfter(ctx, "bob", -1), store.ErrInvalidPosition)
		require.Equal(t, 1, depth(t, mp, "bob"), "an invalid position confirms nothing")
		// The last seq assigned counts even when its row is gone.
		gone := admit(t, mp, "b1", "bob", 0, true)
		ok, err := mp.CancelUndelivered(ctx, "b1")
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, mp.ResumeAfter(ctx, "bob", gone), "a seq of any agent up to the last assigned")
		require.Equal(t, 0, depth(t, mp, "bob"))
		require.NoError(t, mp.ResumeAfter(ctx, "carol", last))
		require.Equal(t, 0, depth(t, mp, "carol"))
	})
}

// runPrune checks Prune: confirmed rows and stale idempotency entries go, and a resume behind
// the pruned horizon is refused.
func runPrune(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("PruneAndExpiredPosition", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		var bob []int64
		for i := range 4 {
			bob = append(bob, admit(t, mp, fmt.Sprintf("b%d", i), "bob", 0, true))
		}
		admit(t, mp, "c0", "carol", 0, true)
		require.Len(t, claim(t, mp, "bob", 10, time.Hour), 4)
		for _, seq := range bob[:2] {
			_, ok, err := mp.Confirm(ctx, "bob", seq, "")
			require.NoError(t, err)
			require.True(t, ok)
		}
		n, err := mp.Prune(ctx, time.Now().Add(-time.Hour), time.Time{})
		require.NoError(t, err)
		require.Equal(t, 0, n, "confirmed too recently")
		require.NoError(t, mp.ResumeAfter(ctx, "bob", 0), "nothing pruned yet")

		n, err = mp.Prune(ctx, time.Now().Add(time.Minute), time.Time{})
		require.NoError(t, err)
		require.Equal(t, 2, n, "only confirmed rows are pruned")
		n, err = mp.Prune(ctx, time.Now().Add(time.Minute), time.Time{})
		require.NoError(t, err)
		require.Equal(t, 0, n)
		require.Equal(t, 2, depth(t, mp, "bob"))
		require.Equal(t, 1, depth(t, mp, "carol"))

		for _, offset := range []int64{0, bob[0]} {
			err = mp.ResumeAfter(ctx, "bob", offset)
			var pe *store.PositionExpiredError
			require.ErrorAs(t, err, &pe, "offset %d", offset)
			require.Equal(t, offset, pe.Offset)
			require.Equal(t, bob[1], pe.Horizon)
			require.NotEmpty(t, pe.Error())
		}
		require.Equal(t, 2, depth(t, mp, "bob"), "an expired position confirms nothing")
		require.NoError(t, mp.ResumeAfter(ctx, "bob", bob[1]), "resuming from the horizon works")
		require.NoError(t, mp.ResumeAfter(ctx, "carol", 0), "the horizon is per agent")
		require.NoError(t, mp.ResumeAfter(ctx, "bob", bob[3]))
		require.Equal(t, 0, depth(t, mp, "bob"))

		// The horizon only grows.
		n, err = mp.Prune(ctx, time.Now().Add(time.Minute), time.Time{})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		var pe *store.PositionExpiredError
		require.ErrorAs(t, mp.ResumeAfter(ctx, "bob", bob[2]), &pe)
		require.Equal(t, bob[3], pe.Horizon)
	})

	t.Run("PruneIdempotency", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		admitReq(t, mp, dedupReq("m1", "bob", "old"))
		time.Sleep(100 * time.Millisecond)
		mid := time.Now()
		time.Sleep(100 * time.Millisecond)
		admitReq(t, mp, dedupReq("m2", "bob", "new"))
		n, err := mp.Prune(ctx, time.Time{}, mid)
		require.NoError(t, err)
		require.Equal(t, 0, n)
		_, err = mp.Idempotency(ctx, "alice", "old", time.Hour)
		require.ErrorIs(t, err, store.ErrNotFound)
		entry(t, mp, "new")
		// With the entry gone, the key starts a new operation.
		admitReq(t, mp, dedupReq("m3", "bob", "old"))
		require.Equal(t, "m3", entry(t, mp, "old").OriginalMessageID)
	})
}

// runBufferStats checks the per-agent buffer depth and age behind the back-pressure metrics.
func runBufferStats(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("BufferStats", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		stats, err := mp.BufferStats(ctx)
		require.NoError(t, err)
		require.Empty(t, stats)

		admit(t, mp, "c0", "carol", 0, true)
		admit(t, mp, "b0", "bob", 0, true)
		time.Sleep(5 * time.Millisecond)
		admit(t, mp, "b1", "bob", 0, false)
		d := admit(t, mp, "d0", "dave", 0, true)
		_, ok, err := mp.Confirm(ctx, "dave", d, "")
		require.NoError(t, err)
		require.True(t, ok)
		bob := claim(t, mp, "bob", 10, time.Hour)
		carol := claim(t, mp, "carol", 10, time.Hour)

		stats, err = mp.BufferStats(ctx)
		require.NoError(t, err)
		require.Len(t, stats, 2, "only agents holding unconfirmed rows")
		require.Equal(t, "bob", stats[0].AgentID)
		require.Equal(t, 2, stats[0].Depth)
		require.True(t, bob[0].EnqueuedAt.Equal(stats[0].OldestEnqueuedAt), "the oldest row's admission time")
		require.Equal(t, "carol", stats[1].AgentID)
		require.Equal(t, 1, stats[1].Depth)
		require.True(t, carol[0].EnqueuedAt.Equal(stats[1].OldestEnqueuedAt))

		_, ok, err = mp.Confirm(ctx, "bob", bob[0].Seq, "")
		require.NoError(t, err)
		require.True(t, ok)
		stats, err = mp.BufferStats(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, stats[0].Depth)
		require.True(t, bob[1].EnqueuedAt.Equal(stats[0].OldestEnqueuedAt))
	})
}
