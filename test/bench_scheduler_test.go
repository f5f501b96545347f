package test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// nextControl reads deliveries until a CONTROL of the given type arrives, confirming each,
// and returns it with the time it arrived (before its confirmation).
func nextControl(b *testing.B, in *inbox, typ string) (*sdk.Delivery, protocol.Control, time.Time) {
	for {
		select {
		case d, ok := <-in.ch:
			arrived := time.Now()
			if !ok {
				b.Fatal("stream closed")
			}
			if _, err := d.Confirm(context.Background()); err != nil {
				b.Fatal(err)
			}
			if d.Envelope.GetMessageType() != commonpb.MessageType_CONTROL {
				continue
			}
			c, perr := protocol.ParseControl(d.Envelope)
			if perr != nil {
				b.Fatal(perr)
			}
			if c.Type == typ {
				return d, c, arrived
			}
		case <-time.After(30 * time.Second):
			b.Fatalf("no CONTROL %s within 30 s", typ)
		}
	}
}

// BenchmarkPreemptRequest measures the scheduler's reaction time (App. D C.4): from a
// SubmitTask of higher priority than the running task to the PREEMPT_REQUEST arriving in the
// agent's stream. In "running" the urgent task arrives once the low one is RUNNING (its
// task workflow says so), as in C.4; in "just-dispatched" it arrives the moment the low
// task's RUN reached the agent, while the scheduler is still recording that dispatch — the
// worst case, where the urgent task queues behind that work. Each operation then completes
// the C.4 sequence (yield, urgent RUN and completion, resumed RUN and completion) outside
// the timed span.
func BenchmarkPreemptRequest(b *testing.B) {
	for _, variant := range []string{"running", "just-dispatched"} {
		b.Run(variant, func(b *testing.B) { benchPreempt(b, variant == "running") })
	}
}

func benchPreempt(b *testing.B, settle bool) {
	sys := start(b, newConfig(b, "postgres"))
	ctx := context.Background()
	a := dialAgent(b, sys, "agent")
	in := openInbox(&testing.T{}, a)
	b.Cleanup(in.stream.Close)
	require.NoError(b, a.Heartbeat(ctx, commonpb.AgentState_AGENT_STATE_UNSPECIFIED, nil))
	sc := schedulerpb.NewSchedulerServiceClient(a.Conn())
	submit := func(id string, prio int32) error {
		res, err := sc.SubmitTask(ctx, &schedulerpb.SubmitTaskRequest{AgentId: a.ID(), TaskId: id, Priority: prio, Scope: "resource:" + id})
		if err != nil || !res.GetAccepted() {
			return fmt.Errorf("submit %s: %v %v", id, err, res)
		}
		return nil
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		low, high := uuid.NewString(), uuid.NewString()
		b.StopTimer()
		if err := submit(low, 10); err != nil {
			b.Fatal(err)
		}
		nextControl(b, in, protocol.ControlRun)
		if settle {
			waitTask(b, sys, low, workflows.TaskRunning)
		}
		b.StartTimer()
		t0 := time.Now()
		// The clock stops when PREEMPT_REQUEST arrives, whether or not SubmitTask has
		// answered by then: SubmitTask answers once the agent's lifecycle has queued the
		// task, which may be after the lifecycle has sent the request.
		submitted := make(chan error, 1)
		go func() { submitted <- submit(high, -10) }()
		pre, _, arrived := nextControl(b, in, protocol.ControlPreemptRequest)
		lat = append(lat, arrived.Sub(t0))
		b.StopTimer()
		if err := <-submitted; err != nil {
			b.Fatal(err)
		}
		require.NoError(b, pre.Ack(ctx, commonpb.AckStage_FULFILLED, 0, "yielded"))
		urgent, _, _ := nextControl(b, in, protocol.ControlRun)
		require.NoError(b, urgent.Ack(ctx, commonpb.AckStage_FULFILLED, 0, "done"))
		resumed, c, _ := nextControl(b, in, protocol.ControlRun)
		if !c.Resume || c.TaskID != low {
			b.Fatalf("iteration %d: expected the resumed RUN of %s, got %+v", i, low, c)
		}
		require.NoError(b, resumed.Ack(ctx, commonpb.AckStage_FULFILLED, 0, "done"))
		b.StartTimer()
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// signalEcho is the bare-Temporal baseline's workflow: for each signal it runs a local
// activity that hands the signal's value back to the benchmark.
func signalEcho(ctx workflow.Context) error {
	ch := workflow.GetSignalChannel(ctx, "ping")
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
	for {
		var n int
		ch.Receive(ctx, &n)
		if err := workflow.ExecuteLocalActivity(ctx, echoActivity, n).Get(ctx, nil); err != nil {
			return err
		}
	}
}

var echoes = make(chan int, 1)

func echoActivity(_ context.Context, n int) error {
	echoes <- n
	return nil
}

// BenchmarkBaselineBareTemporalSignal is the same-run baseline for BenchmarkPreemptRequest:
// bare Temporal's signal round trip — the client signals a running workflow, which reacts
// with a local activity that reports back to the benchmark.
func BenchmarkBaselineBareTemporalSignal(b *testing.B) {
	c, tq := bareWorker(b, "bare-", []any{signalEcho}, []any{echoActivity})
	ctx := context.Background()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "bare-signal/" + uuid.NewString(), TaskQueue: tq}, signalEcho)
	require.NoError(b, err)
	defer func() { _ = c.TerminateWorkflow(ctx, run.GetID(), "", "benchmark done") }()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if err := c.SignalWorkflow(ctx, run.GetID(), "", "ping", i); err != nil {
			b.Fatal(err)
		}
		if got := <-echoes; got != i {
			b.Fatal("echo " + strconv.Itoa(got))
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, lat)
}
