package frontend

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/store"
)

func TestErrorTable(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for name, tc := range map[string]struct {
		ctx     context.Context
		err     error
		code    codes.Code
		errCode commonpb.ErrorCode
		prefix  string
	}{
		"validation":        {context.Background(), protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "agent_id is required"), codes.InvalidArgument, commonpb.ErrorCode_VALIDATION_ERROR, "validation_error: agent_id"},
		"permission":        {context.Background(), protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "not yours"), codes.PermissionDenied, commonpb.ErrorCode_PERMISSION_DENIED, "permission_denied: "},
		"buffer full":       {context.Background(), protocol.Errorf(commonpb.ErrorCode_BUFFER_FULL, "10 of 10"), codes.ResourceExhausted, commonpb.ErrorCode_BUFFER_FULL, "buffer_full: "},
		"store not found":   {context.Background(), failed("look up agent a", store.ErrNotFound), codes.NotFound, commonpb.ErrorCode_NO_ROUTE, "no_route: look up agent a"},
		"temporal notfound": {context.Background(), failed("signal", serviceerror.NewNotFound("gone")), codes.NotFound, commonpb.ErrorCode_NO_ROUTE, "no_route: signal"},
		"store down":        {context.Background(), failed("registry write", store.ErrUnavailable), codes.Unavailable, commonpb.ErrorCode_INTERNAL_ERROR, "internal_error: registry write"},
		"caller gone":       {cancelled, failed("wait", context.Canceled), codes.Canceled, commonpb.ErrorCode_INTERNAL_ERROR, ""},
		"own status":        {context.Background(), status.Error(codes.FailedPrecondition, "agent_shutdown: agent a is shutting down"), codes.FailedPrecondition, commonpb.ErrorCode_AGENT_SHUTDOWN, "agent_shutdown: "},
		"status, no prefix": {context.Background(), status.Error(codes.InvalidArgument, "bad"), codes.InvalidArgument, commonpb.ErrorCode_VALIDATION_ERROR, "bad"},
		"plain error":       {context.Background(), errors.New("boom"), codes.Unavailable, commonpb.ErrorCode_INTERNAL_ERROR, "internal_error: boom"},
		"precondition":      {context.Background(), precondition(commonpb.ErrorCode_VALIDATION_ERROR, "negotiation n is closed"), codes.FailedPrecondition, commonpb.ErrorCode_VALIDATION_ERROR, "validation_error: negotiation n is closed"},
		"internal":          {context.Background(), internalf("decode: %v", "x"), codes.Internal, commonpb.ErrorCode_INTERNAL_ERROR, "internal_error: decode: x"},
		"temporal down":     {context.Background(), temporalUnavailable("start the run", errors.New("refused")), codes.Unavailable, commonpb.ErrorCode_INTERNAL_ERROR, "internal_error: could not start the run: refused"},
		"temporal, gone":    {cancelled, temporalUnavailable("start the run", errors.New("refused")), codes.Canceled, commonpb.ErrorCode_INTERNAL_ERROR, ""},
		"tool timeout":      {context.Background(), toolStatus("c1", tool.Errorf(tool.CodeToolTimeout, "slow")), codes.DeadlineExceeded, commonpb.ErrorCode_TOOL_TIMEOUT, "TOOL_TIMEOUT: slow"},
	} {
		t.Run(name, func(t *testing.T) {
			st := toStatus(tc.ctx, tc.err)
			assert.Equal(t, tc.code, st.Code(), "%v", st)
			assert.Equal(t, tc.errCode, errorCodeOfStatus(st), "%v", st)
			assert.Contains(t, st.Message(), tc.prefix)
		})
	}
	for _, c := range tool.Codes() {
		_, ok := toolCodeOf[c]
		assert.True(t, ok, "every tool code has its gRPC status: %s", c)
	}
	for c := range commonpb.ErrorCode_name {
		if c == 0 {
			continue
		}
		_, ok := grpcCodeOf[commonpb.ErrorCode(c)]
		assert.True(t, ok, "every error code has its gRPC status: %s", commonpb.ErrorCode(c))
	}
}
