package reasoning

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/reasoningpb"
)

// DefaultExternalTimeout bounds each call to an external engine when External.Timeout is
// zero: long enough for a model to answer, short enough that a hung engine does not hold a
// negotiation round.
const DefaultExternalTimeout = 30 * time.Second

// External is an Engine that forwards every call to another ReasoningProxy (a model-backed
// service) at an address, as SW4RM_HITL_EXTERNAL names an external HITL component.
//
// Each call is bounded by Timeout. What the engine refuses as bad input
// (codes.InvalidArgument) is passed on unchanged; every other failure — the address does not
// answer, the call times out, the engine fails or answers a confidence outside [0, 1] —
// becomes codes.Unavailable naming the address, so the caller applies its
// inference-unavailable policy (§9.3) instead of trusting a broken answer. When the caller's
// own context ends first, the call fails with the caller's context error.
type External struct {
	addr   string
	conn   *grpc.ClientConn
	client reasoningpb.ReasoningProxyClient
	// Timeout bounds each call; zero means DefaultExternalTimeout. Set it before the first
	// call.
	Timeout time.Duration
}

// NewExternal connects (lazily: nothing is dialled until the first call) to the
// ReasoningProxy at addr. The connection is plaintext unless opts say otherwise; opts are
// applied after the defaults, so they win.
func NewExternal(addr string, opts ...grpc.DialOption) (*External, error) {
	if strings.TrimSpace(addr) == "" {
		return nil, errors.New("reasoning: external engine address is empty")
	}
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("reasoning: external engine %s: %w", addr, err)
	}
	return &External{addr: addr, conn: conn, client: reasoningpb.NewReasoningProxyClient(conn)}, nil
}

// Name implements Named: "external:<addr>".
func (e *External) Name() string { return "external:" + e.addr }

// Close closes the connection.
func (e *External) Close() error { return e.conn.Close() }

func (e *External) timeout() time.Duration {
	if e.Timeout > 0 {
		return e.Timeout
	}
	return DefaultExternalTimeout
}

// EvaluateDebate implements Engine by forwarding req (see External).
func (e *External) EvaluateDebate(ctx context.Context, req *reasoningpb.DebateEvaluateRequest) (*reasoningpb.DebateEvaluateResponse, error) {
	cctx, cancel, callerFirst := e.bound(ctx)
	defer cancel()
	resp, err := e.client.EvaluateDebate(cctx, req)
	if err != nil {
		return nil, e.failed(ctx, callerFirst, "EvaluateDebate", err)
	}
	if c := resp.GetConfidenceScore(); math.IsNaN(c) || c < 0 || c > 1 {
		return nil, e.unavailable("EvaluateDebate", fmt.Errorf("answered confidence_score %v outside [0, 1]", c))
	}
	return resp, nil
}

// Summarize implements Engine by forwarding req (see External).
func (e *External) Summarize(ctx context.Context, req *reasoningpb.SummarizeRequest) (*reasoningpb.SummarizeResponse, error) {
	cctx, cancel, callerFirst := e.bound(ctx)
	defer cancel()
	resp, err := e.client.Summarize(cctx, req)
	if err != nil {
		return nil, e.failed(ctx, callerFirst, "Summarize", err)
	}
	return resp, nil
}

// bound applies the per-call timeout to ctx; callerFirst says the caller's own deadline
// comes sooner, so a deadline error is the caller's.
func (e *External) bound(ctx context.Context) (context.Context, context.CancelFunc, bool) {
	d := e.timeout()
	dl, ok := ctx.Deadline()
	callerFirst := ok && time.Until(dl) <= d
	cctx, cancel := context.WithTimeout(ctx, d)
	return cctx, cancel, callerFirst
}

// failed maps a failed call (see External).
func (e *External) failed(ctx context.Context, callerFirst bool, method string, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err() // the caller gave up, not the engine
	}
	if callerFirst && status.Code(err) == codes.DeadlineExceeded {
		// The engine saw the caller's deadline (gRPC sends it along) and gave up a moment
		// before the caller's own timer fired: still the caller's deadline.
		return status.Errorf(codes.DeadlineExceeded, "the caller's deadline passed before external reasoning engine %s answered %s", e.addr, method)
	}
	if status.Code(err) == codes.InvalidArgument {
		return err
	}
	return e.unavailable(method, err)
}

func (e *External) unavailable(method string, err error) error {
	msg := err.Error()
	if st, ok := status.FromError(err); ok {
		msg = st.Code().String() + ": " + st.Message()
	}
	return status.Errorf(codes.Unavailable, "inference engine unavailable: external reasoning engine %s: %s: %s", e.addr, method, msg)
}
