package router

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// TestAdmissionAuditedByTheStore: a message's message.admitted row is written by the store in
// the admission's transaction (§19), not by the audit sink after it — here a sink that
// writes no rows at all — for SendMessage's admissions and the scheduler's CONTROL messages
// alike; a refused admission writes none, and a producer's retry adds none.
func TestAdmissionAuditedByTheStore(t *testing.T) {
	st := memory.New()
	t.Cleanup(st.Close)
	sweepFixture(t, st, time.Minute) // registers p and c
	r := New(st, Config{AckTimeout: time.Minute, BufferCapacity: 1}, audit.New(slog.New(slog.DiscardHandler), nil))
	admitted := func(id string) []store.Event {
		es, err := st.Audit().List(t.Context(), store.AuditFilter{MessageID: id, TypePrefix: "message.admitted"})
		require.NoError(t, err)
		return es
	}
	env := &commonpb.Envelope{MessageId: uuid.NewString(), ProducerId: "p", CorrelationId: uuid.NewString(), SequenceNumber: 1,
		MessageType: commonpb.MessageType_DATA, ContentType: "application/json", Payload: []byte(`{}`), ContentLength: 2}
	for range 2 { // the second send is the producer's retry
		perr, err := r.Send(t.Context(), env, "c")
		require.NoError(t, err)
		require.Nil(t, perr)
	}
	es := admitted(env.GetMessageId())
	require.Len(t, es, 1, "one row, written with the admission")
	require.Equal(t, "p", es[0].Actor)
	require.Equal(t, "c", es[0].AgentID)
	require.Equal(t, env.GetCorrelationId(), es[0].CorrelationID)
	var d map[string]any
	require.NoError(t, json.Unmarshal(es[0].Details, &d))
	require.Equal(t, "SENT", d["state"])
	require.Equal(t, "DATA", d["message_type"])
	require.Equal(t, float64(1), d["seq"], "the store adds the delivery's seq")

	full := &commonpb.Envelope{MessageId: uuid.NewString(), ProducerId: "p", CorrelationId: uuid.NewString(), SequenceNumber: 2,
		MessageType: commonpb.MessageType_DATA, ContentType: "application/json", Payload: []byte(`{"n":2}`), ContentLength: 7}
	perr, err := r.Send(t.Context(), full, "c")
	require.NoError(t, err)
	require.NotNil(t, perr, "the buffer of one is full")
	require.Empty(t, admitted(full.GetMessageId()), "a refused message has no admission row")

	ctl, cerr := protocol.NewControlEnvelope(uuid.NewString(), protocol.SchedulerID, protocol.Control{Type: protocol.ControlRun, TaskID: "t1"})
	require.NoError(t, cerr)
	require.NoError(t, r.SendControl(t.Context(), "c", ctl))
	es = admitted(ctl.GetMessageId())
	require.Len(t, es, 1)
	require.Equal(t, protocol.SchedulerID, es[0].Actor)
}
