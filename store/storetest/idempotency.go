package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// runIdempotency checks the idempotency cache (§11.1–§11.3), one concern per function; every
// subtest stays a direct child of Idempotency.
func runIdempotency(t *testing.T, newStore func(t *testing.T) store.Store) {
	runDedupLifecycle(t, newStore)
	runDedupRefusals(t, newStore)
	runDedupScope(t, newStore)
	runDedupConcurrentAdmits(t, newStore)
	runDedupConcurrentAdvances(t, newStore)
	runLateAcks(t, newStore)
	runCancelUndelivered(t, newStore)
}

// runDedupLifecycle follows one key through its attempts: in progress, retrying after a
// timeout, terminal with a cached outcome.
func runDedupLifecycle(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("Lifecycle", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		admitReq(t, mp, dedupReq("m1", "bob", "t:op"))
		e := entry(t, mp, "t:op")
		require.Equal(t, store.IdempotencyEntry{
			ProducerID: "alice", Key: "t:op", Status: store.OpInProgress,
			OriginalMessageID: "m1", LatestMessageID: "m1", Attempts: 1,
			CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt,
		}, e)
		requireRecent(t, e.CreatedAt)
		require.True(t, e.UpdatedAt.Equal(e.CreatedAt))
		require.Equal(t, "t:op", getMessage(t, mp, "m1").DedupKey)

		// In progress: refused, recorded, not enqueued.
		_, err := mp.Admit(ctx, dedupReq("m2", "bob", "t:op"))
		de := requireDedupError(t, err, true)
		require.Equal(t, e, de.Entry)
		require.Contains(t, err.Error(), "m1")
		rec := getMessage(t, mp, "m2")
		require.Equal(t, stRejected, rec.State)
		require.Equal(t, commonpb.ErrorCode_ALREADY_IN_PROGRESS, rec.ErrorCode)
		require.Equal(t, "t:op", rec.DedupKey)
		require.Equal(t, 1, depth(t, mp, "bob"))
		require.Equal(t, e, entry(t, mp, "t:op"), "a refused attempt changes nothing")

		// Timed out: the next attempt is admitted.
		advance(t, mp, "m1", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		e = entry(t, mp, "t:op")
		require.Equal(t, store.OpRetrying, e.Status)
		require.False(t, e.UpdatedAt.Before(e.CreatedAt))
		admitReq(t, mp, dedupReq("m3", "bob", "t:op"))
		e = entry(t, mp, "t:op")
		require.Equal(t, store.OpInProgress, e.Status)
		require.Equal(t, "m1", e.OriginalMessageID)
		require.Equal(t, "m3", e.LatestMessageID)
		require.Equal(t, 2, e.Attempts)
		require.Equal(t, 2, depth(t, mp, "bob"))

		// Completed: the outcome is cached.
		advance(t, mp, "m3", stFulfilled, 0, `{"result":42}`)
		e = entry(t, mp, "t:op")
		require.Equal(t, store.OpTerminal, e.Status)
		require.Equal(t, "m3", e.OriginalMessageID)
		require.Equal(t, "m3", e.LatestMessageID)
		require.Equal(t, 2, e.Attempts)
		require.Equal(t, stFulfilled, e.TerminalState)
		require.Equal(t, commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED, e.ErrorCode)
		require.Equal(t, `{"result":42}`, e.Result)
		requireRecent(t, e.CachedAt)

		_, err = mp.Admit(ctx, dedupReq("m4", "bob", "t:op"))
		de = requireDedupError(t, err, false)
		require.Equal(t, e, de.Entry)
		require.Contains(t, err.Error(), "m3")
		rec = getMessage(t, mp, "m4")
		require.Equal(t, stRejected, rec.State)
		require.Equal(t, commonpb.ErrorCode_DUPLICATE_DETECTED, rec.ErrorCode)
		require.Equal(t, 2, depth(t, mp, "bob"), "a duplicate is not re-executed")

		// Keys are scoped to the producer.
		other := dedupReq("x1", "bob", "t:op")
		other.Dedup.ProducerID = "mallory"
		admitReq(t, mp, other)
		require.Equal(t, e, entry(t, mp, "t:op"))
		oe, err := mp.Idempotency(ctx, "mallory", "t:op", 0)
		require.NoError(t, err, "a zero window is the default one")
		require.Equal(t, "x1", oe.OriginalMessageID)
		_, err = mp.Idempotency(ctx, "alice", "t:unknown", time.Hour)
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}

// runDedupRefusals checks the admissions that change nothing: a duplicate message_id, a
// duplicate of a retrying attempt, and a full buffer.
func runDedupRefusals(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("DuplicateMessageIDChangesNothing", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		admitReq(t, mp, dedupReq("m1", "bob", "k1"))
		before := entry(t, mp, "k1")
		for _, capacity := range []int{0, 10} {
			req := dedupReq("m1", "bob", "k2")
			req.Capacity = capacity
			_, err := mp.Admit(ctx, req)
			require.ErrorIs(t, err, store.ErrDuplicateMessage)
			_, err = mp.Idempotency(ctx, "alice", "k2", time.Hour)
			require.ErrorIs(t, err, store.ErrNotFound, "a duplicate creates no entry (capacity %d)", capacity)
			req = dedupReq("m1", "bob", "k1")
			req.Capacity = capacity
			_, err = mp.Admit(ctx, req)
			require.ErrorIs(t, err, store.ErrDuplicateMessage, "the message_id check comes first")
		}
		require.Equal(t, before, entry(t, mp, "k1"))
		require.Equal(t, 1, depth(t, mp, "bob"))
		require.Equal(t, stSent, getMessage(t, mp, "m1").State)
	})

	t.Run("DuplicateOfRetryingAttemptChangesNothing", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		admitReq(t, mp, dedupReq("m1", "bob", "k1"))
		advance(t, mp, "m1", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		before := entry(t, mp, "k1")
		require.Equal(t, store.OpRetrying, before.Status)
		// A retrying entry would take any new attempt, so only the message_id check stops this
		// one; whatever the admission began must be undone.
		for _, capacity := range []int{0, 10} {
			req := dedupReq("m1", "carol", "k1")
			req.Capacity = capacity
			_, err := mp.Admit(ctx, req)
			require.ErrorIs(t, err, store.ErrDuplicateMessage)
			require.Equal(t, before, entry(t, mp, "k1"), "the entry still waits for its next attempt (capacity %d)", capacity)
		}
		require.Equal(t, 0, depth(t, mp, "carol"))
		require.Equal(t, stTimedOut, getMessage(t, mp, "m1").State)
		admitReq(t, mp, dedupReq("m2", "carol", "k1"))
		e := entry(t, mp, "k1")
		require.Equal(t, store.OpInProgress, e.Status)
		require.Equal(t, "m2", e.LatestMessageID)
		require.Equal(t, 2, e.Attempts)
	})

	t.Run("BufferFullLeavesCacheUntouched", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		admit(t, mp, "fill", "bob", 1, true)

		req := dedupReq("m1", "bob", "k1")
		req.Capacity = 1
		_, err := mp.Admit(ctx, req)
		require.ErrorIs(t, err, store.ErrBufferFull)
		_, err = mp.Idempotency(ctx, "alice", "k1", time.Hour)
		require.ErrorIs(t, err, store.ErrNotFound, "no entry for an operation that was not admitted")
		rec := getMessage(t, mp, "m1")
		require.Equal(t, stRejected, rec.State)
		require.Equal(t, commonpb.ErrorCode_BUFFER_FULL, rec.ErrorCode)

		// A retrying entry stays retrying.
		admitReq(t, mp, dedupReq("r1", "carol", "k2"))
		advance(t, mp, "r1", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		before := entry(t, mp, "k2")
		req = dedupReq("r2", "bob", "k2")
		req.Capacity = 1
		_, err = mp.Admit(ctx, req)
		require.ErrorIs(t, err, store.ErrBufferFull)
		require.Equal(t, before, entry(t, mp, "k2"))

		// The cache answers before the capacity check: a duplicate is a duplicate, an operation
		// in progress is in progress, even into a full buffer.
		admitReq(t, mp, dedupReq("d1", "carol", "k3"))
		req = dedupReq("d2", "bob", "k3")
		req.Capacity = 1
		_, err = mp.Admit(ctx, req)
		_ = requireDedupError(t, err, true)
		advance(t, mp, "d1", stFulfilled, 0, "done")
		req = dedupReq("d3", "bob", "k3")
		req.Capacity = 1
		_, err = mp.Admit(ctx, req)
		_ = requireDedupError(t, err, false)
		require.Equal(t, commonpb.ErrorCode_DUPLICATE_DETECTED, getMessage(t, mp, "d3").ErrorCode)

		// With room again, the retry of k2 is admitted.
		_, ok, err := mp.Confirm(ctx, "bob", claim(t, mp, "bob", 1, time.Hour)[0].Seq, "fill")
		require.NoError(t, err)
		require.True(t, ok)
		req = dedupReq("r3", "bob", "k2")
		req.Capacity = 1
		admitReq(t, mp, req)
		require.Equal(t, 2, entry(t, mp, "k2").Attempts)
	})
}

// runDedupScope checks where the cache applies: tracked admissions only, within the window,
// and kept in step by Advance.
func runDedupScope(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("UntrackedAdmissionIgnoresDedup", func(t *testing.T) {
		mp := newStore(t).Messages()
		req := dedupReq("u1", "bob", "k1")
		req.Track = false
		admitReq(t, mp, req)
		_, err := mp.Idempotency(t.Context(), "alice", "k1", time.Hour)
		require.ErrorIs(t, err, store.ErrNotFound)
		admitReq(t, mp, dedupReq("m1", "bob", "k1"))
	})

	t.Run("Window", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		const window = 300 * time.Millisecond
		req := dedupReq("m1", "bob", "k1")
		req.Dedup.Window = window
		admitReq(t, mp, req)
		advance(t, mp, "m1", stFulfilled, 0, "one")
		first := entry(t, mp, "k1")
		_, err := mp.Idempotency(ctx, "alice", "k1", window)
		require.NoError(t, err)
		req = dedupReq("m2", "bob", "k1")
		req.Dedup.Window = window
		_, err = mp.Admit(ctx, req)
		_ = requireDedupError(t, err, false)

		time.Sleep(window + 100*time.Millisecond)
		_, err = mp.Idempotency(ctx, "alice", "k1", window)
		require.ErrorIs(t, err, store.ErrNotFound, "out of the window")
		require.Equal(t, first, entry(t, mp, "k1"), "still there for a longer window")

		// An entry out of the window is replaced as if absent.
		req = dedupReq("m3", "bob", "k1")
		req.Dedup.Window = window
		admitReq(t, mp, req)
		e := entry(t, mp, "k1")
		require.Equal(t, store.IdempotencyEntry{
			ProducerID: "alice", Key: "k1", Status: store.OpInProgress,
			OriginalMessageID: "m3", LatestMessageID: "m3", Attempts: 1,
			CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt,
		}, e)
		require.True(t, e.CreatedAt.After(first.CreatedAt))
	})

	t.Run("AdvanceMaintainsEntry", func(t *testing.T) {
		mp := newStore(t).Messages()
		admitReq(t, mp, dedupReq("a1", "bob", "ka"))
		advance(t, mp, "a1", stReceived, 0, "")
		require.Equal(t, store.OpInProgress, entry(t, mp, "ka").Status, "non-terminal stages leave the entry")
		advance(t, mp, "a1", stRejected, commonpb.ErrorCode_VALIDATION_ERROR, "bad input")
		e := entry(t, mp, "ka")
		require.Equal(t, store.OpTerminal, e.Status)
		require.Equal(t, stRejected, e.TerminalState)
		require.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, e.ErrorCode)
		require.Equal(t, "bad input", e.Result)
		// Entries never go back from terminal, and the first outcome stays.
		advance(t, mp, "a1", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		advance(t, mp, "a1", stFulfilled, 0, "other")
		require.Equal(t, e, entry(t, mp, "ka"))

		// TIMED_OUT of an attempt that is not the latest leaves the entry in progress.
		req := dedupReq("c1", "bob", "kc")
		req.Dedup.Window = 200 * time.Millisecond
		admitReq(t, mp, req)
		time.Sleep(300 * time.Millisecond)
		req = dedupReq("c2", "bob", "kc")
		req.Dedup.Window = 200 * time.Millisecond
		admitReq(t, mp, req)
		advance(t, mp, "c1", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		e = entry(t, mp, "kc")
		require.Equal(t, store.OpInProgress, e.Status)
		require.Equal(t, "c2", e.LatestMessageID)
		// A FAILED completion of any attempt is the outcome.
		advance(t, mp, "c2", stFailed, commonpb.ErrorCode_AGENT_UNAVAILABLE, "gone")
		e = entry(t, mp, "kc")
		require.Equal(t, store.OpTerminal, e.Status)
		require.Equal(t, "c2", e.OriginalMessageID)
		require.Equal(t, stFailed, e.TerminalState)
		require.Equal(t, commonpb.ErrorCode_AGENT_UNAVAILABLE, e.ErrorCode)
	})
}

// runDedupConcurrentAdmits checks that racing admissions under one token admit exactly one
// attempt.
func runDedupConcurrentAdmits(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("ConcurrentAdmitsOneToken", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		race := func(round int) (admitted string) {
			const n = 20
			var (
				wg         sync.WaitGroup
				mu         sync.Mutex
				ok         []string
				inProgress int
				errs       []error
			)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req := dedupReq(fmt.Sprintf("r%d-%d", round, i), []string{"bob", "carol"}[i%2], "t:same")
					if i%3 == 0 {
						req.Capacity = 100 // the recipient lock path as well
					}
					_, err := mp.Admit(ctx, req)
					mu.Lock()
					defer mu.Unlock()
					var de *store.DedupError
					switch {
					case err == nil:
						ok = append(ok, req.Envelope.GetMessageId())
					case errors.As(err, &de) && de.InProgress:
						inProgress++
					default:
						errs = append(errs, err)
					}
				}()
			}
			wg.Wait()
			require.Empty(t, errs)
			require.Len(t, ok, 1, "exactly one attempt of one operation is admitted")
			require.Equal(t, n-1, inProgress)
			for i := range n {
				id := fmt.Sprintf("r%d-%d", round, i)
				if id == ok[0] {
					continue
				}
				rec := getMessage(t, mp, id)
				require.Equal(t, stRejected, rec.State)
				require.Equal(t, commonpb.ErrorCode_ALREADY_IN_PROGRESS, rec.ErrorCode)
			}
			return ok[0]
		}
		first := race(0)
		require.Equal(t, 1, depth(t, mp, "bob")+depth(t, mp, "carol"))
		e := entry(t, mp, "t:same")
		require.Equal(t, first, e.LatestMessageID)
		require.Equal(t, 1, e.Attempts)

		advance(t, mp, first, stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		second := race(1)
		require.Equal(t, 2, depth(t, mp, "bob")+depth(t, mp, "carol"))
		e = entry(t, mp, "t:same")
		require.Equal(t, first, e.OriginalMessageID)
		require.Equal(t, second, e.LatestMessageID)
		require.Equal(t, 2, e.Attempts, "the retrying entry admitted exactly one next attempt")
	})
}

