package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sw4rm/sw4rm-temporal/audit"
)

// accessDecisions and accessWritten describe the access log's counts (§6.5): every decision
// is counted whether or not SW4RM_AUDIT_ACCESS writes it, so a sampled or unwritten one is
// never silently dropped — decided minus written is what the audit log does not hold.
var (
	accessDecisions = prometheus.NewDesc("sw4rm_access_decisions_total",
		"Access decisions made (§6.5), by kind (auth: a method's authorization; access: a tool call, resource scope or ACL decision) and outcome.",
		[]string{"kind", "allowed"}, nil)
	accessWritten = prometheus.NewDesc("sw4rm_access_decisions_audited_total",
		"Access decisions written to the audit log, by kind and outcome; the rest were counted only (SW4RM_AUDIT_ACCESS).",
		[]string{"kind", "allowed"}, nil)
)

// accessCollector reads an access log's counts at scrape time.
type accessCollector struct{ log *audit.AccessLog }

// Describe implements prometheus.Collector.
func (c accessCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- accessDecisions
	ch <- accessWritten
}

// Collect implements prometheus.Collector.
func (c accessCollector) Collect(ch chan<- prometheus.Metric) {
	for _, n := range c.log.Counts() {
		allowed := strconv.FormatBool(n.Allowed)
		ch <- prometheus.MustNewConstMetric(accessDecisions, prometheus.CounterValue, float64(n.Decided), n.Kind, allowed)
		ch <- prometheus.MustNewConstMetric(accessWritten, prometheus.CounterValue, float64(n.Written), n.Kind, allowed)
	}
}

// ObserveAccess exposes the access log's counts as sw4rm_access_decisions_total and
// sw4rm_access_decisions_audited_total; call once.
func (m *Router) ObserveAccess(l *audit.AccessLog) { m.register(accessCollector{log: l}) }
