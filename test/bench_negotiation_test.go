package test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/sdk/negotiation"
)

// BenchmarkNegotiationRound times one negotiation round over gRPC with SDK agents on
// PostgreSQL: Open, A's Propose, B's and C's Evaluate, and the decision of the round (the
// decide event arriving on A's stream) (docs/benchmarks.md).
func BenchmarkNegotiationRound(b *testing.B) {
	ctx := context.Background()
	sys := start(b, newConfig(b, "postgres"))
	dial := func(name string) (*sdk.Agent, *sdk.Stream) {
		a := dialAgent(b, sys, name)
		s, err := a.Receive(ctx)
		require.NoError(b, err)
		b.Cleanup(s.Close)
		return a, s
	}
	a, aStream := dial("a")
	bb, _ := dial("b")
	cc, _ := dial("c")
	na, nb, nc := negotiation.New(a), negotiation.New(bb), negotiation.New(cc)
	decided := func(id string) {
		for {
			d, err := aStream.Next()
			if err != nil {
				b.Fatal(err)
			}
			_, _ = d.Confirm(ctx)
			if ev, ok, _ := negotiation.ParseEvent(d.Envelope); ok && ev.NegotiationID == id && ev.Kind == "decide" {
				return
			}
		}
	}
	lat := make([]time.Duration, 0, b.N)
	// Each call's share of the round, reported as its median, shows where the time goes.
	phases := []string{"open", "propose", "evaluate", "evaluate2", "decided"}
	spans := make([][]time.Duration, len(phases))
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		mark, phase := t0, 0
		lap := func() {
			now := time.Now()
			spans[phase] = append(spans[phase], now.Sub(mark))
			mark, phase = now, phase+1
		}
		id := "bench-" + uuid.NewString()
		if err := na.Open(ctx, negotiation.Options{ID: id, Topic: "bench", Participants: []string{a.ID(), bb.ID(), cc.ID()}, Intensity: commonpb.DebateIntensity_LOW}); err != nil {
			b.Fatal(err)
		}
		lap()
		if err := na.Propose(ctx, id, "application/json", []byte(`{"price":120,"rps":100,"burst":200}`)); err != nil {
			b.Fatal(err)
		}
		lap()
		if err := nb.Evaluate(ctx, id, 0.99, "ok"); err != nil {
			b.Fatal(err)
		}
		lap()
		if err := nc.Evaluate(ctx, id, 0.98, "ok"); err != nil {
			b.Fatal(err)
		}
		lap()
		decided(id)
		lap()
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, lat)
	for i, name := range phases {
		slices.Sort(spans[i])
		b.ReportMetric(float64(spans[i][len(spans[i])/2].Microseconds())/1000, name+"-p50-ms")
	}
}

// bareNegotiation is what BenchmarkBaselineBareTemporalNegotiation runs: a workflow that
// takes three updates (the proposal and two evaluations) and publishes after each, as the
// negotiation does (open and policy, propose, two evaluates, decide).
func bareNegotiation(ctx workflow.Context) error {
	n := 0
	for _, name := range []string{"propose", "evaluate-b", "evaluate-c"} {
		if err := workflow.SetUpdateHandler(ctx, name, func(ctx workflow.Context) error { n++; return nil }); err != nil {
			return err
		}
	}
	actx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
	publish := func() error { return workflow.ExecuteLocalActivity(actx, bareEvent).Get(ctx, nil) }
	if err := publish(); err != nil { // open + policy
		return err
	}
	for i := 1; i <= 3; i++ {
		if err := workflow.Await(ctx, func() bool { return n >= i }); err != nil {
			return err
		}
		if err := publish(); err != nil {
			return err
		}
	}
	return publish() // decide
}

// bareEvent is the bare baseline's side effect: nothing.
func bareEvent(context.Context) error { return nil }

// BenchmarkBaselineBareTemporalNegotiation is the negotiation's floor in the same run: bare
// Temporal starting a workflow, three updates and five local activities.
func BenchmarkBaselineBareTemporalNegotiation(b *testing.B) {
	c, tq := bareWorker(b, "bare-", []any{bareNegotiation}, []any{bareEvent})
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "bare/" + uuid.NewString(), TaskQueue: tq}, bareNegotiation)
		if err != nil {
			b.Fatal(err)
		}
		for _, name := range []string{"propose", "evaluate-b", "evaluate-c"} {
			h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(), UpdateName: name, WaitForStage: client.WorkflowUpdateStageCompleted})
			if err == nil {
				err = h.Get(ctx, nil)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		if err := run.Get(ctx, nil); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, lat)
}