// runDedupConcurrentAdvances checks that racing transitions leave the entry in step with its
// latest attempt.
func runDedupConcurrentAdvances(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("ConcurrentAdvancesKeepEntryInStep", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		// A forward-only lifecycle like the router's: stages never go back, and a completion
		// (FULFILLED or FAILED) is final.
		rank := map[commonpb.EnvelopeState]int{stSent: 0, stReceived: 1, commonpb.EnvelopeState_ENVELOPE_STATE_READ: 2, stFulfilled: 3, stFailed: 3}
		legal := func(from, to commonpb.EnvelopeState) bool {
			rf, okf := rank[from]
			rt, okt := rank[to]
			return okf && okt && rt > rf
		}
		targets := []commonpb.EnvelopeState{stReceived, commonpb.EnvelopeState_ENVELOPE_STATE_READ, stFulfilled, stFailed}
		for round := range 5 {
			id, key := fmt.Sprintf("m%d", round), fmt.Sprintf("k%d", round)
			admitReq(t, mp, dedupReq(id, "bob", key))
			type result struct {
				to   commonpb.EnvelopeState
				note string
				rec  store.MessageRecord
			}
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				applied []result
				errs    []error
			)
			for i := range 3 * len(targets) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					to, note := targets[i%len(targets)], fmt.Sprintf("call %d", i)
					rec, ok, err := mp.Advance(ctx, store.Transition{MessageID: id, To: to, Note: note}, legal)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						errs = append(errs, err)
					} else if ok {
						applied = append(applied, result{to, note, rec})
					}
				}()
			}
			wg.Wait()
			require.Empty(t, errs)
			var final *result
			seen := map[commonpb.EnvelopeState]bool{}
			for _, r := range applied {
				require.Equal(t, r.to, r.rec.State, "an applied Advance returns the new state")
				require.Equal(t, r.note, r.rec.Note)
				require.False(t, seen[r.to], "stage %s applied twice (round %d)", r.to, round)
				seen[r.to] = true
				if rank[r.to] == 3 {
					require.Nil(t, final, "two completions applied (round %d)", round)
					final = &r
				}
			}
			require.NotNil(t, final, "some completion is always legal until one is applied")
			rec := getMessage(t, mp, id)
			require.Equal(t, final.to, rec.State)
			require.Equal(t, final.note, rec.Note)
			e := entry(t, mp, key)
			require.Equal(t, store.OpTerminal, e.Status)
			require.Equal(t, final.to, e.TerminalState)
			require.Equal(t, final.note, e.Result, "the entry caches the completion that was applied")
			require.Equal(t, id, e.OriginalMessageID)
		}
	})
}

