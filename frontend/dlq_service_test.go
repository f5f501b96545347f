package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/dlqadminpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

const dlqTestToken = "s3cret-token"

// fakeRequeuer marks the entry requeued as "<message_id>-r", or returns err when set.
type fakeRequeuer struct {
	st store.Store

	mu    sync.Mutex
	err   error
	calls []int64
}

func (f *fakeRequeuer) Requeue(ctx context.Context, id int64) (string, error) {
	f.mu.Lock()
	f.calls = append(f.calls, id)
	err := f.err
	f.mu.Unlock()
	if err != nil {
		return "", err
	}
	e, err := f.st.DLQ().GetDeadLetter(ctx, id)
	if err != nil {
		return "", err
	}
	newID := e.MessageID + "-r"
	if err := f.st.DLQ().MarkRequeued(ctx, id, newID, time.Time{}); err != nil {
		return "", err
	}
	return newID, nil
}

func newDLQTestService(t *testing.T) (*dlqAdminService, store.Store, *fakeRequeuer) {
	t.Helper()
	st := memory.New()
	t.Cleanup(st.Close)
	log := slog.New(slog.DiscardHandler)
	s := &Server{store: st, sink: audit.New(log, st.Audit()), log: log, cfg: Config{HITLPolicy: hitl.Policy{
		Operators: []hitl.Operator{{Name: "olga", TokenSHA256: hitl.HashToken(dlqTestToken)}},
	}}}
	r := &fakeRequeuer{st: st}
	return &dlqAdminService{s: s, requeue: r}, st, r
}

func operatorCtx(t *testing.T, token string) context.Context {
	return metadata.NewIncomingContext(t.Context(), metadata.Pairs("authorization", "Bearer "+token, "sw4rm-client", "cli"))
}

func requireCode(t *testing.T, want codes.Code, err error) {
	t.Helper()
	require.Error(t, err)
	// The handlers return protocol errors; the error table turns them into statuses.
	require.Equal(t, want, toStatus(t.Context(), err).Code(), "error: %v", err)
}

// seedDLQ stores d0..d3 (failing a minute apart from base) and returns their ids.
func seedDLQ(t *testing.T, st store.Store, base time.Time) []int64 {
	t.Helper()
	seed := []struct {
		class     string
		code      commonpb.ErrorCode
		producer  string
		recipient string
	}{
		{store.DLQRetriesExhausted, commonpb.ErrorCode_ACK_TIMEOUT, "alice", "bob"},
		{store.DLQTTLExpired, commonpb.ErrorCode_TTL_EXPIRED, "alice", "carol"},
		{store.DLQPolicyViolation, commonpb.ErrorCode_OVERSIZE_PAYLOAD, "dave", "bob"},
		{store.DLQTerminalError, commonpb.ErrorCode_VALIDATION_ERROR, "dave", "carol"},
	}
	var ids []int64
	for i, x := range seed {
		msg := fmt.Sprintf("d%d", i)
		failed := base.Add(time.Duration(i) * time.Minute)
		env := &commonpb.Envelope{
			MessageId: msg, ProducerId: x.producer, CorrelationId: "corr-" + msg, ContentType: "application/json",
			Payload: []byte(`{"secret":"payload"}`), IdempotencyToken: "tok-" + msg,
		}
		e, err := st.DLQ().PutDeadLetter(t.Context(), store.DLQEntry{
			MessageID: msg, ProducerID: x.producer, RecipientID: x.recipient, CorrelationID: env.CorrelationId,
			IdempotencyToken: env.IdempotencyToken, ErrorCode: x.code, Class: x.class, Reason: "reason " + msg,
			Attempts: []store.DLQAttempt{
				{MessageID: msg + "-a0", At: failed.Add(-time.Minute), State: "TIMED_OUT", Reason: "ack_timeout"},
				{MessageID: msg, At: failed, State: "FAILED", Reason: "gave up"},
			},
			Envelope: env, PayloadSize: len(env.Payload), ContentType: env.ContentType, PayloadExcerpt: env.Payload[:10],
			FirstSeenAt: failed.Add(-time.Minute), FailedAt: failed,
		})
		require.NoError(t, err)
		ids = append(ids, e.ID)
	}
	return ids
}

func listMessages(t *testing.T, d *dlqAdminService, f *dlqadminpb.DeadLetterFilter) []string {
	t.Helper()
	resp, err := d.ListDeadLetters(operatorCtx(t, dlqTestToken), &dlqadminpb.ListDeadLettersRequest{Filter: f})
	require.NoError(t, err)
	var out []string
	for _, e := range resp.GetDeadLetters() {
		out = append(out, e.GetMessageId())
	}
	return out
}

