package metrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
)

// waitBuckets span a HITL wait: an operator's click (seconds) to a deadline (a day).
var waitBuckets = []float64{1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600}

// patterns counts the patterns' transitions from the audit events that record them: every
// transition goes through the one sink (§19), in the process whose activity or handler made
// it, so the counts are taken where the side effects are and never from workflow code,
// which replays.
type patterns struct {
	events          *prometheus.CounterVec
	dagNodes        *prometheus.CounterVec
	dagRuns         prometheus.Counter
	handoffs        *prometheus.CounterVec
	negotiation     *prometheus.CounterVec
	rounds          prometheus.Counter
	toolCalls       *prometheus.CounterVec
	toolDuration    *prometheus.HistogramVec
	hitlInvocations *prometheus.CounterVec
	hitlDecisions   *prometheus.CounterVec
	hitlWait        *prometheus.HistogramVec
	tasksSubmitted  prometheus.Counter
}

func newPatterns(register func(...prometheus.Collector)) *patterns {
	p := &patterns{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sw4rm_audit_events_total",
			Help: "Audit events written by this process (§19), by type."}, []string{"type"}),
		dagNodes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sw4rm_dag_node_transitions_total",
			Help: "DAG node transitions (§17.7), by the state entered."}, []string{"state"}),
		dagRuns: prometheus.NewCounter(prometheus.CounterOpts{Name: "sw4rm_dag_runs_started_total",
			Help: "DAG runs started through WorkflowService.StartWorkflow (§17.7)."}),
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sw4rm_handoff_transitions_total",
			Help: "Handoff transitions (§17.6), by the state entered."}, []string{"state"}),
		negotiation: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sw4rm_negotiation_events_total",
			Help: "Negotiation events published (§17.2), by kind: open, policy, propose, counter, evaluate, decide, abort."}, []string{"kind"}),
		rounds: prometheus.NewCounter(prometheus.CounterOpts{Name: "sw4rm_negotiation_rounds_total",
			Help: "Negotiation rounds (§17.2): drafts proposed or countered, debate turns included."}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sw4rm_tool_calls_total",
			Help: "Tool calls ended (§18), by provider, tool and code (OK, or the error code)."}, []string{"provider_id", "tool", "code"}),
		toolDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sw4rm_tool_call_duration_seconds",
			Help: "Time from a tool call's record to its end, by provider and tool.", Buckets: latencyBuckets}, []string{"provider_id", "tool"}),
		hitlInvocations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sw4rm_hitl_invocations_total",
			Help: "HITL invocations raised (§15), by reason type."}, []string{"reason_type"}),
		hitlDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sw4rm_hitl_decisions_total",
			Help: "HITL invocations decided (§15), by reason type, decision and whether the fallback decided."}, []string{"reason_type", "decision", "fallback"}),
		hitlWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sw4rm_hitl_wait_seconds",
			Help: "Time from a HITL invocation to its decision, by reason type and whether the fallback decided.", Buckets: waitBuckets}, []string{"reason_type", "fallback"}),
		tasksSubmitted: prometheus.NewCounter(prometheus.CounterOpts{Name: "sw4rm_tasks_submitted_total",
			Help: "Tasks submitted through SchedulerService.SubmitTask (§7)."}),
	}
	register(p.events, p.dagNodes, p.dagRuns, p.handoffs, p.negotiation, p.rounds, p.toolCalls, p.toolDuration,
		p.hitlInvocations, p.hitlDecisions, p.hitlWait, p.tasksSubmitted)
	return p
}

// observe counts one audit event. Event types are names in the code, not data, so each label
// value is one of a bounded set.
func (p *patterns) observe(e audit.Event) {
	p.events.WithLabelValues(e.Type).Inc()
	family, rest, _ := strings.Cut(e.Type, ".")
	switch family {
	case "dag":
		if state, ok := strings.CutPrefix(rest, "node."); ok {
			p.dagNodes.WithLabelValues(state).Inc()
		}
	case "workflow":
		if rest == "started" {
			p.dagRuns.Inc()
		}
	case "task":
		if rest == "submitted" {
			p.tasksSubmitted.Inc()
		}
	case "handoff":
		// handoff.<status> is a transition; handoff.offered, .fenced and the like are not.
		if _, ok := handoffpb.HandoffStatus_value[strings.ToUpper(rest)]; ok {
			p.handoffs.WithLabelValues(rest).Inc()
		}
	case "negotiation":
		p.negotiation.WithLabelValues(rest).Inc()
		if rest == "propose" || rest == "counter" {
			p.rounds.Inc()
		}
	case "tool":
		if rest == "call_finished" {
			code := str(e.Details["error_code"])
			if code == "" {
				code = "OK"
			}
			provider, tool := str(e.Details["provider_id"]), str(e.Details["tool_name"])
			p.toolCalls.WithLabelValues(provider, tool, code).Inc()
			if d, ok := millis(e.Details["duration_ms"]); ok {
				p.toolDuration.WithLabelValues(provider, tool).Observe(d.Seconds())
			}
		}
	case "hitl":
		reason := str(e.Details["reason_type"])
		switch rest {
		case "invoked":
			p.hitlInvocations.WithLabelValues(reason).Inc()
		case "decided":
			fallback := "false"
			if b, _ := e.Details["fallback"].(bool); b {
				fallback = "true"
			}
			p.hitlDecisions.WithLabelValues(reason, str(e.Details["decision"]), fallback).Inc()
			if d, ok := millis(e.Details["waited_ms"]); ok {
				p.hitlWait.WithLabelValues(reason, fallback).Observe(d.Seconds())
			}
		}
	}
}

// str is v when it is a string, else "".
func str(v any) string {
	s, _ := v.(string)
	return s
}

// millis reads a duration in milliseconds that the details hold as a Go integer.
func millis(v any) (time.Duration, bool) {
	switch n := v.(type) {
	case int64:
		return time.Duration(n) * time.Millisecond, true
	case int:
		return time.Duration(n) * time.Millisecond, true
	case float64:
		return time.Duration(n * float64(time.Millisecond)), true
	}
	return 0, false
}

// ObserveAudit counts one audit event into the per-pattern metrics; the audit sink calls it
// for every event it records or logs (audit.Sink.SetObserver).
func (m *Router) ObserveAudit(e audit.Event) { m.patterns.observe(e) }
