package main

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/proto/dlqadminpb"
)

// fakeDLQAdmin answers GetDeadLetter and ListDeadLetters from one entry, for the operator
// token "op-token".
type fakeDLQAdmin struct {
	dlqadminpb.UnimplementedDlqAdminServiceServer
	entry *dlqadminpb.DeadLetter
	asked []int64
}

func (f *fakeDLQAdmin) authorized(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get("authorization")) == 0 || md.Get("authorization")[0] != "Bearer op-token" {
		return status.Error(codes.Unauthenticated, "permission_denied: the operator token is not valid")
	}
	return nil
}

func (f *fakeDLQAdmin) GetDeadLetter(ctx context.Context, req *dlqadminpb.GetDeadLetterRequest) (*dlqadminpb.GetDeadLetterResponse, error) {
	if err := f.authorized(ctx); err != nil {
		return nil, err
	}
	f.asked = append(f.asked, req.GetId())
	if req.GetId() != f.entry.GetId() {
		return nil, status.Errorf(codes.NotFound, "unknown dead letter %d", req.GetId())
	}
	return &dlqadminpb.GetDeadLetterResponse{DeadLetter: f.entry}, nil
}

func (f *fakeDLQAdmin) ListDeadLetters(ctx context.Context, _ *dlqadminpb.ListDeadLettersRequest) (*dlqadminpb.ListDeadLettersResponse, error) {
	if err := f.authorized(ctx); err != nil {
		return nil, err
	}
	return &dlqadminpb.ListDeadLettersResponse{DeadLetters: []*dlqadminpb.DeadLetter{f.entry}}, nil
}

// TestDLQShowPrintsTheAttemptHistory: `sw4rm dlq show` prints a dead letter's context and its
// attempt history (§21.1), each attempt numbered by its place in the operation, with a line
// where the bounded history left attempts out; `sw4rm dlq list` counts them all.
func TestDLQShowPrintsTheAttemptHistory(t *testing.T) {
	t.Setenv("SW4RM_OPERATOR_TOKEN", "")
	base := time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
	at := func(sec int) *timestamppb.Timestamp {
		return timestamppb.New(base.Add(time.Duration(sec) * time.Second))
	}
	entry := &dlqadminpb.DeadLetter{
		Id: 7, MessageId: "m-last", ProducerId: "alice", Route: "bob", CorrelationId: "wf-1", IdempotencyToken: "alice:charge:1",
		ErrorCode: "PERMISSION_DENIED", ErrorClass: "terminal_error", Reason: "card\nrefused", PayloadSize: 12,
		ContentType: "application/json", PayloadExcerpt: []byte(`{"amount":4}`), FirstSeenAt: at(0), FailedAt: at(100),
		AttemptsDropped: 3,
	}
	for i := range 20 {
		a := &dlqadminpb.DeadLetterAttempt{MessageId: fmt.Sprintf("m-%02d", i), At: at(i), State: "REJECTED",
			ErrorCode: "ALREADY_IN_PROGRESS", Reason: "in progress", UpdatedAt: at(i)}
		switch i {
		case 0:
			a.State, a.ErrorCode, a.Reason, a.UpdatedAt = "TIMED_OUT", "ACK_TIMEOUT", "no ACK within 1s", at(1)
		case 19:
			a.MessageId, a.State, a.ErrorCode, a.Reason, a.UpdatedAt = "m-last", "FAILED", "PERMISSION_DENIED", "card refused", at(100)
		}
		entry.Attempts = append(entry.Attempts, a)
	}
	f := &fakeDLQAdmin{entry: entry}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := grpc.NewServer()
	dlqadminpb.RegisterDlqAdminServiceServer(g, f)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	addr := lis.Addr().String()

	out, _, err := runOut(t, "dlq", "show", "7", "--server", addr, "--token", "op-token")
	require.NoError(t, err)
	for _, want := range []string{
		`(?m)^ID:\s+7$`, `(?m)^CLASS:\s+terminal_error$`, `(?m)^CODE:\s+PERMISSION_DENIED$`, `(?m)^REASON:\s+card refused$`,
		`(?m)^TOKEN:\s+alice:charge:1$`, `(?m)^FIRST SEEN:\s+2025-03-01T09:00:00.000Z$`, `(?m)^FAILED:\s+2025-03-01T09:01:40.000Z$`,
		`(?m)^REQUEUED:\s+-$`, `(?m)^EXCERPT:\s+\{"amount":4\}$`,
		`(?m)^ATTEMPTS:\s+23 \(20 shown: the first 5 and the last 15\)$`,
		`(?m)^#\s+AT\s+STATE\s+CODE\s+SINCE\s+MESSAGE\s+REASON$`,
		`(?m)^1\s+2025-03-01T09:00:00.000Z\s+TIMED_OUT\s+ACK_TIMEOUT\s+2025-03-01T09:00:01.000Z\s+m-00\s+no ACK within 1s$`,
		`(?m)^5\s+\S+\s+REJECTED\s+ALREADY_IN_PROGRESS\s+\S+\s+m-04\s+in progress$`,
		`(?m)^…\s+\(3 attempts not kept\)`,
		`(?m)^9\s+\S+\s+REJECTED\s+ALREADY_IN_PROGRESS\s+\S+\s+m-05\s+in progress$`,
		`(?m)^23\s+2025-03-01T09:00:19.000Z\s+FAILED\s+PERMISSION_DENIED\s+2025-03-01T09:01:40.000Z\s+m-last\s+card refused$`,
	} {
		assert.Regexp(t, regexp.MustCompile(want), out)
	}
	lines := strings.Split(strings.TrimSpace(out[strings.Index(out, "#"):]), "\n")
	assert.Len(t, lines, 1+20+1, "a header, 20 attempts and the gap:\n%s", out)

	out, _, err = runOut(t, "dlq", "list", "--server", addr, "--token", "op-token")
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^7\s+\S+\s+terminal_error\s+PERMISSION_DENIED\s+alice\s+bob\s+23\s+12\s+`, out, "list counts every attempt")

	_, _, err = runOut(t, "dlq", "show", "8", "--server", addr, "--token", "op-token")
	assert.Equal(t, codes.NotFound, status.Code(err))
	_, _, err = runOut(t, "dlq", "show", "seven", "--server", addr, "--token", "op-token")
	require.ErrorContains(t, err, "positive integers")
	_, _, err = runOut(t, "dlq", "show", "--server", addr, "--token", "op-token")
	require.Error(t, err, "an id is required")
	assert.Equal(t, []int64{7, 8}, f.asked, "bad arguments send nothing")
}