func TestDLQAdminAuthentication(t *testing.T) {
	d, _, r := newDLQTestService(t)
	for name, ctx := range map[string]context.Context{
		"no token":  t.Context(),
		"bad token": operatorCtx(t, "wrong"),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := d.ListDeadLetters(ctx, &dlqadminpb.ListDeadLettersRequest{})
			requireCode(t, codes.Unauthenticated, err)
			_, err = d.Requeue(ctx, &dlqadminpb.RequeueRequest{Ids: []int64{1}})
			requireCode(t, codes.Unauthenticated, err)
			_, err = d.Export(ctx, &dlqadminpb.ExportRequest{})
			requireCode(t, codes.Unauthenticated, err)
			_, err = d.GetDeadLetter(ctx, &dlqadminpb.GetDeadLetterRequest{Id: 1})
			requireCode(t, codes.Unauthenticated, err)
		})
	}
	require.Empty(t, r.calls, "nothing was requeued")
}

func TestDLQAdminList(t *testing.T) {
	d, st, _ := newDLQTestService(t)
	base := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	ids := seedDLQ(t, st, base)
	require.NoError(t, st.DLQ().MarkRequeued(t.Context(), ids[3], "d3-r", base.Add(time.Hour)))

	require.Equal(t, []string{"d0", "d1", "d2"}, listMessages(t, d, nil))
	require.Equal(t, []string{"d0", "d1", "d2", "d3"}, listMessages(t, d, &dlqadminpb.DeadLetterFilter{IncludeRequeued: true}))
	require.Equal(t, []string{"d1", "d2"}, listMessages(t, d, &dlqadminpb.DeadLetterFilter{
		Since: timestamppb.New(base.Add(time.Minute)), Until: timestamppb.New(base.Add(3 * time.Minute)),
	}))
	require.Equal(t, []string{"d1"}, listMessages(t, d, &dlqadminpb.DeadLetterFilter{ErrorClass: "TTL-Expired"}))
	require.Equal(t, []string{"d2"}, listMessages(t, d, &dlqadminpb.DeadLetterFilter{ErrorCode: "oversize_payload"}))
	require.Equal(t, []string{"d0", "d2"}, listMessages(t, d, &dlqadminpb.DeadLetterFilter{Route: "bob"}))
	require.Equal(t, []string{"d2", "d3"}, listMessages(t, d, &dlqadminpb.DeadLetterFilter{Producer: "dave", IncludeRequeued: true}))
	require.Equal(t, []string{"d2"}, listMessages(t, d, &dlqadminpb.DeadLetterFilter{Limit: 1}))

	// Every field reaches the wire.
	resp, err := d.ListDeadLetters(operatorCtx(t, dlqTestToken), &dlqadminpb.ListDeadLettersRequest{
		Filter: &dlqadminpb.DeadLetterFilter{Producer: "dave", Route: "carol", IncludeRequeued: true},
	})
	require.NoError(t, err)
	require.Len(t, resp.GetDeadLetters(), 1)
	got := resp.GetDeadLetters()[0]
	require.Equal(t, ids[3], got.GetId())
	require.Equal(t, "d3", got.GetMessageId())
	require.Equal(t, "dave", got.GetProducerId())
	require.Equal(t, "carol", got.GetRoute())
	require.Equal(t, "corr-d3", got.GetCorrelationId())
	require.Equal(t, "tok-d3", got.GetIdempotencyToken())
	require.Equal(t, "VALIDATION_ERROR", got.GetErrorCode())
	require.Equal(t, store.DLQTerminalError, got.GetErrorClass())
	require.Equal(t, "reason d3", got.GetReason())
	require.Len(t, got.GetAttempts(), 2)
	require.Equal(t, "d3-a0", got.GetAttempts()[0].GetMessageId())
	require.Equal(t, "TIMED_OUT", got.GetAttempts()[0].GetState())
	require.Equal(t, "ack_timeout", got.GetAttempts()[0].GetReason())
	require.True(t, base.Add(2*time.Minute).Equal(got.GetAttempts()[0].GetAt().AsTime()))
	require.Equal(t, uint64(20), got.GetPayloadSize())
	require.Equal(t, "application/json", got.GetContentType())
	require.Equal(t, []byte(`{"secret":`), got.GetPayloadExcerpt())
	require.True(t, base.Add(2*time.Minute).Equal(got.GetFirstSeenAt().AsTime()))
	require.True(t, base.Add(3*time.Minute).Equal(got.GetFailedAt().AsTime()))
	require.True(t, base.Add(time.Hour).Equal(got.GetRequeuedAt().AsTime()))
	require.Equal(t, "d3-r", got.GetRequeuedAs())

	// Not requeued: no requeue time on the wire.
	resp, err = d.ListDeadLetters(operatorCtx(t, dlqTestToken), &dlqadminpb.ListDeadLettersRequest{Filter: &dlqadminpb.DeadLetterFilter{Limit: 1}})
	require.NoError(t, err)
	require.Nil(t, resp.GetDeadLetters()[0].GetRequeuedAt())
}

