package frontend

import (
	"context"
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// routerService serves sw4rm.router.RouterService (§11–§13).
type routerService struct {
	routerpb.UnimplementedRouterServiceServer
	s *Server
}

// RouterSpannedCalls are the calls whose span, with tracing on, the router makes itself rather
// than the gRPC server (telemetry.ServerHandler): SendMessage is the router's "send
// <recipient>" or "ack", AckDelivery its "confirm" (or no span, for the confirmation of
// control traffic). A message's round trip makes five such calls, and a span per step rather
// than two halves what tracing costs it (docs/observability.md, "Cost").
var RouterSpannedCalls = []string{routerpb.RouterService_SendMessage_FullMethodName, routerpb.RouterService_AckDelivery_FullMethodName}

// SendMessage admits an envelope addressed by the sw4rm-recipient metadata (see
// wire.RecipientKey). Protocol rejections answer accepted=false with the reason
// "<error_code>: <what was wrong>" and the sw4rm-error-code trailer; the producer also gets a
// NACK on its stream. Only a failure of the server itself is a gRPC error.
func (r *routerService) SendMessage(ctx context.Context, req *routerpb.SendMessageRequest) (*routerpb.SendMessageResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	recipient := ""
	if v := md.Get(wire.RecipientKey); len(v) > 0 {
		recipient = v[0]
	}
	perr, err := r.s.router.Send(ctx, req.GetMsg(), recipient)
	if err == nil && perr == nil {
		r.learnAckEnums(req.GetMsg())
	}
	if err != nil {
		r.s.log.Error("send failed", "message_id", req.GetMsg().GetMessageId(), "error", err)
		return nil, failed("store the message", err)
	}
	if perr != nil {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(wire.ErrorCodeTrailer, perr.Code.String()))
		return &routerpb.SendMessageResponse{Accepted: false, Reason: perr.Error()}, nil
	}
	return &routerpb.SendMessageResponse{Accepted: true}, nil
}

// StreamIncoming delivers the agent's inbound buffer as StreamItem{msg, seq}, redelivering
// what an earlier stream got but never confirmed.
func (r *routerService) StreamIncoming(req *routerpb.StreamRequest, stream grpc.ServerStreamingServer[routerpb.StreamItem]) error {
	ctx, cancel := streamContext(stream.Context())
	defer cancel()
	agentID := req.GetAgentId()
	if perr := protocol.ValidateAgentID(agentID); perr != nil {
		return perr
	}
	rec, err := r.streamingAgent(ctx, agentID)
	if err != nil {
		return err
	}
	md, _ := metadata.FromIncomingContext(ctx)
	resumeAfter, perr := protocol.ParseResumeAfter(md.Get(wire.ResumeAfterKey))
	if perr != nil {
		return perr
	}
	dialect, perr := r.ackDialect(md, agentID)
	if perr != nil {
		return perr
	}
	if rec.State == commonpb.AgentState_INITIALIZING {
		r.s.signalReady(ctx, agentID, "stream")
	}
	traceItems := len(md.Get(wire.TraceItemsKey)) > 0 && md.Get(wire.TraceItemsKey)[0] == "true"
	stream, stop := keepAlive(stream, r.s.cfg.StreamKeepAlive)
	defer stop()
	err = r.s.router.Stream(ctx, agentID, resumeAfter, func(d store.Delivery) error {
		msg := protocol.AckIn(d.Envelope, dialect())
		span, traceparent := router.DeliverSpan(ctx, d)
		if traceItems && traceparent != "" {
			msg = withTraceParent(msg, traceparent)
		}
		err := stream.Send(&routerpb.StreamItem{Msg: msg, Seq: d.Seq})
		span.End()
		return err
	})
	return streamStatus(ctx, err)
}

// withTraceParent is env with its delivery's trace context as the content_type parameter
// wire.TraceParentParam, for a stream that asked for it (wire.TraceItemsKey); a copy, since
// the stored envelope is shared. An envelope without a content type has no parameters to
// carry it, and is left as it is.
func withTraceParent(env *commonpb.Envelope, traceparent string) *commonpb.Envelope {
	if env.GetContentType() == "" {
		return env
	}
	env = proto.Clone(env).(*commonpb.Envelope)
	// A traceparent is hex digits and dashes, a MIME token: it needs no quoting.
	env.ContentType += "; " + wire.TraceParentParam + "=" + traceparent
	return env
}

// learnAckEnums remembers the dialect of an ACK an agent sent, for its streams on this
// frontend.
func (r *routerService) learnAckEnums(env *commonpb.Envelope) {
	if env.GetMessageType() != commonpb.MessageType_ACKNOWLEDGEMENT {
		return
	}
	if e, ok := protocol.AckEnumsOf(env.GetPayload()); ok {
		if old, loaded := r.s.ackEnums.Load(env.GetProducerId()); !loaded || old != e {
			r.s.ackEnums.Store(env.GetProducerId(), e)
		}
	}
}

