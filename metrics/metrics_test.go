package metrics

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// families gathers m's registry by metric name.
func families(t *testing.T, m *Router) map[string]*dto.MetricFamily {
	t.Helper()
	fs, err := m.reg.Gather()
	require.NoError(t, err)
	out := map[string]*dto.MetricFamily{}
	for _, f := range fs {
		out[f.GetName()] = f
	}
	return out
}

// value returns the counter, gauge or histogram count of name's series whose labels include
// every pair of labels ("k=v").
func value(t *testing.T, m *Router, name string, labels ...string) float64 {
	t.Helper()
	f, ok := families(t, m)[name]
	require.True(t, ok, "no metric %s", name)
	for _, s := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range s.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for _, kv := range labels {
			k, v, _ := strings.Cut(kv, "=")
			match = match && have[k] == v
		}
		if !match {
			continue
		}
		switch {
		case s.Counter != nil:
			return s.GetCounter().GetValue()
		case s.Gauge != nil:
			return s.GetGauge().GetValue()
		case s.Histogram != nil:
			return float64(s.GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("no series of %s with %v", name, labels)
	return 0
}

func newTestRouter(t *testing.T) (*Router, store.Store) {
	st := memory.New()
	t.Cleanup(st.Close)
	return New(st), st
}

// Every metric this package registers is named under sw4rm_, except the Go runtime's and
// the process's standard ones.
func TestEveryNameHasThePrefix(t *testing.T) {
	m, _ := newTestRouter(t)
	m.ObserveAccess(audit.NewAccessLog(nil, audit.AccessRefused))
	for name := range families(t, m) {
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			continue
		}
		require.True(t, strings.HasPrefix(name, "sw4rm_"), "%s lacks the sw4rm_ prefix", name)
	}
}

// The RPC interceptors count unary calls by service, method and final code, time them,
// count streams' starts and ends, and label a method the server does not serve "unknown".
func TestRPCInterceptors(t *testing.T) {
	m, _ := newTestRouter(t)
	unary, stream := m.RPCInterceptors()
	m.RPCMethods(map[string]grpc.ServiceInfo{"sw4rm.router.RouterService": {Methods: []grpc.MethodInfo{
		{Name: "SendMessage"}, {Name: "StreamIncoming", IsServerStream: true}}}})
	call := func(method string, err error) {
		_, got := unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) {
			return nil, err
		})
		require.Equal(t, err, got, "the interceptor hands the handler's answer on")
	}
	call("/sw4rm.router.RouterService/SendMessage", nil)
	call("/sw4rm.router.RouterService/SendMessage", status.Error(codes.ResourceExhausted, "buffer_full"))
	call("/evil/Method1", status.Error(codes.Unimplemented, "no"))
	err := stream(nil, nil, &grpc.StreamServerInfo{FullMethod: "/sw4rm.router.RouterService/StreamIncoming", IsServerStream: true},
		func(any, grpc.ServerStream) error { return status.Error(codes.Canceled, "gone") })
	require.Equal(t, codes.Canceled, status.Code(err))

	svc := "service=sw4rm.router.RouterService"
	require.Equal(t, 1.0, value(t, m, "sw4rm_rpc_requests_total", svc, "method=SendMessage", "code=OK"))
	require.Equal(t, 1.0, value(t, m, "sw4rm_rpc_requests_total", svc, "method=SendMessage", "code=ResourceExhausted"))
	require.Equal(t, 2.0, value(t, m, "sw4rm_rpc_duration_seconds", svc, "method=SendMessage"))
	require.Equal(t, 1.0, value(t, m, "sw4rm_rpc_streams_started_total", svc, "method=StreamIncoming"))
	require.Equal(t, 1.0, value(t, m, "sw4rm_rpc_streams_ended_total", svc, "method=StreamIncoming", "code=Canceled"))
	require.Equal(t, 1.0, value(t, m, "sw4rm_rpc_requests_total", "service=unknown", "method=unknown", "code=Unimplemented"))

	// A nil Router's interceptors pass calls through and record nothing.
	var none *Router
	u, _ := none.RPCInterceptors()
	resp, err := u(context.Background(), "req", &grpc.UnaryServerInfo{FullMethod: "/x/Y"}, func(_ context.Context, req any) (any, error) { return req, nil })
	require.NoError(t, err)
	require.Equal(t, "req", resp)
}