// TestDLQAdminGet: GetDeadLetter returns one entry, requeued or not, with its bounded attempt
// history — each attempt's error code and state time, and the count of attempts left out —
// and refuses an id that is not positive or names nothing.
func TestDLQAdminGet(t *testing.T) {
	d, st, _ := newDLQTestService(t)
	ctx := operatorCtx(t, dlqTestToken)
	base := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	var attempts []store.DLQAttempt
	for i := range 25 {
		attempts = append(attempts, store.DLQAttempt{MessageID: fmt.Sprintf("m%02d", i), At: base.Add(time.Duration(i) * time.Second),
			State: "REJECTED", ErrorCode: "ALREADY_IN_PROGRESS", Reason: "in progress", UpdatedAt: base.Add(time.Duration(i) * time.Second)})
	}
	attempts[24].State, attempts[24].ErrorCode, attempts[24].UpdatedAt = "TIMED_OUT", "ACK_TIMEOUT", base.Add(time.Minute)
	e, err := st.DLQ().PutDeadLetter(t.Context(), store.DLQEntry{MessageID: "m24", ProducerID: "alice", Class: store.DLQRetriesExhausted,
		ErrorCode: commonpb.ErrorCode_ACK_TIMEOUT, Attempts: attempts, FirstSeenAt: base, FailedAt: base.Add(time.Minute)})
	require.NoError(t, err)
	require.NoError(t, st.DLQ().MarkRequeued(t.Context(), e.ID, "m-r", base.Add(time.Hour)))

	resp, err := d.GetDeadLetter(ctx, &dlqadminpb.GetDeadLetterRequest{Id: e.ID})
	require.NoError(t, err)
	got := resp.GetDeadLetter()
	require.Equal(t, e.ID, got.GetId())
	require.Equal(t, "m-r", got.GetRequeuedAs(), "a requeued entry is returned too")
	require.Len(t, got.GetAttempts(), store.MaxDLQAttempts)
	require.Equal(t, uint32(5), got.GetAttemptsDropped())
	require.Equal(t, "m04", got.GetAttempts()[4].GetMessageId())
	require.Equal(t, "m10", got.GetAttempts()[5].GetMessageId())
	last := got.GetAttempts()[store.MaxDLQAttempts-1]
	require.Equal(t, "m24", last.GetMessageId())
	require.Equal(t, "TIMED_OUT", last.GetState())
	require.Equal(t, "ACK_TIMEOUT", last.GetErrorCode())
	require.True(t, base.Add(time.Minute).Equal(last.GetUpdatedAt().AsTime()))
	require.Equal(t, "ALREADY_IN_PROGRESS", got.GetAttempts()[0].GetErrorCode())

	_, err = d.GetDeadLetter(ctx, &dlqadminpb.GetDeadLetterRequest{})
	requireCode(t, codes.InvalidArgument, err)
	_, err = d.GetDeadLetter(ctx, &dlqadminpb.GetDeadLetterRequest{Id: -3})
	requireCode(t, codes.InvalidArgument, err)
	_, err = d.GetDeadLetter(ctx, &dlqadminpb.GetDeadLetterRequest{Id: e.ID + 1})
	requireCode(t, codes.NotFound, err)
}

