package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// dagBenchNodes is the size of the benchmarked graphs.
const dagBenchNodes = 100

// An agent runs one task at a time (§8: its lifecycle is RUNNING one task), so a fan-out is
// as wide as the agents serving it: the fan-out gets one agent per node, as the bare baseline
// gets a worker that runs every activity at once; the chain, whose nodes run one after another
// anyway, gets a few.
func dagBenchAgents(shape string) int {
	if shape == "fanout" {
		return dagBenchNodes
	}
	return 4
}

// benchGraph is a chain of n nodes, or a fan-out of n nodes after one root, over agents.
func benchGraph(id string, n int, fanout bool, agents []string) *workflowpb.WorkflowDefinition {
	def := &workflowpb.WorkflowDefinition{WorkflowId: id, Nodes: map[string]*workflowpb.WorkflowNode{}}
	for i := range n {
		nid := fmt.Sprintf("n%03d", i)
		var deps []string
		switch {
		case i == 0:
		case fanout:
			deps = []string{"n000"}
		default:
			deps = []string{fmt.Sprintf("n%03d", i-1)}
		}
		def.Nodes[nid] = &workflowpb.WorkflowNode{NodeId: nid, AgentId: agents[i%len(agents)], Dependencies: deps, TriggerType: workflowpb.TriggerType_DEPENDENCY}
	}
	return def
}

// BenchmarkDAGRun times whole runs of a 100-node chain and of a 100-wide fan-out on
// PostgreSQL, nodes served by SDK agents that answer at once, and reports the time per node
// next to BenchmarkBaselineBareTemporalDAG running the same graphs with one activity per node
// (docs/benchmarks.md).
func BenchmarkDAGRun(b *testing.B) {
	for _, shape := range []string{"chain", "fanout"} {
		b.Run(shape, func(b *testing.B) {
			ctx := context.Background()
			sys := start(b, newConfig(b, "postgres"))
			agents := make([]string, dagBenchAgents(shape))
			for i := range agents {
				a := dialAgent(b, sys, fmt.Sprintf("node%d", i))
				sctx, cancel := context.WithCancel(ctx)
				done := make(chan struct{})
				go func() {
					defer close(done)
					_ = a.Serve(sctx, func(context.Context, *sdk.TaskRun) ([]byte, error) { return []byte(`{}`), nil }, nil)
				}()
				b.Cleanup(func() { cancel(); <-done })
				agents[i] = a.ID()
			}
			wc := workflowpb.NewWorkflowServiceClient(dialBench(b, sys))
			b.ResetTimer()
			for range b.N {
				id := "bench-" + uuid.NewString()[:8]
				b.StopTimer()
				_, err := wc.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: benchGraph(id, dagBenchNodes, shape == "fanout", agents)})
				require.NoError(b, err)
				b.StartTimer()
				t0 := time.Now()
				_, err = wc.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: id})
				require.NoError(b, err)
				var st workflows.DAGRunState
				require.NoError(b, sys.app.Temporal().GetWorkflow(ctx, workflows.DAGWorkflowID(id), "").Get(ctx, &st))
				require.Equal(b, workflows.DAGCompleted, st.Status)
				b.ReportMetric(float64(time.Since(t0).Milliseconds())/dagBenchNodes, "ms/node")
			}
		})
	}
}

// bareNode is the bare baseline's activity: it does nothing.
func bareNode(context.Context, int) error { return nil }

// bareDAG runs the same graph as DAGRun with one activity per node.
func bareDAG(ctx workflow.Context, n int, fanout bool) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	if err := workflow.ExecuteActivity(ctx, bareNode, 0).Get(ctx, nil); err != nil {
		return err
	}
	if !fanout {
		for i := 1; i < n; i++ {
			if err := workflow.ExecuteActivity(ctx, bareNode, i).Get(ctx, nil); err != nil {
				return err
			}
		}
		return nil
	}
	futures := make([]workflow.Future, 0, n-1)
	for i := 1; i < n; i++ {
		futures = append(futures, workflow.ExecuteActivity(ctx, bareNode, i))
	}
	for _, f := range futures {
		if err := f.Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkBaselineBareTemporalDAG is DAGRun's floor in the same run: a hand-written workflow
// running the chain or the fan-out with one activity per node.
func BenchmarkBaselineBareTemporalDAG(b *testing.B) {
	c, tq := bareWorker(b, "bare-", []any{bareDAG}, []any{bareNode})
	for _, shape := range []string{"chain", "fanout"} {
		b.Run(shape, func(b *testing.B) {
			ctx := context.Background()
			for range b.N {
				t0 := time.Now()
				run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "bare/" + uuid.NewString(), TaskQueue: tq}, bareDAG, dagBenchNodes, shape == "fanout")
				require.NoError(b, err)
				require.NoError(b, run.Get(ctx, nil))
				b.ReportMetric(float64(time.Since(t0).Milliseconds())/dagBenchNodes, "ms/node")
			}
		})
	}
}
