package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// This file tests the planned steps of the message plane: AdvanceWith and ConfirmAndAdvance,
// a transition decided by the caller from the message's record and written together with its
// follow-up admission (and, for ConfirmAndAdvance, the delivery confirmation).

const stRead = commonpb.EnvelopeState_ENVELOPE_STATE_READ

// followUp is the control admission of a step: an ACK-like envelope for alice.
func followUp(id string) *store.AdmitRequest {
	env := Envelope(id)
	env.MessageType = commonpb.MessageType_ACKNOWLEDGEMENT
	env.ProducerId = "scheduler"
	return &store.AdmitRequest{Envelope: env, RecipientID: "alice", Lane: commonpb.CommunicationClass_PRIVILEGED}
}

// recorder is a PlanFunc that records the records it was called with and answers with next.
type recorder struct {
	mu   sync.Mutex
	seen []store.MessageRecord
	next func(call int, rec store.MessageRecord) (*store.Step, error)
}

func (r *recorder) plan(rec store.MessageRecord) (*store.Step, error) {
	r.mu.Lock()
	r.seen = append(r.seen, rec)
	call := len(r.seen)
	r.mu.Unlock()
	return r.next(call, rec)
}

func (r *recorder) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

// stepTo answers every call with the same step.
func stepTo(to commonpb.EnvelopeState, note string, f *store.AdmitRequest) *recorder {
	return &recorder{next: func(int, store.MessageRecord) (*store.Step, error) {
		return &store.Step{To: to, Note: note, FollowUp: f}, nil
	}}
}

func runSteps(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("AdvanceWith", func(t *testing.T) { runAdvanceWith(t, newStore) })
	t.Run("ConfirmAndAdvance", func(t *testing.T) { runConfirmAndAdvance(t, newStore) })
}

