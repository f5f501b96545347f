package frontend

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// TestWaitErrorTransientIsUnavailable: whatever interrupts the wait on a hitl/ run without the
// run itself failing — Temporal unreachable, its own deadline, "workflow not found" while it
// reloads — answers Unavailable with the retry advice; the caller's own deadline or
// cancellation answers as such.
func TestWaitErrorTransientIsUnavailable(t *testing.T) {
	retry := retryAdvice("k1", "inv-1")
	for name, err := range map[string]error{
		"unavailable":             serviceerror.NewUnavailable("connection refused"),
		"not found while restart": serviceerror.NewNotFound("workflow execution not found"),
		"server deadline":         status.Error(codes.DeadlineExceeded, "context deadline exceeded"),
		"plain":                   errors.New("EOF"),
	} {
		st := status.Convert(waitError(context.Background(), err, "inv-1", retry))
		assert.Equal(t, codes.Unavailable, st.Code(), name)
		assert.Contains(t, st.Message(), "inv-1", name)
		assert.Contains(t, st.Message(), "retrying with the same "+wire.IdempotencyKey, name)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.Equal(t, codes.Canceled, status.Code(waitError(ctx, context.Canceled, "inv-1", retry)))
	ctx, cancel = context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	assert.Equal(t, codes.DeadlineExceeded, status.Code(waitError(ctx, context.DeadlineExceeded, "inv-1", retry)))
	assert.Contains(t, retryAdvice("", "inv-1"), "raises a new invocation", "a caller without a key is told what a retry does")
}

// TestIdempotencyKeyMetadata: the key is optional, and a malformed one is refused.
func TestIdempotencyKeyMetadata(t *testing.T) {
	key, err := idempotencyKey(context.Background())
	require.NoError(t, err)
	assert.Empty(t, key)
	in := func(v string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(wire.IdempotencyKey, v))
	}
	key, err = idempotencyKey(in(" coder-1:hitl:3f0c "))
	require.NoError(t, err)
	assert.Equal(t, "coder-1:hitl:3f0c", key)
	for _, bad := range []string{"", " ", strings.Repeat("k", hitl.MaxIdempotencyKey+1), "a\x00b"} {
		_, err := idempotencyKey(in(bad))
		assert.Equal(t, codes.InvalidArgument, toStatus(t.Context(), err).Code(), "%q", bad)
	}
}

// TestQuestionDigestIgnoresDeadline: retries of one question carry different call deadlines
// and so different timeouts; everything else the caller asked tells questions apart.
func TestQuestionDigestIgnoresDeadline(t *testing.T) {
	q := hitl.Invocation{InvocationID: "a", ReasonType: "CONFLICT", Context: hitl.Context{Facts: []string{"x"}}, ProposedActions: []string{"approve"}, Priority: 1, Timeout: time.Minute}
	same := q
	same.InvocationID, same.Timeout = "b", time.Hour
	assert.Equal(t, questionDigest(q), questionDigest(same))
	for name, change := range map[string]func(*hitl.Invocation){
		"reason":   func(i *hitl.Invocation) { i.ReasonType = "SECURITY_APPROVAL" },
		"context":  func(i *hitl.Invocation) { i.Context.Facts = []string{"y"} },
		"actions":  func(i *hitl.Invocation) { i.ProposedActions = nil },
		"priority": func(i *hitl.Invocation) { i.Priority = 2 },
	} {
		other := q
		change(&other)
		assert.NotEqual(t, questionDigest(q), questionDigest(other), name)
	}
}

// TestIdempotencyKeysAreScopedToTheCaller: the same key names different invocations for
// different proven callers, so that no caller can raise — or poison — another's invocation
// (§23); anonymous callers keep the unscoped ids.
func TestIdempotencyKeysAreScopedToTheCaller(t *testing.T) {
	st := memory.New()
	t.Cleanup(st.Close)
	h := &hitlService{s: &Server{store: st, cfg: Config{HITLPolicy: testHITLPolicy}}}
	withToken := func(ctx context.Context, token string) context.Context {
		return metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+token))
	}
	agent := auth.WithPrincipal(t.Context(), auth.Principal{Agent: "coder-1"})
	assert.Equal(t, "agent:coder-1", h.caller(agent))
	assert.Equal(t, "operator:alice", h.caller(withToken(t.Context(), "alice-token")))
	assert.Equal(t, "agent:coder-1", h.caller(withToken(agent, "alice-token")), "the interceptor's principal comes first")
	assert.Empty(t, h.caller(withToken(t.Context(), "not-a-token")), "an invalid token proves nobody")
	assert.Empty(t, h.caller(t.Context()))

	const key = "coder-1:hitl:3f0c"
	ids := map[string]bool{}
	for _, caller := range []string{"", "agent:coder-1", "agent:coder-2", "operator:alice"} {
		ids[keyedInvocationID(caller, key)] = true
		assert.Equal(t, keyedInvocationID(caller, key), keyedInvocationID(caller, key), "stable for retries")
	}
	assert.Len(t, ids, 4)
	assert.Equal(t, uuid.NewSHA1(keyedInvocations, []byte(key)).String(), keyedInvocationID("", key), "anonymous ids are those of before")
}
