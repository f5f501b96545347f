package test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// BenchmarkHandoffRoundTrip times one handoff's acceptance over gRPC with SDK agents on
// PostgreSQL: A's RequestHandoff, the offer arriving on B's stream, B's AcceptHandoff, and
// A's stream receiving handoff_accepted (docs/benchmarks.md).
func BenchmarkHandoffRoundTrip(b *testing.B) {
	ctx := context.Background()
	sys := start(b, newConfig(b, "postgres"))
	dial := func(name string) (*sdk.Agent, *sdk.Stream) {
		a, err := sdk.Dial(sys.app.GRPCAddr(), uniq(b, name))
		require.NoError(b, err)
		b.Cleanup(func() { _ = a.Close() })
		require.NoError(b, a.Register(ctx, &registrypb.AgentDescriptor{Name: name, Description: "bench", Capabilities: []string{"bench"},
			CommunicationClass: commonpb.CommunicationClass_STANDARD, ModalitiesSupported: []string{"application/json"}}))
		s, err := a.Receive(ctx) // the open stream shows the agent ready (§8.3)
		require.NoError(b, err)
		b.Cleanup(s.Close)
		waitState(b, sys, a.ID(), commonpb.AgentState_RUNNABLE)
		return a, s
	}
	a, aStream := dial("a")
	bb, bStream := dial("b")
	hc := handoffpb.NewHandoffServiceClient(a.Conn())
	bhc := handoffpb.NewHandoffServiceClient(bb.Conn())
	// next waits on s for the handoff NOTIFICATION of event for request, confirming as it goes.
	next := func(s *sdk.Stream, event, request string) {
		for {
			d, err := s.Next()
			if err != nil {
				b.Fatal(err)
			}
			_, _ = d.Confirm(ctx)
			if handoffNoteOf(d, event, request) {
				return
			}
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		id := uuid.NewString()
		if _, err := hc.RequestHandoff(ctx, &handoffpb.HandoffRequest{RequestId: id, FromAgent: a.ID(), ToAgent: bb.ID(), Reason: "bench",
			ContextSnapshot: []byte(`{}`), Timeout: durationpb.New(time.Minute)}); err != nil {
			b.Fatal(err)
		}
		next(bStream, "handoff_offered", id)
		if _, err := bhc.AcceptHandoff(ctx, &handoffpb.HandoffResponse{RequestId: id, Accepted: true, AcceptingAgent: bb.ID()}); err != nil {
			b.Fatal(err)
		}
		next(aStream, "handoff_accepted", id)
		lat = append(lat, time.Since(t0))
		b.StopTimer()
		_, _ = bhc.CompleteHandoff(ctx, &handoffpb.CompleteHandoffRequest{RequestId: id, Status: handoffpb.HandoffStatus_COMPLETED})
		b.StartTimer()
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// bareHandoff is what BenchmarkBaselineBareTemporalHandoff runs: a workflow that waits for
// one update and then one signal.
func bareHandoff(ctx workflow.Context) error {
	accepted := false
	if err := workflow.SetUpdateHandler(ctx, "accept", func(ctx workflow.Context) error { accepted = true; return nil }); err != nil {
		return err
	}
	if err := workflow.Await(ctx, func() bool { return accepted }); err != nil {
		return err
	}
	workflow.GetSignalChannel(ctx, "complete").Receive(ctx, nil)
	return nil
}

// BenchmarkBaselineBareTemporalHandoff is the handoff's floor in the same run: bare Temporal
// starting a workflow, one update (the acceptance) and one signal.
func BenchmarkBaselineBareTemporalHandoff(b *testing.B) {
	c, tq := bareWorker(b, "bare-", []any{bareHandoff}, nil)
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "bare/" + uuid.NewString(), TaskQueue: tq}, bareHandoff)
		if err != nil {
			b.Fatal(err)
		}
		h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(), UpdateName: "accept", WaitForStage: client.WorkflowUpdateStageCompleted})
		if err == nil {
			err = h.Get(ctx, nil)
		}
		if err != nil {
			b.Fatal(err)
		}
		if err := c.SignalWorkflow(ctx, run.GetID(), "", "complete", nil); err != nil {
			b.Fatal(err)
		}
		if err := run.Get(ctx, nil); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, lat)
}