func runAdvanceWith(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("AppliesStepAndFollowUp", func(t *testing.T) {
		mp := newStore(t).Messages()
		admit(t, mp, "m1", "bob", 0, true)
		p := stepTo(stReceived, "got it", followUp("f1"))
		res, err := mp.AdvanceWith(t.Context(), store.StepRequest{MessageID: "m1", Plan: p.plan})
		require.NoError(t, err)
		require.True(t, res.Applied)
		require.Positive(t, res.FollowUpSeq)
		require.Equal(t, stReceived, res.Record.State)
		require.Equal(t, "got it", res.Record.Note)
		require.Equal(t, "m1", res.Record.MessageID)
		require.Equal(t, "bob", res.Record.RecipientID)
		requireProtoEqual(t, Envelope("m1"), res.Record.Envelope)

		// plan saw the record as stored.
		require.Equal(t, 1, p.calls())
		seen := p.seen[0]
		require.Equal(t, stSent, seen.State)
		require.Equal(t, "alice", seen.ProducerID)
		require.Equal(t, "bob", seen.RecipientID)
		require.Equal(t, "corr-m1", seen.CorrelationID)
		requireProtoEqual(t, Envelope("m1"), seen.Envelope)
		require.True(t, res.Record.CreatedAt.Equal(seen.CreatedAt))

		require.Equal(t, stReceived, getMessage(t, mp, "m1").State)
		ds := claim(t, mp, "alice", 10, time.Minute)
		require.Equal(t, []string{"f1"}, messageIDs(ds))
		require.Equal(t, res.FollowUpSeq, ds[0].Seq)
		requireProtoEqual(t, followUp("f1").Envelope, ds[0].Envelope)
		_, err = mp.GetMessage(t.Context(), "f1")
		require.ErrorIs(t, err, store.ErrNotFound, "the follow-up is not tracked")
		_, err = mp.Admit(t.Context(), store.AdmitRequest{Envelope: Envelope("f1"), RecipientID: "carol"})
		require.ErrorIs(t, err, store.ErrDuplicateMessage, "the follow-up's message_id is known")
	})

	t.Run("StepWithoutFollowUp", func(t *testing.T) {
		mp := newStore(t).Messages()
		admit(t, mp, "m1", "bob", 0, true)
		res, err := mp.AdvanceWith(t.Context(), store.StepRequest{MessageID: "m1", Plan: stepTo(stFailed, "broken", nil).plan})
		require.NoError(t, err)
		require.True(t, res.Applied)
		require.Zero(t, res.FollowUpSeq)
		require.Equal(t, stFailed, getMessage(t, mp, "m1").State)
		require.Equal(t, 0, depth(t, mp, "alice"))
	})

	t.Run("NoStepChangesNothing", func(t *testing.T) {
		mp := newStore(t).Messages()
		admit(t, mp, "m1", "bob", 0, true)
		for _, p := range []*recorder{
			{next: func(int, store.MessageRecord) (*store.Step, error) { return nil, nil }},
			stepTo(stSent, "to the current state", followUp("f1")),
		} {
			res, err := mp.AdvanceWith(t.Context(), store.StepRequest{MessageID: "m1", Plan: p.plan})
			require.NoError(t, err)
			require.False(t, res.Applied)
			require.Zero(t, res.FollowUpSeq)
			require.Equal(t, stSent, res.Record.State)
			require.Equal(t, "m1", res.Record.MessageID)
			require.Equal(t, 1, p.calls())
		}
		rec := getMessage(t, mp, "m1")
		require.Equal(t, stSent, rec.State)
		require.Empty(t, rec.Note)
		require.Equal(t, 0, depth(t, mp, "alice"), "no follow-up without a transition")
	})

	t.Run("UnknownOrUntracked", func(t *testing.T) {
		mp := newStore(t).Messages()
		admit(t, mp, "ctl", "bob", 0, false)
		for _, id := range []string{"nope", "ctl"} {
			p := stepTo(stReceived, "", nil)
			_, err := mp.AdvanceWith(t.Context(), store.StepRequest{MessageID: id, Plan: p.plan})
			require.ErrorIs(t, err, store.ErrNotFound, id)
			require.Zero(t, p.calls(), "plan is not called for %s", id)
		}
	})

	t.Run("PlanErrorChangesNothing", func(t *testing.T) {
		mp := newStore(t).Messages()
		admit(t, mp, "m1", "bob", 0, true)
		boom := errors.New("registry down")
		_, err := mp.AdvanceWith(t.Context(), store.StepRequest{MessageID: "m1", Plan: func(store.MessageRecord) (*store.Step, error) { return nil, boom }})
		require.ErrorIs(t, err, boom)
		require.Equal(t, stSent, getMessage(t, mp, "m1").State)
	})

	t.Run("InvalidFollowUp", func(t *testing.T) {
		mp := newStore(t).Messages()
		admit(t, mp, "m1", "bob", 0, true)
		for i, mutate := range []func(*store.AdmitRequest){
			func(r *store.AdmitRequest) { r.Track = true },
			func(r *store.AdmitRequest) { r.Capacity = 5 },
			func(r *store.AdmitRequest) { r.Dedup = &store.Dedup{ProducerID: "scheduler", Key: "k"} },
			func(r *store.AdmitRequest) { r.RecipientID = "" },
			func(r *store.AdmitRequest) { r.Envelope.MessageId = "" },
		} {
			f := followUp(fmt.Sprintf("f%d", i))
			mutate(f)
			_, err := mp.AdvanceWith(t.Context(), store.StepRequest{MessageID: "m1", Plan: stepTo(stReceived, "", f).plan})
			require.ErrorIs(t, err, store.ErrInvalidFollowUp, "case %d", i)
		}
		require.Equal(t, stSent, getMessage(t, mp, "m1").State)
		require.Equal(t, 0, depth(t, mp, "alice"))
	})

	t.Run("DuplicateFollowUpChangesNothing", func(t *testing.T) {
		mp := newStore(t).Messages()
		admit(t, mp, "m1", "bob", 0, true)
		admit(t, mp, "taken", "carol", 0, false)
		_, err := mp.AdvanceWith(t.Context(), store.StepRequest{MessageID: "m1", Plan: stepTo(stReceived, "", followUp("taken")).plan})
		require.ErrorIs(t, err, store.ErrDuplicateMessage)
		require.Equal(t, stSent, getMessage(t, mp, "m1").State, "the transition is undone with the follow-up")
		require.Equal(t, 0, depth(t, mp, "alice"))
	})

	t.Run("ReplansAfterConcurrentChange", func(t *testing.T) {
		mp := newStore(t).Messages()
		admit(t, mp, "m1", "bob", 0, true)
		p := &recorder{next: func(call int, rec store.MessageRecord) (*store.Step, error) {
			if call == 1 {
				// Someone else moves the message on between the plan and the write (plan runs
				// outside the store's locks, so it may use the store).
				advance(t, mp, "m1", stRead, 0, "read meanwhile")
				return &store.Step{To: stReceived, FollowUp: followUp("f1")}, nil
			}
			return &store.Step{To: stFulfilled, Note: "done", FollowUp: followUp("f2")}, nil
		}}
		res, err := mp.AdvanceWith(t.Context(), store.StepRequest{MessageID: "m1", Plan: p.plan})
		require.NoError(t, err)
		require.Equal(t, 2, p.calls())
		require.Equal(t, stSent, p.seen[0].State)
		require.Equal(t, stRead, p.seen[1].State, "plan runs again on the newer record")
		require.True(t, res.Applied)
		require.Equal(t, stFulfilled, res.Record.State)
		require.Equal(t, []string{"f2"}, messageIDs(claim(t, mp, "alice", 10, time.Minute)), "only the written step's follow-up")
	})

	t.Run("ConcurrentChangeEndingThePlan", func(t *testing.T) {
		mp := newStore(t).Messages()
		admit(t, mp, "m1", "bob", 0, true)
		p := &recorder{next: func(call int, rec store.MessageRecord) (*store.Step, error) {
			if call == 1 {
				advance(t, mp, "m1", stFulfilled, 0, "done meanwhile")
				return &store.Step{To: stReceived, FollowUp: followUp("f1")}, nil
			}
			return nil, nil // FULFILLED: nothing left to do
		}}
		res, err := mp.AdvanceWith(t.Context(), store.StepRequest{MessageID: "m1", Plan: p.plan})
		require.NoError(t, err)
		require.False(t, res.Applied)
		require.Equal(t, stFulfilled, res.Record.State, "the record plan last saw")
		require.Equal(t, "done meanwhile", res.Record.Note)
		require.Equal(t, 0, depth(t, mp, "alice"))
	})

	t.Run("MaintainsEntry", func(t *testing.T) {
		mp := newStore(t).Messages()
		admitReq(t, mp, dedupReq("m1", "bob", "t:a"))
		admitReq(t, mp, dedupReq("m2", "bob", "t:b"))
		_, err := mp.AdvanceWith(t.Context(), store.StepRequest{MessageID: "m1", Plan: stepTo(stTimedOut, "late", nil).plan})
		require.NoError(t, err)
		require.Equal(t, store.OpRetrying, entry(t, mp, "t:a").Status)

		_, err = mp.AdvanceWith(t.Context(), store.StepRequest{MessageID: "m2", Plan: stepTo(stReceived, "", followUp("f1")).plan})
		require.NoError(t, err)
		require.Equal(t, store.OpInProgress, entry(t, mp, "t:b").Status)
		_, err = mp.AdvanceWith(t.Context(), store.StepRequest{MessageID: "m2", Plan: func(store.MessageRecord) (*store.Step, error) {
			return &store.Step{To: stFulfilled, Note: "user alice created", FollowUp: followUp("f2")}, nil
		}})
		require.NoError(t, err)
		e := entry(t, mp, "t:b")
		require.Equal(t, store.OpTerminal, e.Status)
		require.Equal(t, "m2", e.OriginalMessageID)
		require.Equal(t, stFulfilled, e.TerminalState)
		require.Equal(t, "user alice created", e.Result)
		requireRecent(t, e.CachedAt)
	})

	t.Run("KnownRecord", func(t *testing.T) {
		mp := newStore(t).Messages()
		admit(t, mp, "m1", "bob", 0, true)
		known := getMessage(t, mp, "m1")
		p := stepTo(stReceived, "got it", followUp("f1"))
		res, err := mp.AdvanceWith(t.Context(), store.StepRequest{MessageID: "m1", Plan: p.plan, Known: &known})
		require.NoError(t, err)
		require.Equal(t, 1, p.calls())
		require.True(t, res.Applied)
		require.Equal(t, stReceived, res.Record.State)
		require.True(t, known.CreatedAt.Equal(res.Record.CreatedAt), "the result is the stored record")
		require.Positive(t, res.FollowUpSeq)

		// Out of date: the step planned on it is not written; Plan runs on the stored record.
		p = &recorder{next: func(call int, rec store.MessageRecord) (*store.Step, error) {
			return &store.Step{To: stFulfilled, Note: fmt.Sprintf("from %s", rec.State), FollowUp: followUp(fmt.Sprintf("g%d", call))}, nil
		}}
		res, err = mp.AdvanceWith(t.Context(), store.StepRequest{MessageID: "m1", Plan: p.plan, Known: &known})
		require.NoError(t, err)
		require.Equal(t, 2, p.calls())
		require.Equal(t, stSent, p.seen[0].State)
		require.Equal(t, stReceived, p.seen[1].State)
		require.True(t, res.Applied)
		require.Equal(t, "from ENVELOPE_STATE_RECEIVED", res.Record.Note)
		require.Equal(t, []string{"f1", "g2"}, messageIDs(claim(t, mp, "alice", 10, time.Minute)))
	})

	t.Run("KnownRecordIsOnlyAGuess", func(t *testing.T) {
		mp := newStore(t).Messages()
		admit(t, mp, "m1", "bob", 0, true)
		admit(t, mp, "ctl", "bob", 0, false)
		stale := getMessage(t, mp, "m1")
		stale.Note = "as the caller remembers it"

		// No step on the caller's record: the decision is taken again on the stored one.
		p := &recorder{next: func(int, store.MessageRecord) (*store.Step, error) { return nil, nil }}
		res, err := mp.AdvanceWith(t.Context(), store.StepRequest{MessageID: "m1", Plan: p.plan, Known: &stale})
		require.NoError(t, err)
		require.Equal(t, 2, p.calls())
		require.False(t, res.Applied)
		require.Empty(t, res.Record.Note, "the stored record, not the caller's")

		// A record of another message is ignored.
		other := stale
		other.MessageID = "m2"
		p = stepTo(stReceived, "", nil)
		res, err = mp.AdvanceWith(t.Context(), store.StepRequest{MessageID: "m1", Plan: p.plan, Known: &other})
		require.NoError(t, err)
		require.True(t, res.Applied)
		require.Equal(t, "m1", p.seen[0].MessageID)

		// A message that is not tracked, or unknown, is not found whatever the caller knew.
		for _, id := range []string{"ctl", "nope"} {
			k := stale
			k.MessageID = id
			_, err = mp.AdvanceWith(t.Context(), store.StepRequest{MessageID: id, Plan: stepTo(stReceived, "", followUp("f-"+id)).plan, Known: &k})
			require.ErrorIs(t, err, store.ErrNotFound, id)
		}
		require.Equal(t, 0, depth(t, mp, "alice"))
	})

	t.Run("ConcurrentStepsApplyOnce", func(t *testing.T) {
		mp := newStore(t).Messages()
		admit(t, mp, "m1", "bob", 0, true)
		const n = 8
		var (
			wg      sync.WaitGroup
			applied atomic.Int32
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := mp.AdvanceWith(t.Context(), store.StepRequest{MessageID: "m1", Plan: receiveFromSent(fmt.Sprintf("f%d", i))})
				if err != nil {
					t.Error(err)
					return
				}
				if res.Applied {
					applied.Add(1)
				}
			}()
		}
		wg.Wait()
		require.EqualValues(t, 1, applied.Load())
		require.Len(t, claim(t, mp, "alice", 100, time.Minute), 1, "one follow-up")
	})
}

