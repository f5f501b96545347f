package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/sw4rm/sw4rm-temporal/metrics"
)

// openDAGRunsQuery selects the running DAG runs (§17.7) in Temporal's visibility.
const openDAGRunsQuery = "WorkflowType = 'DAGRun' AND ExecutionStatus = 'Running'"

// openDAGRuns counts the running DAG runs through Temporal's visibility, for the
// sw4rm_dag_runs_open gauge: the runs live in Temporal, not in the store.
func openDAGRuns(c client.Client, namespace string) metrics.RunCounter {
	return func(ctx context.Context) (int64, error) {
		resp, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: namespace, Query: openDAGRunsQuery})
		if err != nil {
			return 0, err
		}
		return resp.GetCount(), nil
	}
}

// serveWorkerHTTP serves /metrics and /healthz on cfg.HTTPAddr for a process without the
// server role, so that every process is scraped alike; the server role serves them with the
// rest of its HTTP port (httpHandler). tlsCfg, when set, makes the port speak only TLS.
func (a *App) serveWorkerHTTP(cfg Config, tlsCfg *tls.Config) error {
	if cfg.HTTPAddr == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.metrics.Handler())
	mux.HandleFunc("GET /healthz", a.healthz)
	return a.serveHTTPPort(cfg.HTTPAddr, tlsCfg, mux, "/healthz /metrics")
}

// healthz answers /healthz: the process is up, and which store it uses.
func (a *App) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = fmt.Fprintf(w, "ok store=%s\n", a.store.Kind())
}
