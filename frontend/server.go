// Package frontend is SW4RM's gRPC frontend: one file per canonical service, translating
// envelopes and lifecycle calls onto the router, the store and Temporal workflows. It is
// stateless, so any number of frontends can share one store and one Temporal namespace; the
// one thing it remembers, the ACK dialect each agent last wrote (docs/messaging.md), is a hint
// re-learned after a restart.
package frontend

import (
	"context"
	"crypto/ed25519"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/outbox"
	"github.com/sw4rm/sw4rm-temporal/proto/activitypb"
	"github.com/sw4rm/sw4rm-temporal/proto/auditadminpb"
	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
	"github.com/sw4rm/sw4rm-temporal/proto/dlqadminpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitlpb"
	"github.com/sw4rm/sw4rm-temporal/proto/keyadminpb"
	"github.com/sw4rm/sw4rm-temporal/proto/loggingpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/proto/reasoningpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowdefpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/proto/worktreepb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/acl"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/inference"
	"github.com/sw4rm/sw4rm-temporal/protocol/voting"
	"github.com/sw4rm/sw4rm-temporal/reasoning"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/taskadmission"
)

// Config holds what the services need besides their collaborators.
type Config struct {
	// TaskQueue is the Temporal task queue the workflows run on.
	TaskQueue string
	// ToolPreApproved are the tools whose PRIVILEGED and FULL_ACCESS calls run without a
	// HITL wait (§18.5.3: "unless policy pre-approves"): "provider/tool" patterns, * allowed
	// (SW4RM_TOOL_PREAPPROVED).
	ToolPreApproved []string
	// ToolApprovalTimeout bounds a tool call's wait for an operator's approval
	// (SW4RM_TOOL_APPROVAL_TIMEOUT); zero means the HITL default.
	ToolApprovalTimeout time.Duration
	// StreamKeepAlive is how long a stream over Connect or gRPC-Web stays silent before it
	// is sent an empty keep-alive item (SW4RM_STREAM_KEEPALIVE); zero means
	// DefaultStreamKeepAlive.
	StreamKeepAlive time.Duration
	// AgentInitTimeout bounds INITIALIZING (§8.3); zero means the workflow default.
	AgentInitTimeout time.Duration
	// HeartbeatInterval is how often the scheduler heartbeats each agent (§14); zero means
	// the workflow default.
	HeartbeatInterval time.Duration
	// HeartbeatMisses is the debounce before an agent is marked unavailable; zero means the
	// workflow default.
	HeartbeatMisses int
	// HITLPolicy authenticates and authorizes operators (§15.1).
	HITLPolicy hitl.Policy
	// HITLDecisionKey is the deployment's decision key, with which the frontend attests the
	// decisions of operators it authenticated (hitl.Attest); the workers hold its
	// public key in HITLPolicy.DecisionKeys. Without it HitlAdminService.Decide refuses.
	HITLDecisionKey ed25519.PrivateKey
	// HITLTimeout is the deadline of invocations raised through HitlService.Decide.
	HITLTimeout time.Duration
	// RoomPolicy is the negotiation room's decision policy (§17.5); zero fields take defaults.
	RoomPolicy voting.Policy
	// RoomTimeout bounds a room's wait for votes; zero means the workflow default.
	RoomTimeout time.Duration
	// HandoffCompletionTimeout is how long an accepted handoff whose budget sets no deadline
	// waits for completion before it expires (§17.6); zero means
	// protocol.DefaultHandoffCompletionTimeout.
	HandoffCompletionTimeout time.Duration
	// PreemptTimeout bounds an unanswered PREEMPT_REQUEST outside a non-preemptible section
	// before forced preemption (§7.2); zero means the workflow default.
	PreemptTimeout time.Duration
	// TerminateGrace is TERMINATE's grace period before KILL (§7.2); zero means the default.
	TerminateGrace time.Duration
	// AgentHistoryLimit is the history length past which an agent's lifecycle continues as
	// new; zero means workflows.AgentHistoryLimit.
	AgentHistoryLimit int
	// SchedulerPolicy is task admission's policy (§9), as the worker's activities have it.
	SchedulerPolicy taskadmission.Policy
	// Auth is the authenticator the server's interceptors use (ServerOptions); RegisterAgent
	// runs the key handshake with it (§6.2). Nil means SW4RM_AUTH=off.
	Auth *Authenticator
	// ACL is the access-control policy of §6.3 (SW4RM_ACL_FILE, docs/acl.md); nil means none
	// is configured, and its Decide allows everything.
	ACL *acl.Policy
	// Reasoning answers ReasoningProxy.EvaluateDebate and Summarize (reasoning.FromConfig:
	// SW4RM_REASONING_EXTERNAL); nil means reasoning.Builtin.
	Reasoning reasoning.Engine
}

// Server holds the collaborators shared by every service.
type Server struct {
	store    store.Store
	router   *router.Router
	temporal client.Client
	sink     *audit.Sink
	log      *slog.Logger
	cfg      Config
	// relay makes the in-line attempt of the outbox entries the services write (see bridge.RegisterOutboxHandlers).
	relay *outbox.Relay
	// ackEnums is the ACK dialect (protocol.AckEnums) each agent wrote its last ACK in
	// through this frontend, by agent_id: its streams answer in the same dialect.
	ackEnums sync.Map
}

