package metrics

import (
	"log/slog"

	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
)

// TemporalHandler returns the metrics handler for the Temporal client
// (client.Options.MetricsHandler): the SDK's own metrics — workflow and activity task
// latencies, polls, slots, requests — and what workflow code records through
// workflow.GetMetricsHandler, which skips replays. They are served with the rest on /metrics
// under the names Temporal documents (temporal_*, so Temporal's published SDK dashboards
// work unchanged) and the sw4rm_* names the workflows give theirs.
//
// Why OpenTelemetry between the SDK and Prometheus: the SDK records one metric name with
// differing tag sets (a worker's tags, then a workflow type's), which a Prometheus
// collector with fixed label names refuses, while an OpenTelemetry meter takes any
// attributes; its Prometheus exporter then registers on this process's registry, so one
// scrape returns both. Counters are monotonic (temporal_*_total), timers histograms in
// seconds with the buckets of every other latency here.
func (m *Router) TemporalHandler(log *slog.Logger) client.MetricsHandler {
	m.temporalOnce.Do(func() {
		exp, err := otelprom.New(otelprom.WithRegisterer(m.reg), otelprom.WithoutTargetInfo(), otelprom.WithoutScopeInfo(),
			otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
		if err != nil {
			// Only a second registration of the same names fails, which the Once rules out.
			log.Warn("Temporal SDK metrics are not served", "error", err)
			m.temporal = client.MetricsNopHandler
			return
		}
		seconds := sdkmetric.NewView(sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram, Unit: "s"},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: latencyBuckets}})
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithView(seconds))
		m.temporal = temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
			Meter:                mp.Meter("go.temporal.io/sdk"),
			UseMonotonicCounters: true,
			// A meter refusing an instrument must not panic a worker (the SDK's default).
			OnError: func(err error) { log.Warn("Temporal SDK metric refused", "error", err) },
		})
	})
	return m.temporal
}
