package telemetry

import (
	"fmt"

	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"
)

// workflowSpanKey is the workflow-context key under which the Temporal tracing interceptor
// keeps the current span (TracerOptions.SpanContextKey). It is sw4rm's own key rather than the
// contrib package's hidden one so that workflow code can make a span it was handed the
// parent of the commands that follow (WithSpan).
type workflowSpanKey struct{}

// signalSpansKey is the workflow-context key of a workflow's signalSpans.
type signalSpansKey struct{}

// maxSignalSpans bounds the spans kept per signal name, so a workflow that never takes the
// spans of a traced signal does not grow without bound; the oldest goes first.
const maxSignalSpans = 256

// WorkflowSpan is the span of a signal a workflow received (TakeSignalSpan), kept with the
// work the signal brought so that the commands that work causes later join the signal's
// trace rather than the workflow's own. The zero WorkflowSpan is no span. It lives in memory
// only: it is never part of a workflow's input, result or history.
type WorkflowSpan struct{ s interceptor.TracerSpan }

// IsZero reports whether w holds no span.
func (w WorkflowSpan) IsZero() bool { return w.s == nil }

// TemporalInterceptors returns the Temporal client interceptors of tracing, empty when
// tracing is off: the SDK's OpenTelemetry interceptor (go.temporal.io/sdk/contrib/opentelemetry)
// with the global tracer and Propagator, which starts a span for every workflow start,
// signal, update, query, activity and child workflow and carries its context in the
// Temporal header `_tracer-data`, and a recorder of the spans of the signals named in traced
// (TakeSignalSpan). Workers built from the client inherit both. The SDK interceptor starts
// no span while a workflow replays, and adds its header to new commands only, so recorded
// histories replay unchanged.
func TemporalInterceptors(traced ...string) ([]interceptor.ClientInterceptor, error) {
	if !Enabled() {
		return nil, nil
	}
	tr, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		Tracer:            Tracer(),
		TextMapPropagator: Propagator(),
		SpanContextKey:    workflowSpanKey{},
	})
	if err != nil {
		return nil, fmt.Errorf("temporal tracing interceptor: %w", err)
	}
	names := make(map[string]bool, len(traced))
	for _, n := range traced {
		names[n] = true
	}
	// The tracing interceptor comes first, so the recorder, inside it, sees the signal's span
	// in the context the tracing interceptor hands on.
	return []interceptor.ClientInterceptor{tr, &signalRecorder{names: names}}, nil
}

// signalRecorder keeps, per workflow execution, the spans of the traced signals it handled,
// for the workflow to take in the order it receives them (TakeSignalSpan).
type signalRecorder struct {
	interceptor.InterceptorBase
	names map[string]bool
}

// InterceptWorkflow gives each workflow execution its own record.
func (r *signalRecorder) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	i := &signalInbound{names: r.names, spans: &signalSpans{byName: map[string][]interceptor.TracerSpan{}}}
	i.Next = next
	return i
}

// signalSpans is one workflow execution's record: the spans of the traced signals not yet
// taken, oldest first, by signal name. Only the workflow's own coroutines touch it, one at a
// time, so it needs no lock.
type signalSpans struct {
	byName map[string][]interceptor.TracerSpan
}

type signalInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	names map[string]bool
	spans *signalSpans
}

// ExecuteWorkflow hands the record to the workflow function through its context.
func (i *signalInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	return i.Next.ExecuteWorkflow(workflow.WithValue(ctx, signalSpansKey{}, i.spans), in)
}

// HandleSignal records the span the tracing interceptor started for a traced signal (from
// the header its sender wrote), or no span while replaying, where the tracing interceptor
// starts none: the record then keeps one entry per signal either way, in the channel's order.
func (i *signalInbound) HandleSignal(ctx workflow.Context, in *interceptor.HandleSignalInput) error {
	if i.names[in.SignalName] {
		var s interceptor.TracerSpan
		if !workflow.IsReplaying(ctx) {
			s, _ = ctx.Value(workflowSpanKey{}).(interceptor.TracerSpan)
		}
		q := append(i.spans.byName[in.SignalName], s)
		if len(q) > maxSignalSpans {
			q = q[len(q)-maxSignalSpans:]
		}
		i.spans.byName[in.SignalName] = q
	}
	return i.Next.HandleSignal(ctx, in)
}

// TakeSignalSpan returns the span of the oldest signal named name that the workflow has
// received and not yet taken the span of: call it once per message received from the signal's
// channel, right after receiving it. It returns the zero WorkflowSpan when tracing is off,
// the signal is not traced (TemporalInterceptors), while replaying, or when the signal's
// sender had no span. It only reads memory, and what it returns changes no command, so
// workflow code may call it freely.
func TakeSignalSpan(ctx workflow.Context, name string) WorkflowSpan {
	rec, _ := ctx.Value(signalSpansKey{}).(*signalSpans)
	if rec == nil {
		return WorkflowSpan{}
	}
	q := rec.byName[name]
	if len(q) == 0 {
		return WorkflowSpan{}
	}
	s := q[0]
	q[0] = nil
	rec.byName[name] = q[1:]
	return WorkflowSpan{s: s}
}

// WithSpan returns ctx with s as the parent of the spans of the commands started from it
// (activities, local activities, child workflows, signals), or ctx itself for the zero
// WorkflowSpan. It changes no command: only which trace their spans join.
func WithSpan(ctx workflow.Context, s WorkflowSpan) workflow.Context {
	if s.s == nil {
		return ctx
	}
	return workflow.WithValue(ctx, workflowSpanKey{}, s.s)
}
