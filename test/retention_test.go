package test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/storetest"
)

// TestRetention: a running server given short retentions prunes each kind of finished record
// once it is older than its retention — audit events, dead letters, finished messages, ended
// handoffs and their fences, decided HITL invocations, ended tool calls — keeps the newer ones
// and every unfinished one whatever its age, and counts what went in
// sw4rm_retention_pruned_total.
func TestRetention(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) { testRetention(t, kind) })
	}
}

func testRetention(t *testing.T, kind string) {
	const keep = time.Second
	cfg := newConfig(t, kind)
	cfg.AuditRetention, cfg.MessageRetention, cfg.HandoffRetention, cfg.HITLRetention, cfg.ToolCallRetention = keep, keep, keep, keep, keep
	cfg.DLQRetention, cfg.DedupWindow, cfg.StreamRetention = keep, keep, keep
	sys := start(t, cfg)
	st := sys.app.Store()
	ctx := t.Context()
	id := func(s string) string { return uniq(t, s) }
	var (
		auditOld, auditNew  = id("audit-old"), id("audit-new")
		msgDone, msgSent    = id("msg-done"), id("msg-sent")
		msgAwaiting, msgNew = id("msg-awaiting"), id("msg-new")
		dlqOld, dlqNew      = id("dlq-old"), id("dlq-new")
		hoDone, hoOpen      = id("ho-done"), id("ho-open")
		hoNew               = id("ho-new")
		corrDone, corrOpen  = id("corr-done"), id("corr-open")
		hitlDone, hitlOpen  = id("hitl-done"), id("hitl-open")
		hitlNew             = id("hitl-new")
		callDone, callOpen  = id("call-done"), id("call-open")
		callNew, bob        = id("call-new"), id("bob")
		appendEvent         = func(typ string) {
			_, err := st.Audit().Append(ctx, store.Event{Type: typ, Actor: "test"})
			require.NoError(t, err)
		}
		admitDone = func(messageID string, to commonpb.EnvelopeState) {
			seq, err := st.Messages().Admit(ctx, store.AdmitRequest{Envelope: storetest.Envelope(messageID), RecipientID: bob, Track: true})
			require.NoError(t, err)
			_, ok, err := st.Messages().Confirm(ctx, bob, seq, messageID)
			require.NoError(t, err)
			require.True(t, ok)
			if to != 0 {
				_, applied, err := st.Messages().Advance(ctx, store.Transition{MessageID: messageID, To: to}, func(_, _ commonpb.EnvelopeState) bool { return true })
				require.NoError(t, err)
				require.True(t, applied)
			}
		}
		handoff = func(requestID, correlation string, status handoffpb.HandoffStatus) {
			_, err := st.Handoffs().CreateHandoff(ctx, store.HandoffRecord{RequestID: requestID, Correlation: correlation, From: "alice",
				Target: bob, Status: handoffpb.HandoffStatus_PENDING})
			require.NoError(t, err)
			if status != handoffpb.HandoffStatus_PENDING {
				require.NoError(t, st.Handoffs().UpdateHandoff(ctx, requestID, status, bob, bob, ""))
			}
		}
		hitlRec = func(invocationID string) store.HITLRecord {
			return store.HITLRecord{InvocationID: invocationID, WorkflowID: "hitl/" + invocationID, ReasonType: "SECURITY_APPROVAL",
				Invocation: []byte(`{}`), CreatedAt: time.Now()}
		}
		call = func(callID string, finish bool) {
			_, _, err := st.ToolCalls().CreateCall(ctx, store.ToolCallRecord{CallID: callID, Caller: "agent:" + bob, ProviderID: "builtin", ToolName: "echo"})
			require.NoError(t, err)
			if finish {
				_, _, err = st.ToolCalls().Finish(ctx, callID, "text/plain", []byte("ok"), nil)
				require.NoError(t, err)
			}
		}
		deadLetter = func(messageID string) {
			_, err := st.DLQ().PutDeadLetter(ctx, store.DLQEntry{MessageID: messageID, Envelope: storetest.Envelope(messageID), RecipientID: bob,
				Class: store.DLQRetriesExhausted, ErrorCode: commonpb.ErrorCode_ACK_TIMEOUT, FailedAt: time.Now()})
			require.NoError(t, err)
		}
	)

	// The old records, finished and not.
	appendEvent(auditOld)
	admitDone(msgDone, commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED)
	_, err := st.Messages().Admit(ctx, store.AdmitRequest{Envelope: storetest.Envelope(msgSent), RecipientID: bob, Track: true})
	require.NoError(t, err) // never delivered: unfinished
	admitDone(msgAwaiting, commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED)
	require.NoError(t, st.Messages().AddPendingResponse(ctx, store.PendingResponse{RequestMessageID: msgAwaiting, ProducerID: "alice",
		ResponderID: bob, Attempt: 1, MaxAttempts: 1, Timeout: time.Hour, Deadline: time.Now().Add(time.Hour)}))
	deadLetter(dlqOld)
	handoff(hoDone, corrDone, handoffpb.HandoffStatus_COMPLETED)
	handoff(hoOpen, corrOpen, handoffpb.HandoffStatus_ACCEPTED)
	require.NoError(t, st.Handoffs().Fence(ctx, store.Fence{Correlation: corrDone, AgentID: "alice", RequestID: hoDone, NewOwner: bob}))
	require.NoError(t, st.Handoffs().Fence(ctx, store.Fence{Correlation: corrOpen, AgentID: "alice", RequestID: hoOpen, NewOwner: bob}))
	require.NoError(t, st.HITL().PutInvocation(ctx, hitlRec(hitlDone)))
	require.NoError(t, st.HITL().CompleteInvocation(ctx, hitlDone, []byte(`{"decision":"approve"}`), time.Now()))
	require.NoError(t, st.HITL().PutInvocation(ctx, hitlRec(hitlOpen)))
	call(callDone, true)
	call(callOpen, false)

	time.Sleep(keep + 500*time.Millisecond)
	// The newer ones.
	appendEvent(auditNew)
	admitDone(msgNew, commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED)
	deadLetter(dlqNew)
	handoff(hoNew, id("corr-new"), handoffpb.HandoffStatus_REJECTED)
	require.NoError(t, st.HITL().PutInvocation(ctx, hitlRec(hitlNew)))
	require.NoError(t, st.HITL().CompleteInvocation(ctx, hitlNew, []byte(`{"decision":"approve"}`), time.Now()))
	call(callNew, true)

	counts, err := sys.app.Router().RetainOnce(ctx)
	require.NoError(t, err)
	for _, k := range []string{"audit_events", "dead_letters", "messages", "handoffs", "handoff_fences", "hitl_invocations", "tool_calls"} {
		require.Positive(t, counts[k], "%s pruned: %v", k, counts)
	}

	// Audit events: the old one went, the newer one stays.
	evs, err := st.Audit().List(ctx, store.AuditFilter{TypePrefix: auditOld})
	require.NoError(t, err)
	require.Empty(t, evs)
	evs, err = st.Audit().List(ctx, store.AuditFilter{TypePrefix: auditNew})
	require.NoError(t, err)
	require.Len(t, evs, 1)
	// Messages.
	_, err = st.Messages().GetMessage(ctx, msgDone)
	require.ErrorIs(t, err, store.ErrNotFound)
	for _, m := range []string{msgSent, msgAwaiting, msgNew} {
		_, err := st.Messages().GetMessage(ctx, m)
		require.NoError(t, err, "%s stays", m)
	}
	// Dead letters.
	dls, err := st.DLQ().ListDeadLetters(ctx, store.DLQFilter{IncludeRequeued: true})
	require.NoError(t, err)
	var dlIDs []string
	for _, d := range dls {
		dlIDs = append(dlIDs, d.MessageID)
	}
	require.NotContains(t, dlIDs, dlqOld)
	require.Contains(t, dlIDs, dlqNew)
	// Handoffs and fences.
	_, err = st.Handoffs().GetHandoff(ctx, hoDone)
	require.ErrorIs(t, err, store.ErrNotFound)
	for _, h := range []string{hoOpen, hoNew} {
		_, err := st.Handoffs().GetHandoff(ctx, h)
		require.NoError(t, err, "%s stays", h)
	}
	_, fenced, err := st.Handoffs().Fenced(ctx, corrDone, "alice")
	require.NoError(t, err)
	require.False(t, fenced, "the ended handoff's fence went")
	_, fenced, err = st.Handoffs().Fenced(ctx, corrOpen, "alice")
	require.NoError(t, err)
	require.True(t, fenced, "the open handoff's fence stays")
	// HITL.
	_, err = st.HITL().GetInvocation(ctx, hitlDone)
	require.ErrorIs(t, err, store.ErrNotFound)
	for _, h := range []string{hitlOpen, hitlNew} {
		_, err := st.HITL().GetInvocation(ctx, h)
		require.NoError(t, err, "%s stays", h)
	}
	// Tool calls.
	_, err = st.ToolCalls().GetCall(ctx, callDone)
	require.ErrorIs(t, err, store.ErrNotFound)
	for _, c := range []string{callOpen, callNew} {
		_, err := st.ToolCalls().GetCall(ctx, c)
		require.NoError(t, err, "%s stays", c)
	}

	// The metric counts what went.
	s := scrape(t, sys)
	for k, n := range counts {
		v, ok := series(s, "sw4rm_retention_pruned_total{", `kind="`+k+`"`)
		require.True(t, ok, "sw4rm_retention_pruned_total{kind=%q} is served", k)
		require.GreaterOrEqual(t, v, float64(n), "%s: %s", k, strconv.Itoa(n))
	}
}
