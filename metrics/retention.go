package metrics

import "github.com/prometheus/client_golang/prometheus"

// retentionKinds are the kinds of record the router's housekeeping prunes (router/retention.go),
// the label values of sw4rm_retention_pruned_total, which start at 0 so a rate of them exists
// before the first deletion.
var retentionKinds = []string{"stream_rows", "dead_letters", "audit_events", "messages", "handoffs",
	"handoff_fences", "hitl_invocations", "tool_calls"}

// newPruned makes the counter of the rows retention deleted, by kind.
func newPruned() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sw4rm_retention_pruned_total",
		Help: "Rows the retention sweeps deleted, by kind of record (docs/reliability.md, \"Retention\")."}, []string{"kind"})
	for _, k := range retentionKinds {
		c.WithLabelValues(k)
	}
	return c
}

// Pruned counts n rows of kind that retention deleted (router.PruneMetrics).
func (m *Router) Pruned(kind string, n int) {
	m.pruned.WithLabelValues(kind).Add(float64(n))
}
