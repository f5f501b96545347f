package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// backlogTTL is how long a scrape reuses the last counts: scrapers of several processes and
// dashboards refreshing at once cost the store one read per process per backlogTTL.
const backlogTTL = 10 * time.Second

// backlogTimeout bounds the reads of one scrape; a slow store or Temporal leaves the series
// out (and sw4rm_backlog_up at 0) rather than holding the scrape.
const backlogTimeout = 2 * time.Second

var (
	pendingHITLDesc = prometheus.NewDesc("sw4rm_hitl_pending",
		"HITL invocations waiting for a decision (§15), in the store every process shares.", nil, nil)
	deadLettersDesc = prometheus.NewDesc("sw4rm_dead_letters",
		"Dead letters not requeued (§21.1).", nil, nil)
	openHandoffsDesc = prometheus.NewDesc("sw4rm_handoffs_open",
		"Handoffs in flight (§17.6): PENDING (offered, not answered) or ACCEPTED (taken, not completed).", nil, nil)
	openToolCallsDesc = prometheus.NewDesc("sw4rm_tool_calls_open",
		"Tool calls in flight (§18.2): recorded, without their final frame.", nil, nil)
	openDAGRunsDesc = prometheus.NewDesc("sw4rm_dag_runs_open",
		"DAG runs running (§17.7), as Temporal's visibility counts them.", nil, nil)
	backlogUpDesc = prometheus.NewDesc("sw4rm_backlog_up",
		"1 when the last read of the backlog gauges succeeded, by source (store, temporal).", []string{"source"}, nil)
)

// RunCounter counts the DAG runs that are running; nil when the process has no Temporal
// client.
type RunCounter func(ctx context.Context) (int64, error)

// backlogCollector reads the store's Backlog, and the open DAG runs from Temporal, at scrape
// time, every frontend and worker reporting the shared state the same way. Reads are
// bounded by backlogTimeout and cached for backlogTTL.
type backlogCollector struct {
	st   store.BacklogCounter
	runs RunCounter

	mu      sync.Mutex
	at      time.Time
	backlog store.Backlog
	storeOK bool
	open    int64
	runsOK  bool
}

// Describe implements prometheus.Collector.
func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{pendingHITLDesc, deadLettersDesc, openHandoffsDesc, openToolCallsDesc, openDAGRunsDesc, backlogUpDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock() // one read at a time; concurrent scrapes wait for it and share its result
	defer c.mu.Unlock()
	if time.Since(c.at) > backlogTTL {
		c.refresh()
	}
	up := func(ok bool) float64 {
		if ok {
			return 1
		}
		return 0
	}
	ch <- prometheus.MustNewConstMetric(backlogUpDesc, prometheus.GaugeValue, up(c.storeOK), "store")
	if c.storeOK {
		b := c.backlog
		ch <- prometheus.MustNewConstMetric(pendingHITLDesc, prometheus.GaugeValue, float64(b.PendingHITL))
		ch <- prometheus.MustNewConstMetric(deadLettersDesc, prometheus.GaugeValue, float64(b.DeadLetters))
		ch <- prometheus.MustNewConstMetric(openHandoffsDesc, prometheus.GaugeValue, float64(b.OpenHandoffs))
		ch <- prometheus.MustNewConstMetric(openToolCallsDesc, prometheus.GaugeValue, float64(b.OpenToolCalls))
	}
	if c.runs == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(backlogUpDesc, prometheus.GaugeValue, up(c.runsOK), "temporal")
	if c.runsOK {
		ch <- prometheus.MustNewConstMetric(openDAGRunsDesc, prometheus.GaugeValue, float64(c.open))
	}
}

// refresh reads the counts again, the store's and Temporal's at the same time.
func (c *backlogCollector) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), backlogTimeout)
	defer cancel()
	var wg sync.WaitGroup
	if c.runs != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := c.runs(ctx)
			c.open, c.runsOK = n, err == nil
		}()
	}
	b, err := c.st.Backlog(ctx)
	c.backlog, c.storeOK = b, err == nil
	wg.Wait()
	c.at = time.Now()
}

// CountOpenDAGRuns adds the sw4rm_dag_runs_open gauge, read through count at scrape time
// (cached like the store's gauges); call once, before serving.
func (m *Router) CountOpenDAGRuns(count RunCounter) {
	m.backlog.mu.Lock()
	m.backlog.runs = count
	m.backlog.at = time.Time{}
	m.backlog.mu.Unlock()
}
