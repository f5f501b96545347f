package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/store"
)

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

// runHITL checks the HITL invocation projection (§15), one concern per function; every subtest
// stays a direct child of HITL.
func runHITL(t *testing.T, newStore func(t *testing.T) store.Store) {
	runHITLPut(t, newStore)
	runHITLRePut(t, newStore)
	runHITLComplete(t, newStore)
	runHITLListFilters(t, newStore)
	runHITLListOrder(t, newStore)
	runHITLConcurrentCompletes(t, newStore)
}

// runHITLPut checks that a recorded invocation reads back whole and that invalid ones are
// refused.
func runHITLPut(t *testing.T, newStore func(t *testing.T) store.Store) {
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
}

// runHITLRePut checks recording an invocation again: it replaces a pending one and is refused
// once decided.
func runHITLRePut(t *testing.T, newStore func(t *testing.T) store.Store) {
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
}

// runHITLComplete checks CompleteInvocation: the outcome is stored once, a same-bytes retry is
// a no-op.
func runHITLComplete(t *testing.T, newStore func(t *testing.T) store.Store) {
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
}

// runHITLListFilters checks ListInvocations' filters.
func runHITLListFilters(t *testing.T, newStore func(t *testing.T) store.Store) {
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
}

// runHITLListOrder checks ListInvocations' order and its limits.
func runHITLListOrder(t *testing.T, newStore func(t *testing.T) store.Store) {
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
}

// runHITLConcurrentCompletes checks racing completions: one outcome wins, identical ones all
// succeed.
func runHITLConcurrentCompletes(t *testing.T, newStore func(t *testing.T) store.Store) {
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
