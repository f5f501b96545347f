package test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// toolBenchArgs are the arguments the tool benchmarks echo: a small JSON object, as a
// typical tool call's arguments are.
var toolBenchArgs = []byte(`{"path":"notes/a.txt","line":42,"tags":["bench","echo"]}`)

// toolBenchWarmup is how many calls the tool benchmarks make before their timers start, so
// that a fresh system's pools, caches and the tool worker's poller are past their first use.
const toolBenchWarmup = 5

// BenchmarkToolCall times one ToolService.Call of the built-in provider's echo over gRPC on
// each store (§18.2): the frontend validates the call and records it, the workflow
// tool/<call_id> runs echo as an activity on the provider's task queue, which stores the final
// frame, and Call answers it. BenchmarkBaselineBareTemporalTool is the same work on bare
// Temporal (docs/benchmarks.md, "Tool calls").
func BenchmarkToolCall(b *testing.B) {
	for _, kind := range storeKinds {
		b.Run(kind, func(b *testing.B) {
			sys := start(b, newConfig(b, kind))
			tc := toolpb.NewToolServiceClient(dialBench(b, sys))
			ctx := context.Background()
			call := func() {
				f, err := tc.Call(ctx, &toolpb.ToolCall{ProviderId: tools.BuiltinProviderID, ToolName: "echo", Args: toolBenchArgs})
				if err != nil {
					b.Fatal(err)
				}
				if !f.GetFinal() || len(f.GetData()) == 0 {
					b.Fatalf("echo answered %v", f)
				}
			}
			for range toolBenchWarmup {
				call()
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				call()
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			reportLatency(b, lat)
		})
	}
}

// bareToolCall is what BenchmarkBaselineBareTemporalTool runs: a workflow that hands its
// input to one activity and returns the activity's answer.
func bareToolCall(ctx workflow.Context, args []byte) ([]byte, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	var out []byte
	err := workflow.ExecuteActivity(ctx, bareEcho, args).Get(ctx, &out)
	return out, err
}

// bareEcho is the baseline's tool: it answers its input.
func bareEcho(_ context.Context, args []byte) ([]byte, error) { return args, nil }

// BenchmarkBaselineBareTemporalTool is the tool call's floor in the same run: bare Temporal
// starting a workflow that runs one activity echoing its input, and waiting for its result.
func BenchmarkBaselineBareTemporalTool(b *testing.B) {
	c, tq := bareWorker(b, "bare-tool-", []any{bareToolCall}, []any{bareEcho})
	ctx := context.Background()
	run := func() {
		r, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "bare-tool/" + uuid.NewString(), TaskQueue: tq}, bareToolCall, toolBenchArgs)
		if err != nil {
			b.Fatal(err)
		}
		var out []byte
		if err := r.Get(ctx, &out); err != nil {
			b.Fatal(err)
		}
		if len(out) == 0 {
			b.Fatal("the bare echo answered nothing")
		}
	}
	for range toolBenchWarmup {
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
}

// BenchmarkToolCancel times a cancel (§18.6) on each store: a CallStream of the built-in
// sleep (a minute, a frame every 50 ms) runs until its first frame arrives, untimed; the
// timed span is from sending Cancel to the stream receiving the call's final frame. It also
// reports how long Cancel itself took to answer (cancel-rpc-p50-ms, -p99-ms): it answers once
// the final frame is stored. There is no bare-Temporal baseline for this one.
func BenchmarkToolCancel(b *testing.B) {
	for _, kind := range storeKinds {
		b.Run(kind, func(b *testing.B) {
			sys := start(b, newConfig(b, kind))
			tc := toolpb.NewToolServiceClient(dialBench(b, sys))
			ctx := context.Background()
			// one starts a call, waits for its first frame, cancels it and reads its stream to
			// the final frame; it returns the time from Cancel to the final frame and to
			// Cancel's answer. Only that span runs with the benchmark's timer on, so ns/op is
			// the mean time from Cancel to the final frame.
			one := func() (toFinal, toAnswer time.Duration) {
				sctx, stop := context.WithCancel(ctx)
				defer stop()
				st, err := tc.CallStream(sctx, &toolpb.ToolCall{ProviderId: tools.BuiltinProviderID, ToolName: "sleep", Args: []byte(`{"ms":60000,"tick_ms":50}`),
					Policy: &toolpb.ExecutionPolicy{Timeout: durationpb.New(2 * time.Minute)}})
				if err != nil {
					b.Fatal(err)
				}
				first, err := st.Recv()
				if err != nil {
					b.Fatal(err)
				}
				if first.GetFinal() {
					b.Fatalf("the call ended before it was cancelled: %s", first.GetSummary())
				}
				// The final frame may reach the stream before Cancel's answer reaches us, so
				// the stream is read concurrently.
				final := make(chan time.Time, 1)
				streamErr := make(chan error, 1)
				go func() {
					for {
						f, err := st.Recv()
						if err != nil {
							streamErr <- err
							return
						}
						if f.GetFinal() {
							final <- time.Now()
							return
						}
					}
				}()
				b.StartTimer()
				t0 := time.Now()
				ans, err := tc.Cancel(ctx, &toolpb.ToolCall{CallId: first.GetCallId()})
				if err != nil {
					b.Fatal(err)
				}
				toAnswer = time.Since(t0)
				if ans.GetErrorCode() != string(tool.CodeCancelled) {
					b.Fatalf("cancel answered %s: %s", ans.GetErrorCode(), ans.GetMessage())
				}
				select {
				case at := <-final:
					b.StopTimer()
					return at.Sub(t0), toAnswer
				case err := <-streamErr:
					b.Fatal(errors.Join(errors.New("the stream ended without its final frame"), err))
				case <-time.After(30 * time.Second):
					b.Fatal("no final frame 30 s after the cancel")
				}
				return 0, 0
			}
			for range toolBenchWarmup {
				one()
			}
			lat := make([]time.Duration, 0, b.N)
			answers := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			b.StopTimer()
			for range b.N {
				toFinal, toAnswer := one()
				lat = append(lat, toFinal)
				answers = append(answers, toAnswer)
			}
			reportLatency(b, lat)
			slices.Sort(answers)
			b.ReportMetric(float64(answers[len(answers)/2].Microseconds())/1000, "cancel-rpc-p50-ms")
			b.ReportMetric(float64(answers[min(len(answers)-1, len(answers)*99/100)].Microseconds())/1000, "cancel-rpc-p99-ms")
		})
	}
}
