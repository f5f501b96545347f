package telemetry

import (
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc/stats"
)

// ServerHandler is the gRPC server's span per call (otelgrpc), continuing the caller's trace
// from its `traceparent` metadata. The frontend installs it only while Enabled: with tracing
// off no handler runs at all. Connect and gRPC-Web calls reach the same grpc.Server through
// vanguard, which passes their HTTP headers on as metadata, so they get it too. Health checks
// are left out: probes poll them, and their spans would bury the protocol's.
func ServerHandler() stats.Handler {
	return otelgrpc.NewServerHandler(
		otelgrpc.WithPropagators(Propagator()),
		otelgrpc.WithFilter(func(info *stats.RPCTagInfo) bool {
			return !strings.HasPrefix(info.FullMethodName, "/grpc.health.v1.")
		}))
}

// ClientHandler is the client side of ServerHandler, for the process's own connections to
// the frontend (the console's): it sends the caller's span as `traceparent`.
func ClientHandler() stats.Handler {
	return otelgrpc.NewClientHandler(otelgrpc.WithPropagators(Propagator()))
}
