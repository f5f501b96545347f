package frontend

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/api/serviceerror"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/dag"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// The one error table of the frontend. Handlers return what failed — a *protocol.Error for a
// refusal the spec names, a precondition for one the state of a resource caused, a
// toolStatus for a tool call's §18.3 failure, a store or Temporal error wrapped with what
// was being done (failed, temporalUnavailable) — and errorsUnary/errorsStream turn every one
// of them into a gRPC status whose message starts with the spec's error_code
// ("validation_error: …") and whose trailer sw4rm-error-code carries the code's enum name, so
// that a client in any language can branch on it (§11, §21). A status a handler built itself
// passes through unchanged.

// grpcCodeOf is the gRPC status a protocol refusal travels with.
var grpcCodeOf = map[commonpb.ErrorCode]codes.Code{
	commonpb.ErrorCode_VALIDATION_ERROR:         codes.InvalidArgument,
	commonpb.ErrorCode_UNSUPPORTED_MESSAGE_TYPE: codes.InvalidArgument,
	commonpb.ErrorCode_OVERSIZE_PAYLOAD:         codes.InvalidArgument,
	commonpb.ErrorCode_PERMISSION_DENIED:        codes.PermissionDenied,
	commonpb.ErrorCode_NO_ROUTE:                 codes.NotFound,
	commonpb.ErrorCode_DUPLICATE_DETECTED:       codes.AlreadyExists,
	commonpb.ErrorCode_ALREADY_IN_PROGRESS:      codes.AlreadyExists,
	commonpb.ErrorCode_BUFFER_FULL:              codes.ResourceExhausted,
	commonpb.ErrorCode_OVERLOADED:               codes.ResourceExhausted,
	commonpb.ErrorCode_AGENT_SHUTDOWN:           codes.FailedPrecondition,
	commonpb.ErrorCode_AGENT_UNAVAILABLE:        codes.Unavailable,
	commonpb.ErrorCode_ACK_TIMEOUT:              codes.DeadlineExceeded,
	commonpb.ErrorCode_TOOL_TIMEOUT:             codes.DeadlineExceeded,
	commonpb.ErrorCode_TTL_EXPIRED:              codes.DeadlineExceeded,
	commonpb.ErrorCode_FORCED_PREEMPTION:        codes.Aborted,
	commonpb.ErrorCode_PARTIAL_DELIVERY:         codes.Aborted,
	commonpb.ErrorCode_REDIRECT:                 codes.FailedPrecondition,
	commonpb.ErrorCode_INTERNAL_ERROR:           codes.Internal,
}

// errorCodeOfStatus is the error_code a status names: the prefix of its message when that is
// one of the spec's codes, else the code that best describes the gRPC status.
func errorCodeOfStatus(st *status.Status) commonpb.ErrorCode {
	if prefix, _, ok := strings.Cut(st.Message(), ":"); ok {
		if v, known := commonpb.ErrorCode_value[strings.ToUpper(strings.TrimSpace(prefix))]; known && v != 0 {
			return commonpb.ErrorCode(v)
		}
	}
	switch st.Code() {
	case codes.InvalidArgument, codes.OutOfRange:
		return commonpb.ErrorCode_VALIDATION_ERROR
	case codes.PermissionDenied, codes.Unauthenticated:
		return commonpb.ErrorCode_PERMISSION_DENIED
	case codes.NotFound:
		return commonpb.ErrorCode_NO_ROUTE
	case codes.AlreadyExists:
		return commonpb.ErrorCode_DUPLICATE_DETECTED
	case codes.ResourceExhausted:
		return commonpb.ErrorCode_OVERLOADED
	case codes.Unimplemented:
		return commonpb.ErrorCode_UNSUPPORTED_MESSAGE_TYPE
	}
	return commonpb.ErrorCode_INTERNAL_ERROR
}

// toolCodeOf is the gRPC status a failed tool call travels with (§18.3); its exact code
// rides in the ToolError detail and the sw4rm-tool-error-code trailer.
var toolCodeOf = map[tool.Code]codes.Code{
	tool.CodeToolTimeout:       codes.DeadlineExceeded,
	tool.CodeWallTimeout:       codes.DeadlineExceeded,
	tool.CodeValidation:        codes.InvalidArgument,
	tool.CodePermissionDenied:  codes.PermissionDenied,
	tool.CodeWorktreeNotBound:  codes.FailedPrecondition,
	tool.CodeCPUBudgetExceeded: codes.ResourceExhausted,
	tool.CodeCancelled:         codes.Aborted,
	tool.CodeNotFound:          codes.NotFound,
	tool.CodeAlreadyCompleted:  codes.FailedPrecondition,
	tool.CodeToolFailed:        codes.Aborted,
	tool.CodeInterrupted:       codes.Aborted,
	tool.CodeInternal:          codes.Internal,
}

// preconditionError is a protocol refusal caused by the state a resource is in (a closed
// negotiation, a handoff no longer offered) rather than by the request: gRPC's
// FailedPrecondition, with the spec's error_code all the same.
type preconditionError struct{ refusal *protocol.Error }

func (e *preconditionError) Error() string { return e.refusal.Error() }

// Unwrap lets protocol.CodeOf find the refusal's code.
func (e *preconditionError) Unwrap() error { return e.refusal }

