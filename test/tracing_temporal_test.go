package test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/telemetry"
	"github.com/sw4rm/sw4rm-temporal/tools"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// spanTree is what a test recorder holds, read by trace.
type spanTree struct{ rec *tracetest.SpanRecorder }

// ended returns the ended spans.
func (s spanTree) ended() []sdktrace.ReadOnlySpan { return s.rec.Ended() }

// find returns the first ended span named name whose attribute key is value ("" matches any).
func (s spanTree) find(name, key, value string) sdktrace.ReadOnlySpan {
	for _, sp := range s.ended() {
		if sp.Name() != name {
			continue
		}
		if key == "" {
			return sp
		}
		for _, a := range sp.Attributes() {
			if string(a.Key) == key && a.Value.String() == value {
				return sp
			}
		}
	}
	return nil
}

// inTrace returns the ended spans of one trace.
func (s spanTree) inTrace(id trace.TraceID) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, sp := range s.ended() {
		if sp.SpanContext().TraceID() == id {
			out = append(out, sp)
		}
	}
	return out
}

// parentOf returns the span of spans that is sp's parent, or nil.
func parentOf(spans []sdktrace.ReadOnlySpan, sp sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	for _, p := range spans {
		if p.SpanContext().SpanID() == sp.Parent().SpanID() {
			return p
		}
	}
	return nil
}

// ancestor reports whether a span named name is among sp's ancestors in spans.
func ancestor(spans []sdktrace.ReadOnlySpan, sp sdktrace.ReadOnlySpan, name string) bool {
	for p := parentOf(spans, sp); p != nil; p = parentOf(spans, p) {
		if p.Name() == name {
			return true
		}
	}
	return false
}

// names lists the spans' names, sorted, for failure messages.
func names(spans []sdktrace.ReadOnlySpan) string {
	ns := make([]string, len(spans))
	for i, sp := range spans {
		ns[i] = sp.Name()
	}
	slices.Sort(ns)
	return strings.Join(ns, ", ")
}

