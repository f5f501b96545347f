package test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// BenchmarkTaskRoundTrip measures one task end to end on PostgreSQL: SubmitTask, the RUN
// reaching an SDK agent that completes at once, its ACKs handed to the agent's lifecycle
// through the outbox (docs/architecture.md, "The outbox"), and the task workflow's
// COMPLETED result. BenchmarkBaselineBareTemporalTask does the same work on bare Temporal.
func BenchmarkTaskRoundTrip(b *testing.B) {
	sys := start(b, newConfig(b, "postgres"))
	agent := dialAgent(b, sys, "bench")
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = agent.Serve(ctx, func(context.Context, *sdk.TaskRun) ([]byte, error) { return []byte("done"), nil }, nil)
	}()
	defer func() { cancel(); <-served }()
	waitState(b, sys, agent.ID(), commonpb.AgentState_RUNNABLE)
	sc := schedulerpb.NewSchedulerServiceClient(agent.Conn())
	var ids []string
	run := func(i int) {
		id := "bench-" + uuid.NewString()[:8] + "-" + strconv.Itoa(i)
		ids = append(ids, id)
		res, err := sc.SubmitTask(ctx, &schedulerpb.SubmitTaskRequest{AgentId: agent.ID(), TaskId: id, Scope: "repo:bench path:t" + strconv.Itoa(i) + "/**"})
		if err != nil || !res.GetAccepted() {
			b.Fatalf("submit: %v %v", err, res)
		}
		var st workflows.TaskStatus
		if err := sys.app.Temporal().GetWorkflow(ctx, workflows.TaskWorkflowID(id), "").Get(ctx, &st); err != nil || st.State != workflows.TaskCompleted {
			b.Fatalf("task %s: %v %+v", id, err, st)
		}
	}
	for i := range 5 {
		run(-1 - i) // warm up pools and caches outside the timed span
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		run(i)
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, lat)
	// What the tasks cost Temporal: every task workflow's history, and the agent's
	// lifecycle's, whose history serves all of them (warm-up tasks included).
	var t trips
	for _, id := range ids {
		t.add(tripsOf(ctx, b, sys.app.Temporal(), workflows.TaskWorkflowID(id)))
	}
	t.add(tripsOf(ctx, b, sys.app.Temporal(), workflows.AgentWorkflowID(agent.ID())))
	t.report(b, len(ids))
}

// taskLike is the bare-Temporal counterpart of a task: a workflow that hands the work to an
// activity (the agent) and returns its result.
func taskLike(ctx workflow.Context) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	var out string
	err := workflow.ExecuteActivity(ctx, agentWork).Get(ctx, &out)
	return out, err
}

func agentWork(context.Context) (string, error) { return "done", nil }

// BenchmarkBaselineBareTemporalTask is the same-run baseline for BenchmarkTaskRoundTrip:
// start a workflow, run one activity, wait for the result.
func BenchmarkBaselineBareTemporalTask(b *testing.B) {
	c, tq := bareWorker(b, "bare-task-", []any{taskLike}, []any{agentWork})
	ctx := context.Background()
	var ids []string
	run := func() {
		id := "bare-task/" + uuid.NewString()
		ids = append(ids, id)
		r, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: tq}, taskLike)
		if err != nil {
			b.Fatal(err)
		}
		var out string
		if err := r.Get(ctx, &out); err != nil {
			b.Fatal(err)
		}
	}
	for range 5 {
		run()
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		run()
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, lat)
	var t trips
	for _, id := range ids {
		t.add(tripsOf(ctx, b, c, id))
	}
	t.report(b, len(ids))
}
