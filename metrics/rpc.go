package metrics

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// unknownMethod labels a call to a method the server does not serve: a client may send any
// name, and each must not become a series of its own.
const unknownMethod = "unknown"

// rpcStats is a gRPC stats handler that records RED metrics per RPC: requests and their
// latency by service, method and code, and the starts and ends of streams. A stats handler,
// rather than an interceptor, sees every call with its final status — after the error table,
// authentication and a recovered panic have answered — and whichever protocol carried it
// (native gRPC, or Connect and gRPC-Web through the same grpc.Server).
type rpcStats struct {
	requests      *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	streamsBegun  *prometheus.CounterVec
	streamsEnded  *prometheus.CounterVec
	streamLatency *prometheus.HistogramVec
	// methods holds the full method names the server serves (Methods); nil until then.
	methods atomic.Pointer[map[string]bool]
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

// Methods names the methods the server serves; calls to any other are labelled "unknown".
func (h *rpcStats) Methods(services map[string]grpc.ServiceInfo) {
	known := map[string]bool{}
	for svc, info := range services {
		for _, m := range info.Methods {
			known["/"+svc+"/"+m.Name] = true
		}
	}
	h.methods.Store(&known)
}

// rpcKey carries a call's labels from TagRPC to HandleRPC.
type rpcKey struct{}

type rpcCall struct {
	service, method string
	stream          bool
}

// TagRPC implements stats.Handler.
func (h *rpcStats) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	c := &rpcCall{service: unknownMethod, method: unknownMethod}
	if known := h.methods.Load(); known != nil && (*known)[info.FullMethodName] {
		// "/sw4rm.router.RouterService/SendMessage" → service and method.
		if svc, m, ok := strings.Cut(strings.TrimPrefix(info.FullMethodName, "/"), "/"); ok {
			c.service, c.method = svc, m
		}
	}
	return context.WithValue(ctx, rpcKey{}, c)
}

// HandleRPC implements stats.Handler.
func (h *rpcStats) HandleRPC(ctx context.Context, s stats.RPCStats) {
	c, _ := ctx.Value(rpcKey{}).(*rpcCall)
	if c == nil || s.IsClient() {
		return
	}
	switch s := s.(type) {
	case *stats.Begin:
		c.stream = s.IsClientStream || s.IsServerStream
		if c.stream {
			h.streamsBegun.WithLabelValues(c.service, c.method).Inc()
		}
	case *stats.End:
		code := status.Code(s.Error).String()
		d := s.EndTime.Sub(s.BeginTime).Seconds()
		if c.stream {
			h.streamsEnded.WithLabelValues(c.service, c.method, code).Inc()
			h.streamLatency.WithLabelValues(c.service, c.method).Observe(d)
			return
		}
		h.requests.WithLabelValues(c.service, c.method, code).Inc()
		h.latency.WithLabelValues(c.service, c.method).Observe(d)
	}
}

// TagConn implements stats.Handler.
func (h *rpcStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

// HandleConn implements stats.Handler.
func (h *rpcStats) HandleConn(context.Context, stats.ConnStats) {}

// RPCStats returns the gRPC stats handler that records the RPC metrics
// (sw4rm_rpc_*); give it to the server with grpc.StatsHandler, and the served methods to
// RPCMethods once they are registered. A nil Router's records nothing.
func (m *Router) RPCStats() stats.Handler {
	if m == nil {
		return noStats{}
	}
	return m.rpc
}

// RPCMethods names the methods the server serves (grpc.Server.GetServiceInfo), which label
// the RPC metrics; a call to any other is labelled "unknown".
func (m *Router) RPCMethods(services map[string]grpc.ServiceInfo) {
	if m != nil {
		m.rpc.Methods(services)
	}
}

// noStats is a stats handler that records nothing.
type noStats struct{}

func (noStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (noStats) HandleRPC(context.Context, stats.RPCStats)                         {}
func (noStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (noStats) HandleConn(context.Context, stats.ConnStats)                       {}