func TestDLQAdminInvalidFilters(t *testing.T) {
	d, _, _ := newDLQTestService(t)
	ctx := operatorCtx(t, dlqTestToken)
	now := time.Now()
	for name, f := range map[string]*dlqadminpb.DeadLetterFilter{
		"unknown class":      {ErrorClass: "exploded"},
		"unknown code":       {ErrorCode: "NO_SUCH_CODE"},
		"unspecified code":   {ErrorCode: "ERROR_CODE_UNSPECIFIED"},
		"until before since": {Since: timestamppb.New(now), Until: timestamppb.New(now.Add(-time.Second))},
		"invalid since":      {Since: &timestamppb.Timestamp{Seconds: 1, Nanos: -5}},
		"invalid until":      {Until: &timestamppb.Timestamp{Seconds: 1 << 62}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := d.ListDeadLetters(ctx, &dlqadminpb.ListDeadLettersRequest{Filter: f})
			requireCode(t, codes.InvalidArgument, err)
			_, err = d.Export(ctx, &dlqadminpb.ExportRequest{Filter: f})
			requireCode(t, codes.InvalidArgument, err)
		})
	}
	// An empty range is allowed: until equal to since.
	_, err := d.ListDeadLetters(ctx, &dlqadminpb.ListDeadLettersRequest{Filter: &dlqadminpb.DeadLetterFilter{
		Since: timestamppb.New(now), Until: timestamppb.New(now),
	}})
	require.NoError(t, err)
}

func TestDLQAdminRequeue(t *testing.T) {
	d, st, r := newDLQTestService(t)
	ctx := operatorCtx(t, dlqTestToken)
	base := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	ids := seedDLQ(t, st, base)
	require.NoError(t, st.DLQ().MarkRequeued(t.Context(), ids[3], "d3-earlier", base.Add(time.Hour)))

	_, err := d.Requeue(ctx, &dlqadminpb.RequeueRequest{})
	requireCode(t, codes.InvalidArgument, err)

	resp, err := d.Requeue(ctx, &dlqadminpb.RequeueRequest{Ids: []int64{ids[0], 9999, ids[3], ids[0], ids[1]}})
	require.NoError(t, err)
	res := resp.GetResults()
	require.Len(t, res, 4, "one result per distinct id, in request order")
	require.Equal(t, ids[0], res[0].GetId())
	require.Equal(t, "d0-r", res[0].GetMessageId())
	require.Empty(t, res[0].GetCode())
	require.Empty(t, res[0].GetError())
	require.Equal(t, int64(9999), res[1].GetId())
	require.Equal(t, "NOT_FOUND", res[1].GetCode())
	require.Contains(t, res[1].GetError(), "unknown dead letter 9999")
	require.Empty(t, res[1].GetMessageId())
	require.Equal(t, ids[3], res[2].GetId())
	require.Equal(t, "FAILED_PRECONDITION", res[2].GetCode())
	require.Contains(t, res[2].GetError(), "already requeued as d3-earlier")
	require.Equal(t, ids[1], res[3].GetId())
	require.Equal(t, "d1-r", res[3].GetMessageId())
	require.Equal(t, []int64{ids[0], ids[1]}, r.calls, "the requeuer is only asked for entries that can be requeued")

	// Requeuing again is refused.
	resp, err = d.Requeue(ctx, &dlqadminpb.RequeueRequest{Ids: []int64{ids[0]}})
	require.NoError(t, err)
	require.Equal(t, "FAILED_PRECONDITION", resp.GetResults()[0].GetCode())
	require.Contains(t, resp.GetResults()[0].GetError(), "already requeued as d0-r")

	// Every attempt on a known entry is audited with the operator as actor.
	evs, err := st.Audit().List(t.Context(), store.AuditFilter{TypePrefix: "dlq.requeue_requested"})
	require.NoError(t, err)
	require.Len(t, evs, 4)
	require.Equal(t, "olga", evs[0].Actor)
	require.Equal(t, "d0", evs[0].MessageID)
	require.Equal(t, "corr-d0", evs[0].CorrelationID)
	require.Equal(t, "bob", evs[0].AgentID)
	var details map[string]any
	require.NoError(t, json.Unmarshal(evs[0].Details, &details))
	require.Equal(t, "requeued", details["outcome"])
	require.Equal(t, "d0-r", details["requeued_as"])
	require.Equal(t, "cli", details["via"])
	require.NoError(t, json.Unmarshal(evs[1].Details, &details))
	require.Equal(t, "refused", details["outcome"])
	require.Equal(t, "FAILED_PRECONDITION", details["code"])
}

