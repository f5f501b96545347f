package metrics

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// unknownMethod labels a call to a method the server does not serve: a client may send any
// name, and each must not become a series of its own.
const unknownMethod = "unknown"

// rpcStats records RED metrics per RPC: requests and their latency by service, method and
// code, and the starts and ends of streams. Its interceptors are the server's outermost
// (RPCInterceptors), so they see every call's final status — after the error table,
// authentication and a recovered panic have answered — whichever protocol carried it (native
// gRPC, or Connect and gRPC-Web through the same grpc.Server). Interceptors rather than a
// stats handler: a stats handler makes grpc-go time and report every header and payload of
// every call, which cost a message's round trip 5 % (docs/observability.md, "Metrics").
type rpcStats struct {
	requests      *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	streamsBegun  *prometheus.CounterVec
	streamsEnded  *prometheus.CounterVec
	streamLatency *prometheus.HistogramVec
	// methods holds each served method's series (Methods); nil until then.
	methods atomic.Pointer[map[string]*methodSeries]
}

// methodSeries are one method's series whose labels do not depend on the call, looked up once.
type methodSeries struct {
	service, method string
	ok              prometheus.Counter
	latency         prometheus.Observer
	begun           prometheus.Counter
	streamLatency   prometheus.Observer
}

func newRPCStats(register func(...prometheus.Collector)) *rpcStats {
	h := &rpcStats{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sw4rm_rpc_requests_total",
			Help: "Unary RPCs served, by service, method and gRPC status code."}, []string{"service", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sw4rm_rpc_duration_seconds",
			Help: "Time to serve a unary RPC, by service and method.", Buckets: latencyBuckets}, []string{"service", "method"}),
		streamsBegun: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sw4rm_rpc_streams_started_total",
			Help: "Streaming RPCs started, by service and method; started minus ended is the streams open."}, []string{"service", "method"}),
		streamsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sw4rm_rpc_streams_ended_total",
			Help: "Streaming RPCs ended, by service, method and gRPC status code."}, []string{"service", "method", "code"}),
		streamLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sw4rm_rpc_stream_duration_seconds",
			Help: "How long a streaming RPC stayed open, by service and method.", Buckets: latencyBuckets}, []string{"service", "method"}),
	}
	register(h.requests, h.latency, h.streamsBegun, h.streamsEnded, h.streamLatency)
	return h
}

// Methods names the methods the server serves; a call to any other (possible only before
// Methods, since gRPC answers Unimplemented before any interceptor runs) is labelled "unknown".
func (h *rpcStats) Methods(services map[string]grpc.ServiceInfo) {
	known := map[string]*methodSeries{}
	for svc, info := range services {
		for _, m := range info.Methods {
			known["/"+svc+"/"+m.Name] = h.series(svc, m.Name)
		}
	}
	h.methods.Store(&known)
}

// series looks up the series of a method.
func (h *rpcStats) series(service, method string) *methodSeries {
	return &methodSeries{service: service, method: method,
		ok: h.requests.WithLabelValues(service, method, codes.OK.String()), latency: h.latency.WithLabelValues(service, method),
		begun: h.streamsBegun.WithLabelValues(service, method), streamLatency: h.streamLatency.WithLabelValues(service, method)}
}

// of returns the series of the method fullMethod names.
func (h *rpcStats) of(fullMethod string) *methodSeries {
	if known := h.methods.Load(); known != nil {
		if s := (*known)[fullMethod]; s != nil {
			return s
		}
	}
	return h.series(unknownMethod, unknownMethod)
}

// unary records a unary call.
func (h *rpcStats) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	s := h.of(info.FullMethod)
	if code := status.Code(err); code == codes.OK {
		s.ok.Inc()
	} else {
		h.requests.WithLabelValues(s.service, s.method, code.String()).Inc()
	}
	s.latency.Observe(time.Since(start).Seconds())
	return resp, err
}

// stream records a streaming call.
func (h *rpcStats) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	s := h.of(info.FullMethod)
	s.begun.Inc()
	err := handler(srv, ss)
	h.streamsEnded.WithLabelValues(s.service, s.method, status.Code(err).String()).Inc()
	s.streamLatency.Observe(time.Since(start).Seconds())
	return err
}

// RPCInterceptors returns the interceptors that record the RPC metrics (sw4rm_rpc_*); give
// them to the server first, so that they are the outermost, and the served methods to
// RPCMethods once they are registered. A nil Router's record nothing.
func (m *Router) RPCInterceptors() (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	if m == nil {
		return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
				return handler(ctx, req)
			}, func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
				return handler(srv, ss)
			}
	}
	return m.rpc.unary, m.rpc.stream
}

// RPCMethods names the methods the server serves (grpc.Server.GetServiceInfo), which label
// the RPC metrics.
func (m *Router) RPCMethods(services map[string]grpc.ServiceInfo) {
	if m != nil {
		m.rpc.Methods(services)
	}
}
