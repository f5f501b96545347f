package metrics

import (
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/audit"
)

// dashboardPath is the Grafana dashboard deploy/ ships.
const dashboardPath = "../deploy/grafana/sw4rm.json"

// The lexer finds the metric names of an expression and nothing else: not functions,
// keywords, labels, label values, ranges, numbers or Grafana variables.
func TestQueryNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`histogram_quantile(0.99, sum by (le, method) (rate(sw4rm_rpc_duration_seconds_bucket{method=~"Send.*"}[$__rate_interval])))`: {"sw4rm_rpc_duration_seconds_bucket"},
		`sum by (method) (a_total) - sum without (code) (b_total) offset 5m`:                                                          {"a_total", "b_total"},
		`topk(10, max by (agent_id) (x)) > bool 2 or on (job) vector(1e3)`:                                                            {"x"},
		`rate(y{code!="OK", agent_id="$agent"}[5m]) * 100`:                                                                            {"y"},
	} {
		require.Equal(t, want, QueryNames(expr), expr)
	}
}

// Every metric the dashboard queries exists: described by a process's collectors, or
// recorded through the Temporal SDK's handler (whose names test/metrics_worker_test.go finds
// on a running worker). A bogus name is the control: the check can fail.
func TestDashboardNamesExist(t *testing.T) {
	raw, err := os.ReadFile(dashboardPath)
	require.NoError(t, err)
	queries, err := DashboardQueries(raw)
	require.NoError(t, err)
	require.NotEmpty(t, queries)
	known := knownNames(t)
	var names []string
	for _, q := range queries {
		names = append(names, QueryNames(q)...)
	}
	require.NotEmpty(t, names)
	for _, n := range names {
		require.True(t, known[n], "the dashboard queries %s, which no process registers", n)
	}
	require.False(t, known["sw4rm_router_inbound_queue_dpeth"], "control: a misspelt name is unknown")
	missing := slices.DeleteFunc(QueryNames(`sum(sw4rm_router_inbound_queue_dpeth)`), func(n string) bool { return known[n] })
	require.Equal(t, []string{"sw4rm_router_inbound_queue_dpeth"}, missing)
}

// knownNames is what a process registers: its collectors' descriptions, and the series
// the Temporal SDK's handler makes of the SDK's and the task workflow's recordings.
func knownNames(t *testing.T) map[string]bool {
	m, _ := newTestRouter(t)
	m.ObserveAccess(audit.NewAccessLog(nil, audit.AccessRefused))
	known := map[string]bool{}
	for _, n := range m.Described() {
		known[n] = true
	}
	h := m.TemporalHandler(slog.New(slog.DiscardHandler))
	for _, timer := range []string{"temporal_workflow_task_execution_latency", "temporal_workflow_task_schedule_to_start_latency",
		"temporal_activity_execution_latency", "sw4rm_task_duration"} {
		h.Timer(timer).Record(time.Millisecond)
	}
	h.Counter("sw4rm_task_transitions").Inc(1)
	for name, f := range families(t, m) {
		known[name] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				known[name+s] = true
			}
		}
	}
	for n := range known {
		require.False(t, strings.Contains(n, "."), "%s: Prometheus names have no dots", n)
	}
	return known
}