func TestDLQAdminRequeueErrors(t *testing.T) {
	d, st, r := newDLQTestService(t)
	ctx := operatorCtx(t, dlqTestToken)
	ids := seedDLQ(t, st, time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	one := func() *dlqadminpb.RequeueResult {
		t.Helper()
		resp, err := d.Requeue(ctx, &dlqadminpb.RequeueRequest{Ids: []int64{ids[0]}})
		require.NoError(t, err)
		require.Len(t, resp.GetResults(), 1)
		return resp.GetResults()[0]
	}

	// A concurrent requeue won between the check and the router's mark.
	r.err = fmt.Errorf("mark: %w", store.ErrAlreadyRequeued)
	res := one()
	require.Equal(t, "FAILED_PRECONDITION", res.GetCode())
	require.Contains(t, res.GetError(), "already requeued")

	// Something the entry needs is unknown (its route): the entry exists, so it is a
	// precondition, not an unknown id.
	r.err = fmt.Errorf("route bob: %w", store.ErrNotFound)
	res = one()
	require.Equal(t, "FAILED_PRECONDITION", res.GetCode())
	require.Contains(t, res.GetError(), "route bob")

	// A gRPC status keeps its code; any other error is a precondition with its text.
	r.err = status.Error(codes.ResourceExhausted, "buffer_full: bob's buffer is full")
	res = one()
	require.Equal(t, "RESOURCE_EXHAUSTED", res.GetCode())
	require.Equal(t, "buffer_full: bob's buffer is full", res.GetError())
	r.err = fmt.Errorf("dead letter holds no usable envelope")
	res = one()
	require.Equal(t, "FAILED_PRECONDITION", res.GetCode())
	require.Contains(t, res.GetError(), "no usable envelope")

	e, err := st.DLQ().GetDeadLetter(t.Context(), ids[0])
	require.NoError(t, err)
	require.True(t, e.RequeuedAt.IsZero(), "failed requeues leave the entry requeueable")

	// Without a requeuer the call is unavailable.
	d.requeue = nil
	_, err = d.Requeue(ctx, &dlqadminpb.RequeueRequest{Ids: []int64{ids[0]}})
	requireCode(t, codes.Unavailable, err)
}

func TestDLQAdminExport(t *testing.T) {
	d, st, _ := newDLQTestService(t)
	ctx := operatorCtx(t, dlqTestToken)
	base := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	ids := seedDLQ(t, st, base)
	audit := st.Audit()
	for _, e := range []store.Event{
		{Type: "message.admitted", MessageID: "d0-a0", CorrelationID: "corr-d0", Details: []byte(`{"n":1}`)},
		{Type: "message.timed_out", MessageID: "d0-a0"},
		{Type: "flow.note", CorrelationID: "corr-d0"},
		{Type: "message.admitted", MessageID: "d0", Details: []byte(`{"n":2}`)},
		{Type: "message.admitted", MessageID: "d1", CorrelationID: "corr-d1"},
		{Type: "unrelated", MessageID: "zzz", CorrelationID: "corr-zzz"},
	} {
		_, err := audit.Append(t.Context(), e)
		require.NoError(t, err)
	}

	type bundle struct {
		Format      string `json:"format"`
		GeneratedBy string `json:"generated_by"`
		Count       int    `json:"count"`
		Selection   struct {
			IDs    []int64        `json:"ids"`
			Filter map[string]any `json:"filter"`
		} `json:"selection"`
		Entries []struct {
			ID                 int64              `json:"id"`
			MessageID          string             `json:"message_id"`
			Route              string             `json:"route"`
			ProducerID         string             `json:"producer_id"`
			ErrorClass         string             `json:"error_class"`
			ErrorCode          string             `json:"error_code"`
			Reason             string             `json:"reason"`
			Attempts           []store.DLQAttempt `json:"attempts"`
			AttemptsDropped    *int               `json:"attempts_dropped"`
			PayloadSize        int                `json:"payload_size"`
			ContentType        string             `json:"content_type"`
			PayloadExcerpt     []byte             `json:"payload_excerpt"`
			PayloadExcerptText string             `json:"payload_excerpt_text"`
			FirstSeenAt        *time.Time         `json:"first_seen_at"`
			FailedAt           time.Time          `json:"failed_at"`
			Envelope           map[string]any     `json:"envelope"`
			Audit              []struct {
				ID      int64           `json:"id"`
				Type    string          `json:"type"`
				Details json.RawMessage `json:"details"`
			} `json:"audit"`
		} `json:"entries"`
	}
	export := func(req *dlqadminpb.ExportRequest) bundle {
		t.Helper()
		resp, err := d.Export(ctx, req)
		require.NoError(t, err)
		var b bundle
		require.NoError(t, json.Unmarshal(resp.GetBundle(), &b), "%s", resp.GetBundle())
		require.Equal(t, DLQBundleFormat, b.Format)
		require.Equal(t, "olga", b.GeneratedBy)
		require.Equal(t, len(b.Entries), b.Count)
		require.Equal(t, uint32(b.Count), resp.GetCount())
		return b
	}

	b := export(&dlqadminpb.ExportRequest{Ids: []int64{ids[0]}})
	require.Equal(t, []int64{ids[0]}, b.Selection.IDs)
	require.Len(t, b.Entries, 1)
	e := b.Entries[0]
	require.Equal(t, "d0", e.MessageID)
	require.Equal(t, "bob", e.Route)
	require.Equal(t, "alice", e.ProducerID)
	require.Equal(t, store.DLQRetriesExhausted, e.ErrorClass)
	require.Equal(t, "ACK_TIMEOUT", e.ErrorCode)
	require.Equal(t, "reason d0", e.Reason)
	require.Len(t, e.Attempts, 2)
	require.Equal(t, "d0-a0", e.Attempts[0].MessageID)
	require.NotNil(t, e.AttemptsDropped, "the bundle says how many attempts the history left out")
	require.Zero(t, *e.AttemptsDropped)
	require.Equal(t, 20, e.PayloadSize)
	require.Equal(t, "application/json", e.ContentType)
	require.Equal(t, []byte(`{"secret":`), e.PayloadExcerpt)
	require.Equal(t, `{"secret":`, e.PayloadExcerptText)
	require.True(t, base.Equal(e.FailedAt))
	require.NotNil(t, e.FirstSeenAt)
	require.Equal(t, "d0", e.Envelope["message_id"])
	require.Equal(t, "tok-d0", e.Envelope["idempotency_token"])
	require.NotContains(t, e.Envelope, "payload", "the bundle carries the excerpt, not the payload")
	var types []string
	for _, ev := range e.Audit {
		types = append(types, ev.Type)
	}
	require.Equal(t, []string{"message.admitted", "message.timed_out", "flow.note", "message.admitted"}, types,
		"the events of every attempt and of the flow, once each, in order")
	require.JSONEq(t, `{"n":1}`, string(e.Audit[0].Details))

	// By filter.
	b = export(&dlqadminpb.ExportRequest{Filter: &dlqadminpb.DeadLetterFilter{Route: "carol"}})
	require.Equal(t, "carol", b.Selection.Filter["route"])
	require.Len(t, b.Entries, 2)
	require.Equal(t, "d1", b.Entries[0].MessageID)
	require.Equal(t, "d3", b.Entries[1].MessageID)
	require.Len(t, b.Entries[0].Audit, 1)
	require.Empty(t, b.Entries[1].Audit)

	// Everything, and nothing.
	require.Len(t, export(&dlqadminpb.ExportRequest{}).Entries, 4)
	require.Empty(t, export(&dlqadminpb.ExportRequest{Filter: &dlqadminpb.DeadLetterFilter{Producer: "nobody"}}).Entries)

	_, err := d.Export(ctx, &dlqadminpb.ExportRequest{Ids: []int64{ids[0], 4242}})
	requireCode(t, codes.NotFound, err)
	_, err = d.Export(ctx, &dlqadminpb.ExportRequest{Ids: []int64{ids[0]}, Filter: &dlqadminpb.DeadLetterFilter{Route: "bob"}})
	requireCode(t, codes.InvalidArgument, err)
	b = export(&dlqadminpb.ExportRequest{Ids: []int64{ids[1], ids[0]}, Filter: &dlqadminpb.DeadLetterFilter{IncludeRequeued: true, Limit: 1}})
	require.Len(t, b.Entries, 2, "include_requeued and limit are ignored with ids")
	require.Equal(t, "d1", b.Entries[0].MessageID, "in the requested order")

	evs, err := st.Audit().List(t.Context(), store.AuditFilter{TypePrefix: "dlq.exported"})
	require.NoError(t, err)
	require.NotEmpty(t, evs)
	require.Equal(t, "olga", evs[0].Actor)
}

func TestDLQCodeName(t *testing.T) {
	for c, want := range map[codes.Code]string{
		codes.OK: "OK", codes.NotFound: "NOT_FOUND", codes.FailedPrecondition: "FAILED_PRECONDITION",
		codes.DeadlineExceeded: "DEADLINE_EXCEEDED", codes.Internal: "INTERNAL", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	} {
		require.Equal(t, want, dlqCodeName(c))
	}
}
