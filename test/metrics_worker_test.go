package test

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/app"
	"github.com/sw4rm/sw4rm-temporal/metrics"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestWorkerServesMetrics: a worker-only process (PostgreSQL, shared with a server-only
// one) serves /metrics and /healthz on its HTTP port; after a task ran, its scrape holds the
// Temporal SDK's metrics, the task workflow's transitions, the audit events of the
// activities it ran and the backlog gauges, and the server's holds the RPC metrics. Every
// name the Grafana dashboard queries is in one of the two scrapes or described by the
// collectors every process registers.
func TestWorkerServesMetrics(t *testing.T) {
	cfg := newConfig(t, "postgres")
	ctx := context.Background()
	srv, err := app.Start(ctx, cfg, app.Roles{Server: true}, testLogger())
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	wcfg := cfg
	wcfg.GRPCAddr = ""
	wrk, err := app.Start(ctx, wcfg, app.Roles{Worker: true}, testLogger())
	require.NoError(t, err)
	t.Cleanup(wrk.Stop)
	require.NotEqual(t, srv.HTTPAddr(), wrk.HTTPAddr())
	sys := &system{app: srv, cfg: cfg}
	worker := &system{app: wrk, cfg: wcfg}

	res, err := http.Get("http://" + wrk.HTTPAddr() + "/healthz")
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Contains(t, string(body), "store=postgres")

	a := dialAgent(t, sys, "metered")
	serve(t, a, func(_ context.Context, run *sdk.TaskRun) ([]byte, error) { return []byte("done"), nil })
	waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)
	sc := schedulerpb.NewSchedulerServiceClient(dialRaw(t, sys))
	task := uniq(t, "task")
	require.True(t, submit(t, sc, a.ID(), task, 0, "repo:shop path:src/**").GetAccepted())
	waitTask(t, sys, task, workflows.TaskCompleted)

	var w string
	require.Eventually(t, func() bool {
		w = scrape(t, worker)
		_, done := series(w, "sw4rm_task_transitions_total{", `state="COMPLETED"`)
		return done
	}, 20*time.Second, 200*time.Millisecond, "the worker counts the task's transitions")
	for _, name := range []string{
		"temporal_workflow_task_execution_latency_seconds_bucket{", // the SDK's, through OpenTelemetry
		"temporal_workflow_task_schedule_to_start_latency_seconds_bucket{",
		"temporal_activity_execution_latency_seconds_bucket{",
		"sw4rm_task_duration_seconds_bucket{",
		"sw4rm_audit_events_total{",
		"sw4rm_hitl_pending ", "sw4rm_dead_letters ", "sw4rm_tool_calls_open ", "sw4rm_handoffs_open ",
		"sw4rm_dag_runs_open ", "sw4rm_outbox_pending ", "go_goroutines ",
	} {
		assert.True(t, strings.Contains(w, "\n"+name), "the worker serves %s", strings.TrimRight(name, "{ "))
	}
	s := scrape(t, sys)
	n, ok := series(s, "sw4rm_rpc_requests_total{", `method="SubmitTask"`, `code="OK"`)
	assert.True(t, ok && n >= 1, "the server counts SubmitTask: %v", n)
	_, ok = series(s, "sw4rm_rpc_streams_started_total{", `method="StreamIncoming"`)
	assert.True(t, ok, "the server counts the agent's stream")
	_, ok = series(s, "sw4rm_tasks_submitted_total")
	assert.True(t, ok)

	// Every name of the dashboard exists.
	raw, err := os.ReadFile("../deploy/grafana/sw4rm.json")
	require.NoError(t, err)
	queries, err := metrics.DashboardQueries(raw)
	require.NoError(t, err)
	known := map[string]bool{}
	for _, n := range metrics.New(srv.Store()).Described() {
		known[n] = true
	}
	for _, q := range queries {
		for _, name := range metrics.QueryNames(q) {
			assert.True(t, known[name] || strings.Contains(w+s, "\n"+name+"{") || strings.Contains(w+s, "\n"+name+" "),
				"the dashboard queries %s, which neither process serves", name)
		}
	}
}