// precondition builds a preconditionError with a formatted message.
func precondition(code commonpb.ErrorCode, format string, args ...any) error {
	return &preconditionError{refusal: protocol.Errorf(code, format, args...)}
}

// internalf is a bug or a broken invariant of this server: Internal, internal_error.
func internalf(format string, args ...any) error {
	return protocol.Errorf(commonpb.ErrorCode_INTERNAL_ERROR, format, args...)
}

// unavailableError is a Temporal call that failed for none of the reasons a handler answers
// itself: nothing was refused, so the call is safe to retry.
type unavailableError struct {
	what string
	err  error
}

func (e *unavailableError) Error() string { return "could not " + e.what + ": " + e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// temporalUnavailable wraps a Temporal error with what was being done, for the error table.
func temporalUnavailable(what string, err error) error {
	return &unavailableError{what: what, err: err}
}

// toolFailure is a tool call's §18.3 failure, answered with its ToolError as a detail.
type toolFailure struct {
	callID string
	err    *tool.Error
}

func (e *toolFailure) Error() string { return e.err.Error() }

// toolStatus is the failure of call callID, for the error table.
func toolStatus(callID string, te *tool.Error) error { return &toolFailure{callID: callID, err: te} }

// toStatus maps any error a handler returns onto the gRPC status of the table above.
func toStatus(ctx context.Context, err error) *status.Status {
	var (
		unavailable *unavailableError
		pre         *preconditionError
		tf          *toolFailure
		cyc         *dag.CycleError
	)
	switch {
	case errors.As(err, &unavailable):
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()) // the caller went away or ran out of time
		}
		return status.New(codes.Unavailable, "internal_error: "+unavailable.Error())
	case errors.As(err, &pre):
		return status.New(codes.FailedPrecondition, pre.Error())
	case errors.As(err, &tf):
		c, ok := toolCodeOf[tf.err.Code]
		if !ok {
			c = codes.Internal
		}
		st := status.New(c, tf.err.Error())
		if d, derr := st.WithDetails(tf.err.Proto(tf.callID)); derr == nil {
			st = d
		}
		return st
	case errors.As(err, &cyc):
		// §17.7's code is not an ErrorCode value: the message starts with it, the
		// sw4rm-workflow-error-code trailer carries it, and an ErrorInfo detail carries it
		// with the cycle's nodes for clients that read structured details.
		st := status.New(codes.InvalidArgument, cyc.Error())
		info := &errdetails.ErrorInfo{Reason: strings.ToUpper(dag.CodeCycleDetected), Domain: "sw4rm",
			Metadata: map[string]string{"error_code": dag.CodeCycleDetected, "cycle": strings.Join(cyc.Nodes, ",")}}
		if d, derr := st.WithDetails(info); derr == nil {
			st = d
		}
		return st
	}
	if st, ok := status.FromError(err); ok {
		return st
	}
	var perr *protocol.Error
	if errors.As(err, &perr) {
		c, ok := grpcCodeOf[perr.Code]
		if !ok {
			c = codes.FailedPrecondition
		}
		return status.New(c, perr.Error())
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()) // the caller went away or ran out of time
		}
		return status.FromContextError(err)
	}
	var nf *serviceerror.NotFound
	switch {
	case errors.Is(err, store.ErrActivityBufferFull):
		return status.New(codes.ResourceExhausted, "activity_buffer_full: "+err.Error()) // §10.1; the trailer says overloaded
	case errors.Is(err, store.ErrInvalidActivity):
		return status.New(codes.InvalidArgument, "validation_error: "+err.Error())
	case errors.Is(err, store.ErrNotFound), errors.As(err, &nf):
		return status.New(codes.NotFound, "no_route: "+err.Error())
	}
	// The store or Temporal failed: nothing was refused, so the call is safe to retry.
	return status.New(codes.Unavailable, "internal_error: "+err.Error()+"; retry")
}

// failed wraps a store or Temporal error with what was being done, for toStatus.
func failed(what string, err error) error { return fmt.Errorf("%s: %w", what, err) }

// trailerOf is the trailer of a failed call: its error_code and, for a tool call, the
// exact §18.3 code; for a cyclic workflow definition, §17.7's workflow_cycle_detected.
func trailerOf(st *status.Status, err error) metadata.MD {
	md := metadata.Pairs(wire.ErrorCodeTrailer, errorCodeOfStatus(st).String())
	var (
		tf  *toolFailure
		cyc *dag.CycleError
	)
	switch {
	case errors.As(err, &tf):
		md.Set(wire.ToolErrorCodeTrailer, string(tf.err.Code))
	case errors.As(err, &cyc):
		md.Set(wire.WorkflowErrorCodeTrailer, dag.CodeCycleDetected)
	}
	return md
}

// errorsUnary applies the error table to a unary call's error and sets its trailer.
func errorsUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err == nil {
		return resp, nil
	}
	st := toStatus(ctx, err)
	_ = grpc.SetTrailer(ctx, trailerOf(st, err))
	return nil, st.Err()
}

// errorsStream applies the error table to a stream's final error and sets its trailer.
func errorsStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	err := handler(srv, ss)
	if err == nil {
		return nil
	}
	st := toStatus(ss.Context(), err)
	ss.SetTrailer(trailerOf(st, err))
	return st.Err()
}
