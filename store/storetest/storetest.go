// Package storetest is the one conformance suite for store.Store implementations. Every
// implementation's tests call Run; a promise made in a doc comment of package store is tested
// here, so the memory and postgres stores cannot drift apart. A run<Domain> function is the
// list of its domain's subtests, read top to bottom; some are long because the list is.
package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
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
	t.Run("HandOver", func(t *testing.T) { runHandOver(t, newStore) })
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
	t.Run("Backlog", func(t *testing.T) { runBacklog(t, newStore) })
	t.Run("Retention", func(t *testing.T) { runRetention(t, newStore) })
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

const (
	stSent      = commonpb.EnvelopeState_ENVELOPE_STATE_SENT
	stReceived  = commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED
	stFulfilled = commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED
	stRejected  = commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED
	stFailed    = commonpb.EnvelopeState_ENVELOPE_STATE_FAILED
	stTimedOut  = commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT
)

func admit(t *testing.T, mp store.MessagePlane, messageID, recipient string, capacity int, track bool) int64 {
	t.Helper()
	seq, err := mp.Admit(t.Context(), store.AdmitRequest{
		Envelope: Envelope(messageID), RecipientID: recipient, Capacity: capacity, Track: track,
	})
	require.NoError(t, err, "admit %s to %s", messageID, recipient)
	require.Positive(t, seq)
	return seq
}

func admitReq(t *testing.T, mp store.MessagePlane, req store.AdmitRequest) int64 {
	t.Helper()
	seq, err := mp.Admit(t.Context(), req)
	require.NoError(t, err, "admit %s", req.Envelope.GetMessageId())
	require.Positive(t, seq)
	return seq
}

// dedupReq is a tracked admission under alice's idempotency key.
func dedupReq(id, recipient, key string) store.AdmitRequest {
	return store.AdmitRequest{Envelope: Envelope(id), RecipientID: recipient, Track: true,
		Dedup: &store.Dedup{ProducerID: "alice", Key: key}}
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

func advance(t *testing.T, mp store.MessagePlane, id string, to commonpb.EnvelopeState, code commonpb.ErrorCode, note string) store.MessageRecord {
	t.Helper()
	rec, applied, err := mp.Advance(t.Context(), store.Transition{MessageID: id, To: to, ErrorCode: code, Note: note}, always)
	require.NoError(t, err)
	require.True(t, applied, "advance %s to %s", id, to)
	return rec
}

func entry(t *testing.T, mp store.MessagePlane, key string) store.IdempotencyEntry {
	t.Helper()
	e, err := mp.Idempotency(t.Context(), "alice", key, time.Hour)
	require.NoError(t, err, "idempotency entry %s", key)
	return e
}

func getMessage(t *testing.T, mp store.MessagePlane, id string) store.MessageRecord {
	t.Helper()
	rec, err := mp.GetMessage(t.Context(), id)
	require.NoError(t, err)
	return rec
}

func requireDedupError(t *testing.T, err error, inProgress bool) *store.DedupError {
	t.Helper()
	var de *store.DedupError
	require.ErrorAs(t, err, &de)
	require.Equal(t, inProgress, de.InProgress)
	return de
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

func requireSameTime(t *testing.T, want, got time.Time, what string) {
	t.Helper()
	require.True(t, want.Equal(got), "%s %v, want %v", what, got, want)
	require.Equal(t, time.UTC, got.Location(), "%s is in UTC", what)
}