// runLateAcks checks an ACK that arrives after its message timed out (§11.1 rules 1 and 4),
// also when several race.
func runLateAcks(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("RecordLateAck", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		admitReq(t, mp, dedupReq("m1", "bob", "k"))
		advance(t, mp, "m1", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "timeout")
		admitReq(t, mp, dedupReq("m2", "bob", "k"))

		la, err := mp.RecordLateAck(ctx, "m1", stReceived, 0, "got it")
		require.NoError(t, err)
		require.False(t, la.Reconciled, "RECEIVED is no completion")
		require.NotNil(t, la.Entry)
		require.Equal(t, store.OpInProgress, la.Entry.Status)

		la, err = mp.RecordLateAck(ctx, "m1", stFulfilled, 0, "r1")
		require.NoError(t, err)
		require.True(t, la.Reconciled)
		require.Equal(t, stTimedOut, la.Record.State, "the late ACK does not change the message's state")
		require.Equal(t, "timeout", la.Record.Note)
		require.Equal(t, "m1", la.Record.MessageID)
		require.Equal(t, stTimedOut, getMessage(t, mp, "m1").State)
		e := *la.Entry
		require.Equal(t, store.OpTerminal, e.Status)
		require.Equal(t, "m1", e.OriginalMessageID, "the earliest successful completion")
		require.Equal(t, "m2", e.LatestMessageID)
		require.Equal(t, 2, e.Attempts)
		require.Equal(t, stFulfilled, e.TerminalState)
		require.Equal(t, "r1", e.Result)
		requireRecent(t, e.CachedAt)
		require.Equal(t, e, entry(t, mp, "k"))

		// The retry times out too and its late completion arrives second: it does not win.
		advance(t, mp, "m2", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		require.Equal(t, e, entry(t, mp, "k"), "a terminal entry is not made retrying")
		la, err = mp.RecordLateAck(ctx, "m2", stFailed, commonpb.ErrorCode_INTERNAL_ERROR, "r2")
		require.NoError(t, err)
		require.False(t, la.Reconciled)
		require.Equal(t, e, *la.Entry)
		require.Equal(t, e, entry(t, mp, "k"))
		_, err = mp.Admit(ctx, dedupReq("m3", "bob", "k"))
		de := requireDedupError(t, err, false)
		require.Equal(t, "r1", de.Entry.Result, "further attempts get the earliest outcome")

		// A message not in TIMED_OUT is not reconciled.
		admitReq(t, mp, dedupReq("s1", "bob", "k2"))
		la, err = mp.RecordLateAck(ctx, "s1", stFulfilled, 0, "early")
		require.NoError(t, err)
		require.False(t, la.Reconciled)
		require.Equal(t, store.OpInProgress, entry(t, mp, "k2").Status)

		// Without a key there is no entry.
		admit(t, mp, "n1", "bob", 0, true)
		advance(t, mp, "n1", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		la, err = mp.RecordLateAck(ctx, "n1", stFulfilled, 0, "x")
		require.NoError(t, err)
		require.False(t, la.Reconciled)
		require.Nil(t, la.Entry)
		require.Equal(t, "n1", la.Record.MessageID)

		_, err = mp.RecordLateAck(ctx, "unknown", stFulfilled, 0, "")
		require.ErrorIs(t, err, store.ErrNotFound)
		admit(t, mp, "u1", "bob", 0, false)
		_, err = mp.RecordLateAck(ctx, "u1", stFulfilled, 0, "")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("ConcurrentLateAcksOneWins", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		admitReq(t, mp, dedupReq("a", "bob", "k"))
		advance(t, mp, "a", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		admitReq(t, mp, dedupReq("b", "bob", "k"))
		advance(t, mp, "b", stTimedOut, commonpb.ErrorCode_ACK_TIMEOUT, "")
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []string
			errs    []error
		)
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := []string{"a", "b"}[i%2]
				note := fmt.Sprintf("%s-%d", id, i)
				la, err := mp.RecordLateAck(ctx, id, stFulfilled, 0, note)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				} else if la.Reconciled {
					winners = append(winners, note)
				}
			}()
		}
		wg.Wait()
		require.Empty(t, errs)
		require.Len(t, winners, 1)
		require.Equal(t, winners[0], entry(t, mp, "k").Result)
	})
}

