// Package metrics exposes a process's metrics in the Prometheus format on /metrics of its HTTP
// port, every name under the prefix sw4rm_ (docs/observability.md, "Metrics", lists them):
// the back-pressure series §13 lists, named as the RFC names them with sw4rm_ in front and
// dots spelled as underscores (router.inbound_queue_depth → sw4rm_router_inbound_queue_depth);
// RED metrics of every RPC (rpc.go); per-pattern counters and latencies taken from the audit
// events every transition writes (patterns.go); gauges read from the store at scrape time
// (backlog.go); and the Temporal SDK's own metrics (temporal.go), which keep Temporal's names.
package metrics

import (
	"context"
	"net/http"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.temporal.io/sdk/client"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// latencyBuckets span loopback deliveries (sub-millisecond) to slow consumers (minutes).
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

// Router is a process's metrics, in one registry: it records the router's observations (it
// implements router.Metrics) and holds the other collectors of this package.
type Router struct {
	reg                *prometheus.Registry
	rejects            *prometheus.CounterVec
	nacks              *prometheus.CounterVec
	enqueueLatency     *prometheus.HistogramVec
	dequeueLatency     *prometheus.HistogramVec
	processTime        *prometheus.HistogramVec
	privilegedOverflow *prometheus.CounterVec
	pruned             *prometheus.CounterVec
	buffers            *bufferCollector
	rpc                *rpcStats
	patterns           *patterns
	backlog            *backlogCollector
	temporalOnce       sync.Once
	temporal           client.MetricsHandler
	// collectors are those registered through register, which Described describes.
	collectors []prometheus.Collector
}

// register registers collectors on the process's registry and keeps them for Described.
func (m *Router) register(cs ...prometheus.Collector) {
	m.reg.MustRegister(cs...)
	m.collectors = append(m.collectors, cs...)
}

// New registers the metrics. Depth and the oldest row's age are read from the store at scrape
// time, so they are right whichever frontend admitted the rows; the capacity is the router's
// (SetBufferCapacity).
func New(st store.Store) *Router {
	reg := prometheus.NewRegistry()
	m := &Router{
		reg:     reg,
		buffers: &bufferCollector{st: st},
		rejects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sw4rm_router_enqueue_rejects_total",
			Help: "Admissions rejected, by recipient and reason (error_code)."}, []string{"agent_id", "reason"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sw4rm_router_nacks_total",
			Help: "NACKs sent, by the agent they went to and error_code."}, []string{"agent_id", "error_code"}),
		enqueueLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sw4rm_router_enqueue_latency_seconds",
			Help: "Time from receiving a message to its admission into the recipient's buffer.", Buckets: latencyBuckets}, []string{"agent_id"}),
		dequeueLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sw4rm_agent_dequeue_latency_seconds",
			Help: "Time from admission to the recipient's stream fetching it, by lane.", Buckets: latencyBuckets}, []string{"agent_id", "lane"}),
		processTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sw4rm_agent_process_time_seconds",
			Help: "Time from admission to the recipient's FULFILLED ACK.", Buckets: latencyBuckets}, []string{"agent_id"}),
		privilegedOverflow: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sw4rm_router_privileged_overflow_total",
			Help: "PRIVILEGED messages demoted to STANDARD by the rate limit (§7.3), by producer."}, []string{"agent_id"}),
		pruned: newPruned(),
	}
	m.register(m.rejects, m.nacks, m.enqueueLatency, m.dequeueLatency, m.processTime, m.privilegedOverflow, m.pruned,
		m.buffers,
		// Beside the classic go_memstats_*, the live heap after the last GC
		// (go_gc_heap_live_bytes): heap in use swings up to twice the live heap between two
		// collections, so only the live heap tells a soak whether memory stays flat.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.GoRuntimeMetricsRule{Matcher: liveHeapMetric})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.register(&activityCollector{ab: st.ActivityBuffer(), lim: store.ActivityLimits{}.Effective()})
	m.register(&outboxCollector{ob: st.Outbox()})
	m.rpc = newRPCStats(m.register)
	m.patterns = newPatterns(m.register)
	m.backlog = &backlogCollector{st: st}
	m.register(m.backlog)
	if gc, ok := st.(GroupCommitter); ok {
		m.register(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sw4rm_store_group_commits_total",
				Help: "Transactions the message plane's group commit committed (PostgreSQL)."},
				func() float64 { g, _ := gc.GroupCommitStats(); return float64(g) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sw4rm_store_group_commit_writes_total",
				Help: "Writes (admissions, planned steps, artifacts) those transactions carried; over sw4rm_store_group_commits_total, the mean group size."},
				func() float64 { _, w := gc.GroupCommitStats(); return float64(w) }))
	}
	return m
}

