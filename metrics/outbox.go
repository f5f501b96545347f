package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// outboxScrapeLimit bounds how many entries a scrape reads; the pending gauge saturates
// there, which is already far past any healthy value.
const outboxScrapeLimit = 10000

var (
	outboxPendingDesc = prometheus.NewDesc("sw4rm_outbox_pending",
		"Entries to Temporal written by the store and not delivered yet (the outbox; saturates at 10000). Growing means Temporal is not taking them.", nil, nil)
	outboxOldestDesc = prometheus.NewDesc("sw4rm_outbox_oldest_age_seconds",
		"Age of the oldest undelivered entry to Temporal; 0 when there is none.", nil, nil)
	outboxFailingDesc = prometheus.NewDesc("sw4rm_outbox_failing",
		"Undelivered entries whose last attempt failed.", nil, nil)
)

// outboxCollector reads the store's outbox at scrape time (docs/architecture.md, "The
// to Temporal"), so that an operator sees a Temporal outage piling up entries, and every
// frontend reports the shared outbox the same way.
type outboxCollector struct {
	ob store.Outbox
}

func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- outboxPendingDesc
	ch <- outboxOldestDesc
	ch <- outboxFailingDesc
}

func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	hs, err := c.ob.Pending(ctx, outboxScrapeLimit)
	if err != nil {
		return // the scrape goes on without these series; sw4rm_router_buffer_stats_up covers store health
	}
	oldest, failing := 0.0, 0
	for i, h := range hs {
		if i == 0 {
			oldest = max(0, time.Since(h.CreatedAt).Seconds())
		}
		if h.Attempts > 0 {
			failing++
		}
	}
	ch <- prometheus.MustNewConstMetric(outboxPendingDesc, prometheus.GaugeValue, float64(len(hs)))
	ch <- prometheus.MustNewConstMetric(outboxOldestDesc, prometheus.GaugeValue, oldest)
	ch <- prometheus.MustNewConstMetric(outboxFailingDesc, prometheus.GaugeValue, float64(failing))
}