// runCancelUndelivered checks that only a row no stream has claimed can be cancelled (§11.1
// rule 2).
func runCancelUndelivered(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("CancelUndelivered", func(t *testing.T) {
		mp := newStore(t).Messages()
		ctx := t.Context()
		admit(t, mp, "m1", "bob", 0, true)
		admit(t, mp, "m2", "bob", 0, true)
		admit(t, mp, "m3", "bob", 0, false)
		require.Equal(t, []string{"m1"}, messageIDs(claim(t, mp, "bob", 1, time.Hour)))

		cancel := func(id string) bool {
			t.Helper()
			ok, err := mp.CancelUndelivered(ctx, id)
			require.NoError(t, err)
			return ok
		}
		require.False(t, cancel("m1"), "already handed to a stream")
		require.True(t, cancel("m2"))
		require.False(t, cancel("m2"), "already cancelled")
		require.True(t, cancel("m3"), "untracked rows too")
		require.False(t, cancel("unknown"))
		require.Equal(t, 1, depth(t, mp, "bob"))
		require.NoError(t, mp.ReleaseLeases(ctx, "bob"))
		require.Equal(t, []string{"m1"}, messageIDs(claim(t, mp, "bob", 10, time.Hour)))
		require.False(t, cancel("m1"), "released but delivered before")
		require.Equal(t, stSent, getMessage(t, mp, "m2").State, "the record is the caller's to advance")
	})
}
