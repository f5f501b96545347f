package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// Trace contexts of the conformance rows (W3C traceparent values).
const (
	traceA = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traceB = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
)

// runTraceParent checks that a message's trace context (AdmitRequest.TraceParent) is kept
// with its record and its delivery row: claimed, handed over to an attached stream, and
// carried by a step's follow-up admission; a message admitted without one has none.
func runTraceParent(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("TraceParent", func(t *testing.T) {
		mp := newStore(t).Messages()
		admitReq(t, mp, store.AdmitRequest{Envelope: Envelope("m1"), RecipientID: "bob", Capacity: 10, Track: true, TraceParent: traceA})
		admit(t, mp, "m2", "bob", 10, true)
		ds := claim(t, mp, "bob", 10, time.Hour)
		require.Len(t, ds, 2)
		require.Equal(t, traceA, ds[0].TraceParent)
		require.Empty(t, ds[1].TraceParent)
		rec, err := mp.GetMessage(t.Context(), "m1")
		require.NoError(t, err)
		require.Equal(t, traceA, rec.TraceParent)
		rec2, err := mp.GetMessage(t.Context(), "m2")
		require.NoError(t, err)
		require.Empty(t, rec2.TraceParent)

		// A step's follow-up (an ACK forwarded to the producer) keeps its own trace context.
		f := &store.AdmitRequest{Envelope: Envelope("ack-m1"), RecipientID: "alice", TraceParent: traceB}
		res, err := mp.AdvanceWith(t.Context(), store.StepRequest{MessageID: "m1", Plan: func(store.MessageRecord) (*store.Step, error) {
			return &store.Step{To: commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED, FollowUp: f}, nil
		}})
		require.NoError(t, err)
		require.True(t, res.Applied)
		require.Equal(t, traceA, res.Record.TraceParent)
		fs := claim(t, mp, "alice", 10, time.Hour)
		require.Len(t, fs, 1)
		require.Equal(t, traceB, fs[0].TraceParent)

		// A row handed straight to an attached stream carries it too.
		in, detach := mp.Attach("carol", time.Hour)
		defer detach()
		admitReq(t, mp, store.AdmitRequest{Envelope: Envelope("m3"), RecipientID: "carol", Capacity: 10, Track: true, TraceParent: traceB})
		hs := takeHanded(t, in, "Admit")
		require.Len(t, hs, 1)
		require.Equal(t, traceB, hs[0].TraceParent)
	})
}
