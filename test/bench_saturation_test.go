package test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"
	"golang.org/x/sync/errgroup"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// Saturation: how many tasks a second the whole system completes when it is kept busy —
// saturationAgents agents, each running one task at a time, with saturationInFlight tasks
// submitted and not yet completed at any moment. The time per operation is the wall time
// divided by the tasks completed, so benchreport's ratio against the baseline is the inverse
// of the throughput ratio (issue target: tasks per second ≥ 0.5× bare Temporal's).
const (
	saturationAgents   = 8
	saturationInFlight = 32
)

// BenchmarkTaskSaturation completes b.N tasks on PostgreSQL across saturationAgents SDK
// agents that answer at once, keeping saturationInFlight tasks in flight.
func BenchmarkTaskSaturation(b *testing.B) {
	sys := start(b, newConfig(b, "postgres"))
	ctx, cancel := context.WithCancel(context.Background())
	var serving sync.WaitGroup
	defer func() { cancel(); serving.Wait() }()
	agents := make([]*sdk.Agent, saturationAgents)
	for i := range agents {
		a := dialAgent(b, sys, "sat"+strconv.Itoa(i))
		agents[i] = a
		serving.Add(1)
		go func() {
			defer serving.Done()
			_ = a.Serve(ctx, func(context.Context, *sdk.TaskRun) ([]byte, error) { return []byte("done"), nil }, nil)
		}()
		waitState(b, sys, a.ID(), commonpb.AgentState_RUNNABLE)
	}
	sc := schedulerpb.NewSchedulerServiceClient(agents[0].Conn())
	prefix := "sat-" + uuid.NewString()[:8] + "-"
	one := func(i int) error {
		a := agents[i%len(agents)]
		id := prefix + strconv.Itoa(i)
		res, err := sc.SubmitTask(ctx, &schedulerpb.SubmitTaskRequest{AgentId: a.ID(), TaskId: id, Scope: "repo:bench path:s" + strconv.Itoa(i) + "/**"})
		if err != nil || !res.GetAccepted() {
			return fmt.Errorf("submit %s: %v %v", id, err, res)
		}
		// Errors go back to saturate, which fails the benchmark on the benchmark's goroutine.
		var st workflows.TaskStatus
		if err := sys.app.Temporal().GetWorkflow(ctx, workflows.TaskWorkflowID(id), "").Get(ctx, &st); err != nil || st.State != workflows.TaskCompleted {
			return fmt.Errorf("task %s: %v %+v", id, err, st)
		}
		return nil
	}
	saturate(b, saturationAgents, one) // warm up outside the timed span
	b.ResetTimer()
	t0 := time.Now()
	saturate(b, b.N, func(i int) error { return one(saturationAgents + i) })
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "tasks/s")
}

// BenchmarkBaselineBareTemporalSaturation is BenchmarkTaskSaturation's baseline in the same
// run: bare Temporal completing b.N one-activity workflows (taskLike) with
// saturationInFlight in flight.
func BenchmarkBaselineBareTemporalSaturation(b *testing.B) {
	c, tq := bareWorker(b, "bare-sat-", []any{taskLike}, []any{agentWork})
	ctx := context.Background()
	one := func(int) error {
		r, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "bare-sat/" + uuid.NewString(), TaskQueue: tq}, taskLike)
		if err != nil {
			return err
		}
		var out string
		return r.Get(ctx, &out)
	}
	saturate(b, saturationAgents, one)
	b.ResetTimer()
	t0 := time.Now()
	saturate(b, b.N, one)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "tasks/s")
}

// saturate runs one(0) … one(n-1) with saturationInFlight of them running at any moment.
func saturate(b *testing.B, n int, one func(i int) error) {
	b.Helper()
	var g errgroup.Group
	g.SetLimit(saturationInFlight)
	for i := range n {
		g.Go(func() error { return one(i) })
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
}
