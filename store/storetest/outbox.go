package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// This file tests the Outbox: entries to Temporal written with the state they report, leased
// to their writer, claimed by relays, retried and completed.

// longLease keeps an entry from being claimable for the whole test.
const longLease = time.Hour

func outboxEntry(id string) store.OutboxEntry {
	return store.OutboxEntry{ID: id, Kind: "test.signal", WorkflowID: "wf/" + id, Payload: []byte(`{"id":"` + id + `"}`)}
}

func outboxIDs(hs []store.OutboxEntry) []string {
	ids := make([]string, len(hs))
	for i, h := range hs {
		ids[i] = h.ID
	}
	return ids
}

func runOutbox(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("LeasedToTheWriterThenClaimedOnce", func(t *testing.T) {
		ctx := t.Context()
		ob := newStore(t).Outbox()
		require.NoError(t, ob.Add(ctx, []store.OutboxEntry{outboxEntry("held")}, longLease))
		require.NoError(t, ob.Add(ctx, []store.OutboxEntry{outboxEntry("h1"), outboxEntry("h2")}, 0))
		got, err := ob.Claim(ctx, longLease, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"h1", "h2"}, outboxIDs(got), "only entries whose lease passed, oldest first")
		require.Equal(t, "test.signal", got[0].Kind)
		require.Equal(t, "wf/h1", got[0].WorkflowID)
		require.JSONEq(t, `{"id":"h1"}`, string(got[0].Payload))
		require.False(t, got[0].CreatedAt.IsZero())
		again, err := ob.Claim(ctx, longLease, 10)
		require.NoError(t, err)
		require.Empty(t, again, "a claim leases what it returns")
		pending, err := ob.Pending(ctx, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"held", "h1", "h2"}, outboxIDs(pending), "pending lists leased entries too")
	})
	t.Run("RetryCountsAndBacksOff", func(t *testing.T) {
		ctx := t.Context()
		ob := newStore(t).Outbox()
		require.NoError(t, ob.Add(ctx, []store.OutboxEntry{outboxEntry("r")}, 0))
		require.NoError(t, ob.Retry(ctx, "r", longLease, "temporal unreachable"))
		got, err := ob.Claim(ctx, longLease, 10)
		require.NoError(t, err)
		require.Empty(t, got, "a retry waits out its delay")
		require.NoError(t, ob.Retry(ctx, "r", 0, "still unreachable"))
		got, err = ob.Claim(ctx, longLease, 10)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, 2, got[0].Attempts)
		require.Equal(t, "still unreachable", got[0].LastError)
		require.NoError(t, ob.Retry(ctx, "unknown", 0, "x"), "an unknown id is ignored")
	})
	t.Run("CompleteRemoves", func(t *testing.T) {
		ctx := t.Context()
		ob := newStore(t).Outbox()
		require.NoError(t, ob.Add(ctx, []store.OutboxEntry{outboxEntry("c1"), outboxEntry("c2"), outboxEntry("c1")}, 0))
		require.NoError(t, ob.Complete(ctx, []string{"c1", "unknown"}))
		pending, err := ob.Pending(ctx, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"c2"}, outboxIDs(pending), "a repeated id is stored once; completed ones are gone")
	})
	t.Run("ConcurrentRelaysClaimDisjointly", func(t *testing.T) {
		ctx := t.Context()
		ob := newStore(t).Outbox()
		var hs []store.OutboxEntry
		for i := range 40 {
			hs = append(hs, outboxEntry(fmt.Sprintf("c%02d", i)))
		}
		require.NoError(t, ob.Add(ctx, hs, 0))
		var (
			mu   sync.Mutex
			seen = map[string]int{}
			wg   sync.WaitGroup
		)
		for range 4 {
			wg.Go(func() {
				for {
					got, err := ob.Claim(ctx, longLease, 3)
					if err != nil || len(got) == 0 {
						return
					}
					mu.Lock()
					for _, h := range got {
						seen[h.ID]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.Len(t, seen, 40)
		for id, n := range seen {
			require.Equal(t, 1, n, "%s claimed once", id)
		}
	})
	t.Run("WrittenWithAnAppliedStepOnly", func(t *testing.T) {
		ctx := t.Context()
		s := newStore(t)
		mp, ob := s.Messages(), s.Outbox()
		admit(t, mp, "m-step", "bob", 0, true)
		h := outboxEntry("with-step")
		plan := func(rec store.MessageRecord) (*store.Step, error) {
			if rec.State != commonpb.EnvelopeState_ENVELOPE_STATE_SENT {
				return nil, nil
			}
			return &store.Step{To: commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, Outbox: &h}, nil
		}
		res, err := mp.AdvanceWith(ctx, store.StepRequest{MessageID: "m-step", Plan: plan})
		require.NoError(t, err)
		require.True(t, res.Applied)
		res, err = mp.AdvanceWith(ctx, store.StepRequest{MessageID: "m-step", Plan: plan})
		require.NoError(t, err)
		require.False(t, res.Applied)
		pending, err := ob.Pending(ctx, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"with-step"}, outboxIDs(pending), "written once, with the step that applied")
		got, err := ob.Claim(ctx, longLease, 10)
		require.NoError(t, err)
		require.Empty(t, got, "leased to the writer for its in-line attempt")

		// A step that fails (its follow-up's message_id is taken) writes no entry either.
		admit(t, mp, "m-dup", "bob", 0, true)
		admit(t, mp, "taken", "alice", 0, false)
		h2 := outboxEntry("with-failed-step")
		_, err = mp.AdvanceWith(ctx, store.StepRequest{MessageID: "m-dup", Plan: func(store.MessageRecord) (*store.Step, error) {
			return &store.Step{To: commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, FollowUp: followUp("taken"), Outbox: &h2}, nil
		}})
		require.ErrorIs(t, err, store.ErrDuplicateMessage)
		pending, err = ob.Pending(ctx, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"with-step"}, outboxIDs(pending))
	})
	t.Run("WrittenWithAnAdmissionOnly", func(t *testing.T) {
		ctx := t.Context()
		s := newStore(t)
		mp, ob := s.Messages(), s.Outbox()
		pending := func() []string {
			t.Helper()
			hs, err := ob.Pending(ctx, 10)
			require.NoError(t, err)
			return outboxIDs(hs)
		}
		withOutbox := func(req store.AdmitRequest, ids ...string) store.AdmitRequest {
			for _, id := range ids {
				req.Outbox = append(req.Outbox, outboxEntry(id))
			}
			return req
		}
		// Admitted, with and without a capacity: the entries are written, in order, leased.
		admitReq(t, mp, withOutbox(store.AdmitRequest{Envelope: Envelope("ev-1"), RecipientID: "bob", Track: true}, "ev-1-a", "ev-1-b"))
		admitReq(t, mp, withOutbox(store.AdmitRequest{Envelope: Envelope("ev-2"), RecipientID: "bob", Track: true, Capacity: 2}, "ev-2-a"))
		require.Equal(t, []string{"ev-1-a", "ev-1-b", "ev-2-a"}, pending(), "written with the admissions, in order")
		got, err := ob.Claim(ctx, longLease, 10)
		require.NoError(t, err)
		require.Empty(t, got, "leased to the admitting frontend for its in-line attempt")
		h, err := ob.Pending(ctx, 1)
		require.NoError(t, err)
		require.JSONEq(t, `{"id":"ev-1-a"}`, string(h[0].Payload))
		require.Equal(t, "wf/ev-1-a", h[0].WorkflowID)

		// Refused admissions write nothing: a full buffer, a duplicate message_id, an operation
		// the idempotency cache answers.
		_, err = mp.Admit(ctx, withOutbox(store.AdmitRequest{Envelope: Envelope("ev-full"), RecipientID: "bob", Track: true, Capacity: 1}, "ev-full-a"))
		require.ErrorIs(t, err, store.ErrBufferFull)
		_, err = mp.Admit(ctx, withOutbox(store.AdmitRequest{Envelope: Envelope("ev-1"), RecipientID: "carol", Track: true}, "ev-dup-a"))
		require.ErrorIs(t, err, store.ErrDuplicateMessage)
		admitReq(t, mp, dedupReq("ev-k1", "carol", "ev-key"))
		_, err = mp.Admit(ctx, withOutbox(dedupReq("ev-k2", "carol", "ev-key"), "ev-cached-a"))
		_ = requireDedupError(t, err, true)
		require.Equal(t, []string{"ev-1-a", "ev-1-b", "ev-2-a"}, pending(), "no admission, no entry")
	})
	t.Run("WrittenWithAConfirmedStep", func(t *testing.T) {
		ctx := t.Context()
		s := newStore(t)
		mp, ob := s.Messages(), s.Outbox()
		seq := admit(t, mp, "m-conf", "bob", 0, true)
		claim(t, mp, "bob", 10, time.Minute)
		h := outboxEntry("with-confirm")
		res, err := mp.ConfirmAndAdvance(ctx, store.ConfirmRequest{AgentID: "bob", Seq: seq, MessageID: "m-conf",
			Plan: func(store.MessageRecord) (*store.Step, error) {
				return &store.Step{To: commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, Outbox: &h}, nil
			}})
		require.NoError(t, err)
		require.True(t, res.Confirmed)
		require.True(t, res.Applied)
		pending, err := ob.Pending(ctx, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"with-confirm"}, outboxIDs(pending))
	})
	t.Run("WrittenWithARegistration", func(t *testing.T) {
		ctx := t.Context()
		s := newStore(t)
		desc := &registrypb.AgentDescriptor{AgentId: "reg-1", Name: "reg"}
		require.NoError(t, s.Registry().PutAgent(ctx, store.AgentRecord{Descriptor: desc}, outboxEntry("start-reg-1")))
		_, err := s.Registry().GetAgent(ctx, "reg-1")
		require.NoError(t, err)
		pending, err := s.Outbox().Pending(ctx, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"start-reg-1"}, outboxIDs(pending))
		got, err := s.Outbox().Claim(ctx, longLease, 10)
		require.NoError(t, err)
		require.Empty(t, got, "leased to the registering frontend for its in-line attempt")
	})
	t.Run("WrittenWithADeregistration", func(t *testing.T) {
		ctx := t.Context()
		s := newStore(t)
		desc := &registrypb.AgentDescriptor{AgentId: "dereg-1", Name: "dereg"}
		require.NoError(t, s.Registry().PutAgent(ctx, store.AgentRecord{Descriptor: desc}))
		removed, err := s.Registry().DeleteAgent(ctx, "dereg-1", outboxEntry("end-dereg-1"))
		require.NoError(t, err)
		require.True(t, removed)
		removed, err = s.Registry().DeleteAgent(ctx, "dereg-1", outboxEntry("end-again"))
		require.NoError(t, err)
		require.False(t, removed)
		pending, err := s.Outbox().Pending(ctx, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"end-dereg-1"}, outboxIDs(pending), "only a removal writes its entry")
	})
	t.Run("WrittenWithAPendingResponse", func(t *testing.T) {
		ctx := t.Context()
		s := newStore(t)
		mp := s.Messages()
		pending := func() []string {
			t.Helper()
			hs, err := s.Outbox().Pending(ctx, 10)
			require.NoError(t, err)
			return outboxIDs(hs)
		}
		require.NoError(t, mp.AddPendingResponse(ctx, store.PendingResponse{
			RequestMessageID: "req-1", ProducerID: "alice", ResponderID: "bob", Timeout: time.Minute,
		}, outboxEntry("wait-req-1")))
		require.Equal(t, []string{"wait-req-1"}, pending(), "the wait is handed off with the entry")
		_, ok, err := mp.ResolvePendingResponse(ctx, "unknown", "resp-x", outboxEntry("end-unknown"))
		require.NoError(t, err)
		require.False(t, ok)
		require.Equal(t, []string{"wait-req-1"}, pending(), "no resolution, no entry")
		_, ok, err = mp.ResolvePendingResponse(ctx, "req-1", "resp-1", outboxEntry("end-req-1"))
		require.NoError(t, err)
		require.True(t, ok)
		_, ok, err = mp.ResolvePendingResponse(ctx, "req-1", "resp-1b", outboxEntry("end-again"))
		require.NoError(t, err)
		require.False(t, ok)
		require.Equal(t, []string{"wait-req-1", "end-req-1"}, pending(), "only the resolution writes its entry, after the wait's")
		got, err := s.Outbox().Claim(ctx, longLease, 10)
		require.NoError(t, err)
		require.Empty(t, got, "leased to the writer for its in-line attempt")
	})
}