// New builds the frontend; relay delivers the outbox entries its services write to the store.
func New(st store.Store, r *router.Router, tc client.Client, relay *outbox.Relay, sink *audit.Sink, log *slog.Logger, cfg Config) *Server {
	return &Server{store: st, router: r, temporal: tc, relay: relay, sink: sink, log: log, cfg: cfg}
}

// Register serves every canonical SW4RM service on g, plus grpc.health.v1 and server
// reflection (so grpcurl lists the services).
func (s *Server) Register(g *grpc.Server) *health.Server {
	routerpb.RegisterRouterServiceServer(g, &routerService{s: s})
	registrypb.RegisterRegistryServiceServer(g, &registryService{s: s})
	loggingpb.RegisterLoggingServiceServer(g, &loggingService{s: s})
	activitypb.RegisterActivityServiceServer(g, &activityService{s: s})

	schedulerpb.RegisterSchedulerServiceServer(g, &schedulerService{s: s})
	schedulerpb.RegisterSchedulerPolicyServiceServer(g, &schedulerPolicyService{s: s})
	hitlpb.RegisterHitlServiceServer(g, &hitlService{s: s})
	hitladminpb.RegisterHitlAdminServiceServer(g, &hitlAdminService{s: s})
	dlqadminpb.RegisterDlqAdminServiceServer(g, &dlqAdminService{s: s, requeue: s.router})
	auditadminpb.RegisterAuditAdminServiceServer(g, &auditAdminService{s: s})
	keyadminpb.RegisterKeyAdminServiceServer(g, &keyAdminService{s: s})
	worktreepb.RegisterWorktreeServiceServer(g, &worktreeService{s: s})
	toolpb.RegisterToolServiceServer(g, &toolService{s: s})
	connectorpb.RegisterConnectorServiceServer(g, &connectorService{s: s})
	negotiationpb.RegisterNegotiationServiceServer(g, &negotiationService{s: s})
	negotiationroompb.RegisterNegotiationRoomServiceServer(g, &roomService{s: s})
	handoffpb.RegisterHandoffServiceServer(g, &handoffService{s: s})
	workflowpb.RegisterWorkflowServiceServer(g, &workflowService{s: s})
	workflowdefpb.RegisterDefinitionServiceServer(g, &definitionService{s: s})
	directorypb.RegisterDirectoryServiceServer(g, &directoryService{s: s})
	reasoningpb.RegisterReasoningProxyServer(g, &reasoningService{s: s, engine: &inference.RuleEngine{}})

	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	reflection.Register(g)
	return hs
}

// MaxRequestBytes is the largest request the gRPC frontend reads when payloads may be at most
// maxPayload bytes (SW4RM_MAX_PAYLOAD_BYTES): four times the limit, plus 64 KiB for the rest
// of the envelope — with the default 1 MiB limit, about gRPC's own default of 4 MiB. Up to it
// an oversize payload reaches the router and gets the protocol's answer: oversize_payload, a
// NACK and a dead letter (§5.4, §21.1). gRPC refuses a larger request itself, before any
// handler or interceptor runs, with RESOURCE_EXHAUSTED: to learn who sent it the server would
// have to hold all of it in memory, and this bound is what keeps a request's memory finite.
func MaxRequestBytes(maxPayload int) int {
	if maxPayload <= 0 {
		maxPayload = protocol.DefaultMaxPayloadBytes
	}
	return int(min(4*int64(maxPayload)+64<<10, math.MaxInt32))
}

// ServerOptions returns what every SW4RM gRPC server needs: the codec and interceptor of
// authentication and authorization (auth.go; nil means SW4RM_AUTH=off), the error table
// (errors.go) and panic recovery (a handler bug becomes codes.Internal, never a crashed
// server).
func ServerOptions(log *slog.Logger, a *Authenticator) []grpc.ServerOption {
	if a == nil {
		// Off still needs the codec: it answers a malformed request with InvalidArgument.
		a = NewAuthenticator(AuthConfig{Mode: auth.Off})
	}
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(a.codec),
		// errors* is outermost: every refusal, including authentication's and a recovered
		// panic's, leaves through the one error table (errors.go).
		grpc.ChainUnaryInterceptor(errorsUnary, recoverUnary(log), a.unary),
		grpc.ChainStreamInterceptor(errorsStream, recoverStream(log), a.stream),
	}
}

func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("panic in handler", "method", info.FullMethod, "panic", p)
				err = status.Errorf(codes.Internal, "internal_error: %s failed unexpectedly; the server logged the cause", info.FullMethod)
			}
		}()
		return handler(ctx, req)
	}
}

func recoverStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("panic in stream handler", "method", info.FullMethod, "panic", p)
				err = status.Errorf(codes.Internal, "internal_error: %s failed unexpectedly; the server logged the cause", info.FullMethod)
			}
		}()
		return handler(srv, ss)
	}
}

// serviceOf returns "/pkg.Service/" of a full method name.
func serviceOf(fullMethod string) string {
	if i := strings.LastIndex(fullMethod, "/"); i > 0 {
		return fullMethod[:i+1]
	}
	return fullMethod
}