// The audit events of the patterns' transitions feed the per-pattern counters and latencies.
func TestAuditPatterns(t *testing.T) {
	m, _ := newTestRouter(t)
	sink := audit.New(slog.New(slog.DiscardHandler), nil)
	sink.SetObserver(m.ObserveAudit)
	ctx := context.Background()
	for _, e := range []audit.Event{
		{Type: "task.submitted"},
		{Type: "workflow.started"},
		{Type: "dag.node.running"}, {Type: "dag.node.completed"}, {Type: "dag.node.completed"},
		{Type: "handoff.accepted"}, {Type: "handoff.offered"},
		{Type: "negotiation.open"}, {Type: "negotiation.propose"}, {Type: "negotiation.counter"},
		{Type: "tool.call_finished", Details: map[string]any{"provider_id": "builtin", "tool_name": "echo", "error_code": "", "duration_ms": int64(40)}},
		{Type: "tool.call_finished", Details: map[string]any{"provider_id": "builtin", "tool_name": "echo", "error_code": "TOOL_TIMEOUT", "duration_ms": int64(9000)}},
		{Type: "hitl.invoked", Details: map[string]any{"reason_type": "CONFLICT"}},
		{Type: "hitl.decided", Details: map[string]any{"reason_type": "CONFLICT", "decision": "approve", "fallback": false, "waited_ms": int64(90_000)}},
	} {
		sink.Record(ctx, e)
	}
	// An admission's row is written by the store; its log line still counts.
	sink.Log(ctx, audit.Event{Type: "message.admitted"})

	require.Equal(t, 1.0, value(t, m, "sw4rm_tasks_submitted_total"))
	require.Equal(t, 1.0, value(t, m, "sw4rm_dag_runs_started_total"))
	require.Equal(t, 2.0, value(t, m, "sw4rm_dag_node_transitions_total", "state=completed"))
	require.Equal(t, 1.0, value(t, m, "sw4rm_handoff_transitions_total", "state=accepted"))
	require.NotContains(t, families(t, m)["sw4rm_handoff_transitions_total"].String(), "offered", "an offer is not a state")
	require.Equal(t, 2.0, value(t, m, "sw4rm_negotiation_rounds_total"))
	require.Equal(t, 1.0, value(t, m, "sw4rm_negotiation_events_total", "kind=open"))
	require.Equal(t, 1.0, value(t, m, "sw4rm_tool_calls_total", "tool=echo", "code=OK"))
	require.Equal(t, 1.0, value(t, m, "sw4rm_tool_calls_total", "tool=echo", "code=TOOL_TIMEOUT"))
	require.Equal(t, 2.0, value(t, m, "sw4rm_tool_call_duration_seconds", "tool=echo"))
	require.Equal(t, 1.0, value(t, m, "sw4rm_hitl_invocations_total", "reason_type=CONFLICT"))
	require.Equal(t, 1.0, value(t, m, "sw4rm_hitl_decisions_total", "decision=approve", "fallback=false"))
	require.Equal(t, 1.0, value(t, m, "sw4rm_hitl_wait_seconds", "reason_type=CONFLICT"))
	require.Equal(t, 1.0, value(t, m, "sw4rm_audit_events_total", "type=message.admitted"))
}

// The backlog gauges come from the store and Temporal at scrape time, cached for backlogTTL,
// and a failing source leaves its series out with sw4rm_backlog_up at 0.
func TestBacklogGauges(t *testing.T) {
	m, st := newTestRouter(t)
	var calls atomic.Int32
	runsErr := errors.New("temporal unreachable")
	var fail atomic.Bool
	m.CountOpenDAGRuns(func(context.Context) (int64, error) {
		calls.Add(1)
		if fail.Load() {
			return 0, runsErr
		}
		return 3, nil
	})
	require.NoError(t, st.HITL().PutInvocation(t.Context(), store.HITLRecord{InvocationID: "i1", ReasonType: "CONFLICT", CreatedAt: time.Now()}))
	require.Equal(t, 1.0, value(t, m, "sw4rm_hitl_pending"))
	require.Equal(t, 0.0, value(t, m, "sw4rm_dead_letters"))
	require.Equal(t, 3.0, value(t, m, "sw4rm_dag_runs_open"))
	require.Equal(t, 1.0, value(t, m, "sw4rm_backlog_up", "source=temporal"))
	require.Equal(t, int32(1), calls.Load(), "the second scrape within the TTL reads nothing")

	fail.Store(true)
	m.backlog.mu.Lock()
	m.backlog.at = time.Time{} // the TTL passed
	m.backlog.mu.Unlock()
	require.Equal(t, 0.0, value(t, m, "sw4rm_backlog_up", "source=temporal"))
	require.NotContains(t, families(t, m), "sw4rm_dag_runs_open")
	require.Equal(t, 1.0, value(t, m, "sw4rm_backlog_up", "source=store"))
}

// The Temporal SDK's metrics reach the same registry under Temporal's names, counters as
// counters and timers as histograms in seconds.
func TestTemporalHandler(t *testing.T) {
	m, _ := newTestRouter(t)
	h := m.TemporalHandler(slog.New(slog.DiscardHandler))
	h.WithTags(map[string]string{"namespace": "default"}).Counter("temporal_request").Inc(2)
	h.Timer("temporal_workflow_task_execution_latency").Record(20 * time.Millisecond)
	// One name with two tag sets, as the SDK records them.
	h.WithTags(map[string]string{"workflow_type": "TaskWorkflow", "state": "COMPLETED"}).Counter("sw4rm_task_transitions").Inc(1)
	h.WithTags(map[string]string{"workflow_type": "TaskWorkflow"}).Counter("sw4rm_task_transitions").Inc(1)
	require.Equal(t, 2.0, value(t, m, "temporal_request_total", "namespace=default"))
	require.Equal(t, 1.0, value(t, m, "temporal_workflow_task_execution_latency_seconds"))
	require.Equal(t, 1.0, value(t, m, "sw4rm_task_transitions_total", "state=COMPLETED"))
}