func runConfirmAndAdvance(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("ControlTrafficIsConfirmedWithoutPlan", func(t *testing.T) {
		mp := newStore(t).Messages()
		seq := admit(t, mp, "ctl", "bob", 0, false)
		p := stepTo(stReceived, "", followUp("f1"))
		res, err := mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: "bob", Seq: seq, MessageID: "ctl", Plan: p.plan})
		require.NoError(t, err)
		require.True(t, res.Confirmed)
		require.False(t, res.Tracked)
		require.False(t, res.Applied)
		require.Equal(t, seq, res.Delivery.Seq)
		require.Equal(t, "bob", res.Delivery.AgentID)
		requireProtoEqual(t, Envelope("ctl"), res.Delivery.Envelope)
		require.Zero(t, p.calls())
		require.Equal(t, 0, depth(t, mp, "bob"))
		require.Equal(t, 0, depth(t, mp, "alice"))

		res, err = mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: "bob", Seq: seq, MessageID: "", Plan: p.plan})
		require.NoError(t, err)
		require.False(t, res.Confirmed, "already confirmed")
	})

	t.Run("ConfirmsAndAppliesStep", func(t *testing.T) {
		mp := newStore(t).Messages()
		seq := admit(t, mp, "m1", "bob", 10, true)
		ds := claim(t, mp, "bob", 10, time.Minute)
		require.Len(t, ds, 1)
		p := stepTo(stReceived, "delivery confirmed by bob", followUp("f1"))
		res, err := mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: "bob", Seq: seq, MessageID: "m1", Plan: p.plan})
		require.NoError(t, err)
		require.True(t, res.Confirmed)
		require.True(t, res.Tracked)
		require.True(t, res.Applied)
		require.Positive(t, res.FollowUpSeq)
		require.Equal(t, seq, res.Delivery.Seq)
		require.Equal(t, "bob", res.Delivery.AgentID)
		require.Equal(t, 1, res.Delivery.Attempts)
		require.True(t, ds[0].EnqueuedAt.Equal(res.Delivery.EnqueuedAt))
		requireProtoEqual(t, Envelope("m1"), res.Delivery.Envelope)
		require.Equal(t, stReceived, res.Record.State)
		require.Equal(t, "delivery confirmed by bob", res.Record.Note)

		require.Equal(t, 1, p.calls())
		require.Equal(t, stSent, p.seen[0].State)
		require.Equal(t, "alice", p.seen[0].ProducerID)
		require.Equal(t, "corr-m1", p.seen[0].CorrelationID)

		require.Equal(t, 0, depth(t, mp, "bob"))
		require.NoError(t, mp.ReleaseLeases(t.Context(), "bob"))
		require.Empty(t, claim(t, mp, "bob", 10, time.Minute), "confirmed rows are never redelivered")
		require.Equal(t, stReceived, getMessage(t, mp, "m1").State)
		fs := claim(t, mp, "alice", 10, time.Minute)
		require.Equal(t, []string{"f1"}, messageIDs(fs))
		require.Equal(t, res.FollowUpSeq, fs[0].Seq)
	})

	t.Run("NoStepConfirmsOnly", func(t *testing.T) {
		mp := newStore(t).Messages()
		seq := admit(t, mp, "m1", "bob", 0, true)
		res, err := mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: "bob", Seq: seq, MessageID: "", Plan: func(store.MessageRecord) (*store.Step, error) { return nil, nil }})
		require.NoError(t, err)
		require.True(t, res.Confirmed)
		require.True(t, res.Tracked)
		require.False(t, res.Applied)
		require.Equal(t, stSent, res.Record.State)
		require.Equal(t, "m1", res.Record.MessageID)
		require.Equal(t, 0, depth(t, mp, "bob"))
		require.Equal(t, stSent, getMessage(t, mp, "m1").State)

		// A nil plan is the same.
		seq2 := admit(t, mp, "m2", "bob", 0, true)
		res, err = mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: "bob", Seq: seq2, MessageID: "m2", Plan: nil})
		require.NoError(t, err)
		require.True(t, res.Confirmed)
		require.False(t, res.Applied)
	})

	t.Run("NotConfirmable", func(t *testing.T) {
		mp := newStore(t).Messages()
		seq := admit(t, mp, "m1", "bob", 0, true)
		p := stepTo(stReceived, "", followUp("f1"))
		for _, c := range []struct {
			agent string
			seq   int64
			id    string
		}{
			{"bob", seq + 100, ""}, // unknown seq
			{"carol", seq, ""},     // another agent's row
			{"bob", seq, "m2"},     // mismatched message_id
			{"bob", 0, ""},         // no seq
		} {
			res, err := mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: c.agent, Seq: c.seq, MessageID: c.id, Plan: p.plan})
			require.NoError(t, err)
			require.False(t, res.Confirmed, "%+v", c)
		}
		require.Zero(t, p.calls())
		require.Equal(t, 1, depth(t, mp, "bob"))
		require.Equal(t, stSent, getMessage(t, mp, "m1").State)
		_, ok, err := mp.Confirm(t.Context(), "bob", seq, "m1")
		require.NoError(t, err)
		require.True(t, ok)
		res, err := mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: "bob", Seq: seq, MessageID: "m1", Plan: p.plan})
		require.NoError(t, err)
		require.False(t, res.Confirmed, "already confirmed")
		require.Zero(t, p.calls())
	})

	t.Run("PlanErrorLeavesRowUnconfirmed", func(t *testing.T) {
		mp := newStore(t).Messages()
		seq := admit(t, mp, "m1", "bob", 0, true)
		boom := errors.New("registry down")
		_, err := mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: "bob", Seq: seq, MessageID: "m1", Plan: func(store.MessageRecord) (*store.Step, error) { return nil, boom }})
		require.ErrorIs(t, err, boom)
		require.Equal(t, 1, depth(t, mp, "bob"))
		require.Equal(t, stSent, getMessage(t, mp, "m1").State)
	})

	t.Run("FailedFollowUpLeavesRowUnconfirmed", func(t *testing.T) {
		mp := newStore(t).Messages()
		seq := admit(t, mp, "m1", "bob", 0, true)
		admit(t, mp, "taken", "carol", 0, false)
		_, err := mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: "bob", Seq: seq, MessageID: "m1", Plan: stepTo(stReceived, "", followUp("taken")).plan})
		require.ErrorIs(t, err, store.ErrDuplicateMessage)
		invalid := followUp("f1")
		invalid.Track = true
		_, err = mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: "bob", Seq: seq, MessageID: "m1", Plan: stepTo(stReceived, "", invalid).plan})
		require.ErrorIs(t, err, store.ErrInvalidFollowUp)
		require.Equal(t, 1, depth(t, mp, "bob"), "all or nothing: the row stays unconfirmed")
		require.Equal(t, stSent, getMessage(t, mp, "m1").State)
		require.Equal(t, 0, depth(t, mp, "alice"))
	})

	t.Run("ReplansAfterConcurrentChange", func(t *testing.T) {
		mp := newStore(t).Messages()
		seq := admit(t, mp, "m1", "bob", 0, true)
		p := &recorder{next: func(call int, rec store.MessageRecord) (*store.Step, error) {
			if call == 1 {
				// The consumer's own ACK RECEIVED gets there first.
				advance(t, mp, "m1", stReceived, 0, "acked")
			}
			if rec.State != stSent {
				return nil, nil
			}
			return &store.Step{To: stReceived, FollowUp: followUp("f1")}, nil
		}}
		res, err := mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: "bob", Seq: seq, MessageID: "m1", Plan: p.plan})
		require.NoError(t, err)
		require.Equal(t, 2, p.calls())
		require.Equal(t, stReceived, p.seen[1].State)
		require.True(t, res.Confirmed)
		require.True(t, res.Tracked)
		require.False(t, res.Applied)
		require.Equal(t, stReceived, res.Record.State)
		require.Equal(t, "acked", res.Record.Note)
		require.Equal(t, 0, depth(t, mp, "bob"))
		require.Equal(t, 0, depth(t, mp, "alice"), "the first plan's follow-up is never written")
	})

	t.Run("ConfirmedDuringPlan", func(t *testing.T) {
		mp := newStore(t).Messages()
		seq := admit(t, mp, "m1", "bob", 0, true)
		p := &recorder{next: func(call int, rec store.MessageRecord) (*store.Step, error) {
			_, ok, err := mp.Confirm(t.Context(), "bob", seq, "")
			require.NoError(t, err)
			require.True(t, ok)
			return &store.Step{To: stReceived, FollowUp: followUp("f1")}, nil
		}}
		res, err := mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: "bob", Seq: seq, MessageID: "m1", Plan: p.plan})
		require.NoError(t, err)
		require.False(t, res.Confirmed, "the other confirmation got there first")
		require.Equal(t, stSent, getMessage(t, mp, "m1").State, "and the step is not written without the confirmation")
		require.Equal(t, 0, depth(t, mp, "alice"))
	})

	t.Run("MaintainsEntry", func(t *testing.T) {
		mp := newStore(t).Messages()
		seq := admitReq(t, mp, dedupReq("m1", "bob", "t:a"))
		res, err := mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: "bob", Seq: seq, MessageID: "m1", Plan: func(store.MessageRecord) (*store.Step, error) {
			return &store.Step{To: stRejected, ErrorCode: commonpb.ErrorCode_VALIDATION_ERROR, Note: "bad input"}, nil
		}})
		require.NoError(t, err)
		require.True(t, res.Applied)
		require.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, res.Record.ErrorCode)
		e := entry(t, mp, "t:a")
		require.Equal(t, store.OpTerminal, e.Status)
		require.Equal(t, stRejected, e.TerminalState)
		require.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, e.ErrorCode)
		require.Equal(t, "bad input", e.Result)
	})

	t.Run("KnownRecord", func(t *testing.T) {
		mp := newStore(t).Messages()
		seq := admit(t, mp, "m1", "bob", 0, true)
		ds := claim(t, mp, "bob", 10, time.Minute)
		known := getMessage(t, mp, "m1")
		p := stepTo(stReceived, "delivery confirmed by bob", followUp("f1"))
		res, err := mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: "bob", Seq: seq, MessageID: "m1", Plan: p.plan, Known: &known})
		require.NoError(t, err)
		require.Equal(t, 1, p.calls())
		require.True(t, res.Confirmed)
		require.True(t, res.Tracked)
		require.True(t, res.Applied)
		require.Equal(t, stReceived, res.Record.State)
		require.Equal(t, seq, res.Delivery.Seq)
		require.Equal(t, "bob", res.Delivery.AgentID)
		require.Equal(t, 1, res.Delivery.Attempts)
		require.True(t, ds[0].EnqueuedAt.Equal(res.Delivery.EnqueuedAt))
		requireProtoEqual(t, Envelope("m1"), res.Delivery.Envelope)
		require.Equal(t, 0, depth(t, mp, "bob"))
		require.Equal(t, []string{"f1"}, messageIDs(claim(t, mp, "alice", 10, time.Minute)))
	})

	t.Run("KnownRecordIsOnlyAGuess", func(t *testing.T) {
		mp := newStore(t).Messages()
		seq1 := admit(t, mp, "m1", "bob", 0, true)
		seq2 := admit(t, mp, "m2", "bob", 0, true)
		seqCtl := admit(t, mp, "ctl", "bob", 0, false)
		known := getMessage(t, mp, "m1")
		advance(t, mp, "m1", stRead, 0, "read already")
		receive := func(rec store.MessageRecord) (*store.Step, error) {
			if rec.State != stSent {
				return nil, nil
			}
			return &store.Step{To: stReceived, FollowUp: followUp("f-" + rec.MessageID)}, nil
		}

		// The row of another message: not confirmed, whatever the caller knew.
		res, err := mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: "bob", Seq: seq2, MessageID: "m1", Plan: receive, Known: &known})
		require.NoError(t, err)
		require.False(t, res.Confirmed)
		require.Equal(t, 3, depth(t, mp, "bob"), "no row was confirmed")

		// Out of date (m1 is READ): decided again on the stored record, confirmed only.
		res, err = mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: "bob", Seq: seq1, MessageID: "m1", Plan: receive, Known: &known})
		require.NoError(t, err)
		require.True(t, res.Confirmed)
		require.False(t, res.Applied)
		require.Equal(t, stRead, res.Record.State)
		require.Equal(t, "read already", res.Record.Note)

		// Control traffic the caller took for a tracked message: confirmed without a step.
		ctl := known
		ctl.MessageID = "ctl"
		ctl.State = stSent
		res, err = mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: "bob", Seq: seqCtl, MessageID: "ctl", Plan: receive, Known: &ctl})
		require.NoError(t, err)
		require.True(t, res.Confirmed)
		require.False(t, res.Tracked)
		require.Equal(t, seqCtl, res.Delivery.Seq)

		// A record of another message is ignored.
		res, err = mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: "bob", Seq: seq2, MessageID: "m2", Plan: receive, Known: &known})
		require.NoError(t, err)
		require.True(t, res.Confirmed)
		require.True(t, res.Applied)
		require.Equal(t, "m2", res.Record.MessageID)

		require.Equal(t, 0, depth(t, mp, "bob"))
		require.Equal(t, []string{"f-m2"}, messageIDs(claim(t, mp, "alice", 10, time.Minute)))
	})

	t.Run("ConcurrentConfirmationsOneWins", func(t *testing.T) {
		mp := newStore(t).Messages()
		seq := admit(t, mp, "m1", "bob", 0, true)
		const n = 8
		var (
			wg                 sync.WaitGroup
			confirmed, applied atomic.Int32
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := mp.ConfirmAndAdvance(t.Context(), store.ConfirmRequest{AgentID: "bob", Seq: seq, MessageID: "m1", Plan: receiveFromSent(fmt.Sprintf("f%d", i))})
				if err != nil {
					t.Error(err)
					return
				}
				if res.Confirmed {
					confirmed.Add(1)
				}
				if res.Applied {
					applied.Add(1)
				}
			}()
		}
		wg.Wait()
		require.EqualValues(t, 1, confirmed.Load())
		require.EqualValues(t, 1, applied.Load())
		require.Len(t, claim(t, mp, "alice", 100, time.Minute), 1, "one follow-up")
		require.Equal(t, stReceived, getMessage(t, mp, "m1").State)
	})
}

// receiveFromSent plans SENT → RECEIVED with a follow-up named followUpID, and nothing from
// any other state: legal only from SENT, as in the router.
func receiveFromSent(followUpID string) store.PlanFunc {
	return func(rec store.MessageRecord) (*store.Step, error) {
		if rec.State != stSent {
			return nil, nil
		}
		return &store.Step{To: stReceived, FollowUp: followUp(followUpID)}, nil
	}
}