// attr returns sp's attribute key as text, "" when absent.
func attr(sp sdktrace.ReadOnlySpan, key string) string {
	for _, a := range sp.Attributes() {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

// TestTracesAcrossTemporal: with tracing on (an in-memory recorder installed before the app
// starts, so the Temporal client carries the tracing interceptor), (a) a task's trace runs
// from SubmitTask's Temporal start through the task workflow, the agent lifecycle's handling
// of the enqueue signal and its CONTROL RUN (a local activity in the task's trace, not the
// lifecycle's) to the task's completion; (b) a builtin tool call's trace holds the call
// workflow, the RunTool activity and the `tool echo` span with its name, provider and code;
// (c) a two-node DAG run's node task workflows are children of the run's workflow span.
// The recorder is process-wide: the test is not parallel, and reads spans by trace.
func TestTracesAcrossTemporal(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	telemetry.Install(tp)
	t.Cleanup(func() {
		telemetry.Uninstall()
		_ = tp.Shutdown(context.Background())
	})
	sys := start(t, newConfig(t, "memory"))
	spans := spanTree{rec: rec}
	ctx := context.Background()

	t.Run("task", func(t *testing.T) {
		a := dialAgent(t, sys, "traced")
		serve(t, a, func(_ context.Context, run *sdk.TaskRun) ([]byte, error) { return []byte(`{"ok":true}`), nil })
		waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)
		taskID := uniq(t, "task")
		sc := schedulerpb.NewSchedulerServiceClient(a.Conn())
		res := submit(t, sc, a.ID(), taskID, 0, "repo:traced path:a/**")
		require.True(t, res.GetAccepted(), res.GetReason())
		waitTask(t, sys, taskID, workflows.TaskCompleted)

		var run sdktrace.ReadOnlySpan
		require.Eventually(t, func() bool {
			run = spans.find("RunWorkflow:TaskWorkflow", "temporalWorkflowID", workflows.TaskWorkflowID(taskID))
			return run != nil
		}, 10*time.Second, 50*time.Millisecond, "the task workflow's span ends with the task")
		tr := spans.inTrace(run.SpanContext().TraceID())
		start := parentOf(tr, run)
		require.NotNil(t, start, "the task workflow's span has its start as parent: %s", names(tr))
		require.Equal(t, "StartWorkflow:TaskWorkflow", start.Name())
		enq := spans.find("HandleSignal:"+workflows.AgentTaskEnqueueSignal, "temporalWorkflowID", workflows.AgentWorkflowID(a.ID()))
		require.NotNil(t, enq, "the lifecycle handled the enqueue: %s", names(spans.ended()))
		require.Equal(t, run.SpanContext().TraceID(), enq.SpanContext().TraceID(), "the enqueue joins the task's trace, not the lifecycle's")
		var sendRun sdktrace.ReadOnlySpan
		for _, sp := range tr {
			if sp.Name() == "StartActivity:SendControl" && attr(sp, "temporalWorkflowID") == workflows.AgentWorkflowID(a.ID()) {
				sendRun = sp
			}
		}
		require.NotNil(t, sendRun, "the lifecycle's CONTROL RUN is in the task's trace: %s", names(tr))
		require.True(t, ancestor(tr, sendRun, enq.Name()), "the RUN follows the enqueue signal")
		finish := false
		for _, sp := range tr {
			if sp.Name() == "RunActivity:FinishTask" {
				require.True(t, ancestor(tr, sp, run.Name()), "the task ends inside its workflow's span")
				finish = true
			}
		}
		require.True(t, finish, "COMPLETED closes the task in its trace: %s", names(tr))
	})

	t.Run("tool", func(t *testing.T) {
		a := dialAgent(t, sys, "tooler")
		res, err := toolpb.NewToolServiceClient(a.Conn()).Call(ctx, &toolpb.ToolCall{ProviderId: tools.BuiltinProviderID, ToolName: "echo", Args: []byte(`{"n":1}`)})
		require.NoError(t, err)
		var sp sdktrace.ReadOnlySpan
		require.Eventually(t, func() bool {
			sp = spans.find("tool echo", "sw4rm.tool.call_id", res.GetCallId())
			return sp != nil
		}, 10*time.Second, 50*time.Millisecond, "the tool's span: %s", names(spans.ended()))
		require.Equal(t, tools.BuiltinProviderID, attr(sp, "sw4rm.tool.provider"))
		require.Equal(t, "echo", attr(sp, "sw4rm.tool.name"))
		require.Equal(t, "", attr(sp, "sw4rm.tool.code"), "success has no code")
		tr := spans.inTrace(sp.SpanContext().TraceID())
		require.True(t, ancestor(tr, sp, "RunActivity:RunTool"), "the tool runs inside its activity: %s", names(tr))
		require.Eventually(t, func() bool {
			tr = spans.inTrace(sp.SpanContext().TraceID())
			return ancestor(tr, sp, "RunWorkflow:ToolCall")
		}, 10*time.Second, 50*time.Millisecond, "the activity inside the call's workflow: %s", names(tr))
	})

	// A HITL wait (§15) is its workflow's span, under the workflow that asked: here a
	// PRIVILEGED tool call, which this deployment, with no operators, denies at once by the
	// fallback.
	t.Run("hitl", func(t *testing.T) {
		a := dialAgent(t, sys, "asker")
		callID := uniq(t, "privileged")
		_, err := toolpb.NewToolServiceClient(a.Conn()).Call(ctx, &toolpb.ToolCall{CallId: callID, ProviderId: tools.BuiltinProviderID,
			ToolName: "echo", Args: []byte(`{"n":2}`), Policy: &toolpb.ExecutionPolicy{PrivilegeLevel: "PRIVILEGED"}})
		require.Error(t, err, "the fallback denies the call")
		var wait sdktrace.ReadOnlySpan
		var tr []sdktrace.ReadOnlySpan
		require.Eventually(t, func() bool {
			call := spans.find("RunWorkflow:ToolCall", "temporalWorkflowID", workflows.ToolWorkflowID(callID))
			if call == nil {
				return false
			}
			tr = spans.inTrace(call.SpanContext().TraceID())
			for _, sp := range tr {
				if sp.Name() == "RunWorkflow:"+hitl.WorkflowType && ancestor(tr, sp, "RunWorkflow:ToolCall") {
					wait = sp
				}
			}
			return wait != nil
		}, 10*time.Second, 50*time.Millisecond, "the HITL wait's span under the call's: %s", names(spans.ended()))
		require.Contains(t, attr(wait, "temporalWorkflowID"), "hitl/", "the wait is the workflow hitl/<invocation_id>")
	})

	t.Run("dag", func(t *testing.T) {
		id := uniq(t, "dag")
		p := &pipelineAgents{runs: map[string]int{}}
		ag := p.serve(t, sys, "node", id)
		def := &workflowpb.WorkflowDefinition{WorkflowId: id, Nodes: map[string]*workflowpb.WorkflowNode{
			"first":  {NodeId: "first", AgentId: ag, TriggerType: workflowpb.TriggerType_DEPENDENCY},
			"second": {NodeId: "second", AgentId: ag, Dependencies: []string{"first"}, TriggerType: workflowpb.TriggerType_DEPENDENCY},
		}}
		wc := workflowpb.NewWorkflowServiceClient(dialBenchT(t, sys))
		_, err := wc.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: def})
		require.NoError(t, err)
		_, err = wc.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: id})
		require.NoError(t, err)
		waitRun(t, wc, id, workflows.DAGCompleted)

		var run sdktrace.ReadOnlySpan
		require.Eventually(t, func() bool {
			run = spans.find("RunWorkflow:DAGRun", "temporalWorkflowID", workflows.DAGWorkflowID(id))
			return run != nil
		}, 10*time.Second, 50*time.Millisecond, "the run's span: %s", names(spans.ended()))
		tr := spans.inTrace(run.SpanContext().TraceID())
		nodes := map[string]bool{}
		for _, sp := range tr {
			if sp.Name() != "RunWorkflow:TaskWorkflow" {
				continue
			}
			require.True(t, ancestor(tr, sp, run.Name()), "a node's task sits under the run")
			nodes[nodeOfTask(strings.TrimPrefix(attr(sp, "temporalWorkflowID"), "task/"), id)] = true
		}
		b, _ := json.Marshal(nodes)
		require.Equal(t, map[string]bool{"first": true, "second": true}, nodes, fmt.Sprintf("nodes under the run: %s; spans: %s", b, names(tr)))
	})
}
