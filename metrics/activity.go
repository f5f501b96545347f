package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sw4rm/sw4rm-temporal/store"
)

var (
	activeDesc = prometheus.NewDesc("sw4rm_activity_buffer_active_entries", "Active activity buffer entries in total (§10).", nil, nil)
	limitDesc  = prometheus.NewDesc("sw4rm_activity_buffer_limit_entries", "The activity buffer's total limit (§10.1).", nil, nil)
	warnDesc   = prometheus.NewDesc("sw4rm_activity_buffer_over_warning", "1 when the activity buffer is past 80 % of its total limit (§10.1 warning).", nil, nil)
)

// activityCollector reads the activity buffer's usage at scrape time, so every frontend
// reports the shared buffer the same way.
type activityCollector struct {
	ab  store.ActivityBuffer
	lim store.ActivityLimits
}

func (c *activityCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- activeDesc
	ch <- limitDesc
	ch <- warnDesc
}

func (c *activityCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	u, err := c.ab.Usage(ctx, "", c.lim)
	if err != nil {
		return // the scrape goes on without these series; sw4rm_router_buffer_stats_up covers store health
	}
	warn := 0.0
	if u.Utilization() > store.ActivityWarnRatio {
		warn = 1
	}
	ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, float64(u.Active))
	ch <- prometheus.MustNewConstMetric(limitDesc, prometheus.GaugeValue, float64(u.Limits.MaxActive))
	ch <- prometheus.MustNewConstMetric(warnDesc, prometheus.GaugeValue, warn)
}