// GroupCommitter is a store that commits concurrent writes in groups and counts them
// (store/postgres).
type GroupCommitter interface {
	// GroupCommitStats returns the groups committed and the writes they carried.
	GroupCommitStats() (groups, writes int64)
}

// Handler serves /metrics.
func (m *Router) Handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

// Rejected counts a rejected admission.
func (m *Router) Rejected(agentID string, code commonpb.ErrorCode) {
	m.rejects.WithLabelValues(agentID, code.String()).Inc()
}

// Nacked counts a NACK.
func (m *Router) Nacked(agentID string, code commonpb.ErrorCode) {
	m.nacks.WithLabelValues(agentID, code.String()).Inc()
}

// Enqueued observes the enqueue latency.
func (m *Router) Enqueued(agentID string, d time.Duration) {
	m.enqueueLatency.WithLabelValues(agentID).Observe(d.Seconds())
}

// Dequeued observes the dequeue latency.
func (m *Router) Dequeued(agentID string, d time.Duration, lane commonpb.CommunicationClass) {
	m.dequeueLatency.WithLabelValues(agentID, lane.String()).Observe(d.Seconds())
}

// Processed observes the processing time.
func (m *Router) Processed(agentID string, d time.Duration) {
	m.processTime.WithLabelValues(agentID).Observe(d.Seconds())
}

// PrivilegedOverflow counts a demotion.
func (m *Router) PrivilegedOverflow(producerID string) {
	m.privilegedOverflow.WithLabelValues(producerID).Inc()
}

var (
	depthDesc = prometheus.NewDesc("sw4rm_router_inbound_queue_depth", "Unconfirmed messages in the agent's inbound buffer.", []string{"agent_id"}, nil)
	capDesc   = prometheus.NewDesc("sw4rm_router_inbound_queue_capacity", "Configured inbound buffer capacity.", []string{"agent_id"}, nil)
	ageDesc   = prometheus.NewDesc("sw4rm_router_oldest_enqueued_age_seconds", "Age of the oldest unconfirmed message in the buffer.", []string{"agent_id"}, nil)
	utilDesc  = prometheus.NewDesc("sw4rm_router_buffer_stats_up", "1 when the buffer statistics could be read from the store.", nil, nil)
)

// bufferCollector reads buffer statistics from the store at scrape time.
type bufferCollector struct {
	st       store.Store
	capacity atomic.Int64
}

// SetBufferCapacity sets the inbound buffer capacity the router admits up to (§13), which
// sw4rm_router_inbound_queue_capacity reports.
func (m *Router) SetBufferCapacity(n int) { m.buffers.capacity.Store(int64(n)) }

func (c *bufferCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- depthDesc
	ch <- capDesc
	ch <- ageDesc
	ch <- utilDesc
}

func (c *bufferCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	stats, err := c.st.Messages().BufferStats(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(utilDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(utilDesc, prometheus.GaugeValue, 1)
	now := time.Now()
	for _, s := range stats {
		ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, float64(s.Depth), s.AgentID)
		ch <- prometheus.MustNewConstMetric(capDesc, prometheus.GaugeValue, float64(c.capacity.Load()), s.AgentID)
		age := 0.0
		if !s.OldestEnqueuedAt.IsZero() {
			age = now.Sub(s.OldestEnqueuedAt).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(ageDesc, prometheus.GaugeValue, age, s.AgentID)
	}
}

// liveHeapMetric selects runtime/metrics' live heap, exported as go_gc_heap_live_bytes.
var liveHeapMetric = regexp.MustCompile(`^/gc/heap/live:bytes$`)