// numbersClients are the gRPC libraries of the published SDKs that write ACK enums as
// numbers and compare them as numbers (wire contract): grpc-js for the JS SDK, grpcio for the
// Python SDK. Their user-agent starts with these.
var numbersClients = []string{"grpc-node-js/", "grpc-python/"}

// ackDialect is how the ACKs on agentID's stream are written, decided per delivery: the
// stream's sw4rm-ack-enums metadata when set; else the dialect of the last ACK the agent
// sent through this frontend; else numbers for the published JS and Python SDKs' gRPC
// libraries (a producer that never acknowledges still compares numbers); else names. A bad
// metadata value is refused.
func (r *routerService) ackDialect(md metadata.MD, agentID string) (func() protocol.AckEnums, *protocol.Error) {
	if v := md.Get(wire.AckEnumsKey); len(v) > 0 {
		e, perr := protocol.ParseAckEnums(v[0])
		if perr != nil {
			return nil, perr
		}
		return func() protocol.AckEnums { return e }, nil
	}
	fallback := protocol.AckEnumNames
	for _, ua := range md.Get("user-agent") {
		for _, c := range numbersClients {
			if strings.Contains(ua, c) {
				fallback = protocol.AckEnumNumbers
			}
		}
	}
	return func() protocol.AckEnums {
		if e, ok := r.s.ackEnums.Load(agentID); ok {
			return e.(protocol.AckEnums)
		}
		return fallback
	}, nil
}

// streamContext ends a stream a little before its deadline, so that its status is written:
// at the deadline itself gRPC's transport resets the stream (RST_STREAM CANCEL) at the same
// moment, and whichever comes first is what a client whose own timer is late sees.
func streamContext(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, deadline.Add(-streamDeadlineMargin(time.Until(deadline))))
}

// streamingAgent reads the registry record of the agent that opens a stream.
func (r *routerService) streamingAgent(ctx context.Context, agentID string) (store.AgentRecord, error) {
	rec, err := r.s.store.Registry().GetAgent(ctx, agentID)
	if errors.Is(err, store.ErrNotFound) {
		return rec, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "agent %q is not registered; call RegistryService.RegisterAgent first", agentID)
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return rec, status.FromContextError(cerr).Err()
		}
		return rec, failed("registry lookup", err)
	}
	return rec, nil
}

// streamStatus is the status a stream ends with, given the router's error.
func streamStatus(ctx context.Context, err error) error {
	var rerr *router.ResumeError
	if errors.As(err, &rerr) {
		if rerr.Invalid {
			return status.Error(codes.OutOfRange, rerr.Error())
		}
		return status.Error(codes.FailedPrecondition, rerr.Error())
	}
	if cerr := ctx.Err(); cerr != nil {
		// The deadline passed or the consumer went away; unconfirmed rows stay for its next
		// stream. The call ends with the context's status (DEADLINE_EXCEEDED or CANCELLED):
		// OK would tell the client that the server ended the stream normally.
		return status.FromContextError(cerr).Err()
	}
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return err
		}
		return status.Errorf(codes.Unavailable, "internal_error: stream interrupted: %v", err)
	}
	return nil
}

// streamDeadlineMargin is how long before its deadline a stream with remaining time left
// ends: a quarter of it, at most 250 ms. The margin must cover the scheduling delay of a
// loaded server between the handler's own deadline and the transport's reset; a tenth (50 ms
// of a 500 ms deadline) was not always enough on a busy 2-core machine.
func streamDeadlineMargin(remaining time.Duration) time.Duration {
	return max(0, min(remaining/4, 250*time.Millisecond))
}

// AckDelivery confirms a streamed row; recorded=false for an unknown or already-confirmed
// seq, or another agent's seq (wire contract).
func (r *routerService) AckDelivery(ctx context.Context, req *routerpb.DeliveryAckRequest) (*routerpb.DeliveryAckResponse, error) {
	if perr := protocol.ValidateDeliveryAck(req); perr != nil {
		return nil, perr
	}
	permanent := req.GetOutcome() == routerpb.DeliveryAckOutcome_DELIVERY_ACK_OUTCOME_PERMANENT_FAILURE
	ok, err := r.s.router.ConfirmDelivery(ctx, req.GetAgentId(), req.GetSeq(), req.GetMessageId(), permanent)
	if err != nil {
		r.s.log.Error("ack delivery failed", "agent_id", req.GetAgentId(), "seq", req.GetSeq(), "error", err)
		return nil, failed("store the confirmation", err)
	}
	return &routerpb.DeliveryAckResponse{Recorded: ok}, nil
}

// signalReady tells an agent's lifecycle workflow that the agent showed readiness. A failure
// is logged, not returned: the agent stays INITIALIZING and its next heartbeat or stream
// tries again, while the init timer keeps the outcome bounded (§8.3).
func (s *Server) signalReady(ctx context.Context, agentID, via string) {
	if err := s.temporal.SignalWorkflow(ctx, workflows.AgentWorkflowID(agentID), "", workflows.AgentReadySignal, workflows.AgentReady{Via: via}); err != nil {
		s.log.Warn("could not signal agent readiness", "agent_id", agentID, "via", via, "error", err)
	}
}
