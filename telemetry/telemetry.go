// Package telemetry sets up OpenTelemetry tracing for a sw4rm process, so that a message, a
// task, a DAG run or a tool call can be followed across agents, frontends, workers and
// workflows as one trace (§19: every transition observable and correlated).
//
// Tracing is off by default, and then nothing is installed: the global tracer provider is
// OpenTelemetry's no-op, no gRPC stats handler or Temporal interceptor is added, so off costs
// nothing. SW4RM_TRACING turns it on; the standard OTEL_* variables configure the export
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_TRACES_SAMPLER,
// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_BSP_*).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of sw4rm's own spans.
const ScopeName = "github.com/sw4rm/sw4rm-temporal"

// enabled is set while a tracer provider installed by Setup (or Install) is in place.
var enabled atomic.Bool

// Enabled reports whether tracing is on in this process: callers skip instrumentation that
// would cost something even with a no-op provider (gRPC stats handlers, interceptors).
func Enabled() bool { return enabled.Load() }

// Tracer returns the tracer sw4rm's own spans are made with. With tracing off it is the
// global no-op tracer, whose spans cost a few nanoseconds and record nothing.
func Tracer() trace.Tracer { return otel.Tracer(ScopeName) }

// Propagator is W3C trace context with baggage: the `traceparent` and `tracestate` gRPC
// metadata agents send and receive, and the propagator the Temporal interceptor carries
// spans across workflows with.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// Setup installs, when on is true, a global tracer provider that exports over OTLP as the
// OTEL_* variables say (HTTP/protobuf by default, as the OpenTelemetry specification sets;
// OTEL_EXPORTER_OTLP_PROTOCOL=grpc for gRPC), and the global propagator. service names the
// process when OTEL_SERVICE_NAME does not. The returned function flushes and stops the
// export; with on false it does nothing.
func Setup(ctx context.Context, on bool, service string) (shutdown func(context.Context) error, err error) {
	if !on {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := newExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service)),
		// From the environment last, so that OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win.
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	// The sampler comes from OTEL_TRACES_SAMPLER (parent-based always-on by default), and the
	// batch processor's limits from OTEL_BSP_*: the SDK reads both itself.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	Install(tp)
	return func(ctx context.Context) error {
		enabled.Store(false)
		return tp.Shutdown(ctx)
	}, nil
}

// Install makes tp the global tracer provider and turns tracing on; tests install an SDK
// provider with an in-memory span recorder (go.opentelemetry.io/otel/sdk/trace/tracetest).
func Install(tp trace.TracerProvider) {
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator())
	enabled.Store(true)
}

// Uninstall puts the no-op provider back and turns tracing off (tests).
func Uninstall() {
	otel.SetTracerProvider(noop.NewTracerProvider())
	enabled.Store(false)
}

// newExporter makes the OTLP exporter of the protocol OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL names; each reads its endpoint, headers, TLS and timeout from
// the OTEL_EXPORTER_OTLP_* variables.
func newExporter(ctx context.Context) (*otlptrace.Exporter, error) {
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch strings.ToLower(proto) {
	case "", "http/protobuf":
		return otlptracehttp.New(ctx)
	case "grpc":
		return otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: want grpc or http/protobuf", proto)
	}
}
