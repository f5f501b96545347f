package test

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/metrics"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/postgres/pgtest"
	"github.com/sw4rm/sw4rm-temporal/telemetry"
)

// BenchmarkRouterSendToFulfilled measures one message's whole life over gRPC with SDK agents:
// A sends, B receives it on its stream, confirms the delivery and ACKs FULFILLED, and A
// receives the forwarded FULFILLED ACK. It reports the rate and p50/p99 latency per store,
// and again with both agents on HTTP/1.1 (the Connect protocol, sdk.WithHTTP1: §5.1's
// fallback) as the variant <store>-http1, which benchreport sets beside the gRPC run.
//
// BenchmarkRouterTracing measures it with tracing on, BenchmarkTracingOff with tracing off.
func BenchmarkRouterSendToFulfilled(b *testing.B) {
	for _, kind := range storeKinds {
		for _, variant := range []struct {
			suffix string
			opts   []grpc.DialOption
		}{{"", nil}, {"-http1", []grpc.DialOption{sdk.WithHTTP1()}}} {
			b.Run(kind+variant.suffix, func(b *testing.B) {
				benchSendToFulfilled(b, kind, nil, nil, variant.opts...)
			})
		}
	}
}

// BenchmarkTracingOff measures what tracing off adds to one round trip of
// BenchmarkRouterSendToFulfilled: nothing is installed (no gRPC handler, no interceptor, the
// global no-op tracer), so what is left are the checks its steps run — the router's Send and
// ConfirmDelivery asking telemetry.Enabled, each admission asking its context for a
// `traceparent`, each delivery asking DeliverSpan, each of the SDK's calls asking its context
// for a span. One iteration runs the checks of one round trip (two sends, three
// confirmations, three admissions and deliveries, five calls); benchreport sets it against
// the round trip's time measured in the same run. Two separate runs of the round trip could
// not show it: their difference is the machine's drift, tens of times larger.
func BenchmarkTracingOff(b *testing.B) {
	telemetry.Uninstall()
	ctx := context.Background()
	d := store.Delivery{AgentID: "b", Seq: 1, Envelope: &commonpb.Envelope{MessageId: "m"}}
	var n int
	for b.Loop() {
		for range 5 { // Send twice, ConfirmDelivery three times
			if telemetry.Enabled() {
				n++
			}
		}
		for range 3 { // three admissions, three deliveries
			if telemetry.TraceParent(ctx) != "" {
				n++
			}
			if _, tp := router.DeliverSpan(ctx, d); tp != "" {
				n++
			}
		}
		for range 5 { // the SDK's five calls
			if trace.SpanContextFromContext(ctx).IsValid() {
				n++
			}
		}
	}
	require.Zero(b, n, "tracing off traced something")
}

// BenchmarkRouterTracing measures what tracing with every span sampled costs
// BenchmarkRouterSendToFulfilled's round trip (docs/observability.md, "Cost"): one system,
// started with tracing on, sends its messages in blocks of tracingBlock, tracing on and off by
// turns, and reports both means and their ratio, on/off. Alternating on one system cancels
// what separate runs cannot: the machine's load drifting between them, the store growing.
// Spans go through a batch processor to an exporter that drops them, so what is measured is
// the spans' cost, not a network's. With tracing off the gRPC server's handler, installed at
// the start, returns at once, as the router's spans do.
func BenchmarkRouterTracing(b *testing.B) {
	for _, kind := range storeKinds {
		b.Run(kind, func(b *testing.B) {
			on := installBenchTracing(b)
			var turn tracingTurns
			benchSendToFulfilled(b, kind, func(i int) bool {
				traced := (i/tracingBlock)%2 == 1
				if i%tracingBlock == 0 {
					if traced {
						on()
					} else {
						telemetry.Uninstall()
					}
				}
				return traced
			}, &turn)
			telemetry.Uninstall()
			b.ReportMetric(turn.mean(true)/1e3, "on-us")
			b.ReportMetric(turn.mean(false)/1e3, "off-us")
			b.ReportMetric(turn.mean(true)/turn.mean(false), "on/off")
			b.ReportMetric(turn.cpuMean(true)/1e3, "on-cpu-us")
			b.ReportMetric(turn.cpuMean(false)/1e3, "off-cpu-us")
			b.ReportMetric(turn.cpuMean(true)/turn.cpuMean(false), "cpu-on/off")
		})
	}
}

// tracingBlock is how many messages BenchmarkRouterTracing sends before it turns tracing on
// or off.
const tracingBlock = 50

// tracingTurns sums BenchmarkRouterTracing's round trips with tracing on and off, and the
// process's CPU time (user and system, of the server and the agents together) they took.
type tracingTurns struct {
	sum [2]time.Duration
	n   [2]int
	cpu [2]time.Duration
	// last is the process's CPU time when the last message began, and lastOn whether it
	// was traced.
	last   time.Duration
	lastOn bool
}

// add counts a round trip d, traced or not.
func (t *tracingTurns) add(traced bool, d time.Duration) {
	i := 0
	if traced {
		i = 1
	}
	t.sum[i] += d
	t.n[i]++
}

// begin notes the CPU time when a message, traced or not, begins; the CPU time since the
// previous message began is that message's.
func (t *tracingTurns) begin(traced bool) {
	now := processCPU()
	if t.last != 0 {
		i := 0
		if t.lastOn {
			i = 1
		}
		t.cpu[i] += now - t.last
	}
	t.last, t.lastOn = now, traced
}

// cpuMean is the mean CPU time of a round trip, in nanoseconds, traced or not.
func (t *tracingTurns) cpuMean(traced bool) float64 {
	i := 0
	if traced {
		i = 1
	}
	return float64(t.cpu[i]) / float64(max(1, t.n[i]))
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// mean is the mean round trip, in nanoseconds, with tracing on (traced) or off.
func (t *tracingTurns) mean(traced bool) float64 {
	i := 0
	if traced {
		i = 1
	}
	return float64(t.sum[i]) / float64(max(1, t.n[i]))
}

// installBenchTracing turns tracing on until b ends, with a 100 % sampler and a batch
// processor feeding an exporter that drops every span; it returns the function that turns it
// on again after telemetry.Uninstall.
func installBenchTracing(b *testing.B) func() {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	telemetry.Install(tp)
	b.Cleanup(func() {
		telemetry.Uninstall()
		_ = tp.Shutdown(context.Background())
	})
	return func() { telemetry.Install(tp) }
}

// benchSendToFulfilled is BenchmarkRouterSendToFulfilled on one store, its agents dialled
// with opts.
//
// With traced set (BenchmarkRouterTracing), it is called before each timed message with the
// message's index, says whether that message is traced, and turn gets its round trip.
func benchSendToFulfilled(b *testing.B, kind string, traced func(i int) bool, turn *tracingTurns, opts ...grpc.DialOption) {
	ctx := context.Background()
	a, bb, aStream, bStream := routerPair(b, kind, opts...)

	// B: confirm and fulfil everything it gets, noting when each message arrived so the
	// send→deliver latency can be reported apart from the whole round trip.
	delivered := make(chan time.Time, 64)
	go func() {
		for {
			d, err := bStream.Next()
			if err != nil {
				return
			}
			if d.Envelope.GetMessageType() == commonpb.MessageType_DATA {
				delivered <- time.Now()
			}
			_, _ = d.Confirm(ctx)
			if d.Envelope.GetMessageType() == commonpb.MessageType_DATA {
				_ = d.Ack(ctx, commonpb.AckStage_FULFILLED, 0, "")
			}
		}
	}()
	fulfilled := make(chan string, 64)
	go func() {
		for {
			d, err := aStream.Next()
			if err != nil {
				close(fulfilled)
				return
			}
			_, _ = d.Confirm(ctx)
			if p, ok := d.AckPayload(); ok && p.Stage == commonpb.AckStage_FULFILLED {
				fulfilled <- p.AckForMessageID
			}
		}
	}()

	payload := []byte(`{"task_type":"CreateTicket","title":"Fix header overlap"}`)
	// one sends a message and waits for its FULFILLED ACK; it returns the time to the
	// delivery at B and to the ACK at A.
	one := func() (toDeliver, toFulfilled time.Duration) {
		t0 := time.Now()
		env, err := a.Send(ctx, sdk.Message{To: bb.ID(), Payload: payload})
		if err != nil {
			b.Fatal(err)
		}
		toDeliver = (<-delivered).Sub(t0)
		for id := range fulfilled {
			if id == env.GetMessageId() {
				break
			}
		}
		return toDeliver, time.Since(t0)
	}
	for range warmupMessages {
		one()
	}
	lat := make([]time.Duration, 0, b.N)
	deliver := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		on := traced != nil && traced(i)
		if turn != nil {
			turn.begin(on)
		}
		d, l := one()
		deliver = append(deliver, d)
		lat = append(lat, l)
		if turn != nil {
			turn.add(on, l)
		}
	}
	b.StopTimer()
	reportLatency(b, lat)
	slices.Sort(deliver)
	b.ReportMetric(float64(deliver[len(deliver)/2].Microseconds())/1000, "deliver-p50-ms")
	b.ReportMetric(float64(deliver[min(len(deliver)-1, len(deliver)*99/100)].Microseconds())/1000, "deliver-p99-ms")
}

// routerPair starts sw4rm with the given store and two agents, A (RUNNABLE) and B, each with
// its stream open, for the router benchmarks.
func routerPair(b *testing.B, kind string, opts ...grpc.DialOption) (a, bb *sdk.Agent, aStream, bStream *sdk.Stream) {
	_, a, bb, aStream, bStream = routerPairAuth(b, kind, auth.Off, opts...)
	return a, bb, aStream, bStream
}

// routerPairAuth is routerPair with authentication in mode; outside off, both agents sign
// every call (§6.2) and the server verifies each signature and nonce. opts are the agents'
// Dial options in off mode.
func routerPairAuth(b *testing.B, kind string, mode auth.Mode, opts ...grpc.DialOption) (sys *system, a, bb *sdk.Agent, aStream, bStream *sdk.Stream) {
	ctx := context.Background()
	sys = start(b, authConfig(b, kind, mode))
	dial := func(name string) *sdk.Agent {
		if mode == auth.Off {
			return dialAgent(b, sys, name, opts...)
		}
		return dialSigned(b, sys, name).Agent
	}
	a = dial("a")
	require.NoError(b, a.Heartbeat(ctx, commonpb.AgentState_RUNNABLE, nil))
	waitState(b, sys, a.ID(), commonpb.AgentState_RUNNABLE)
	bb = dial("b")
	var err error
	aStream, err = a.Receive(ctx)
	require.NoError(b, err)
	b.Cleanup(aStream.Close)
	bStream, err = bb.Receive(ctx)
	require.NoError(b, err)
	b.Cleanup(bStream.Close)
	return sys, a, bb, aStream, bStream
}

// commits returns a function that reads how many transactions the system's PostgreSQL
// database has committed or rolled back (pg_stat_database), or nil for the memory store.
// PostgreSQL publishes a backend's counts when it goes idle, at most once a second, so a
// reading waits that long first; the background work (sweeps, the outbox relay, the audit
// writer) is counted with the messages, and makes the figure a slight overestimate.
func commits(b *testing.B, sys *system) func() int64 {
	if sys.cfg.DatabaseURL == "" {
		return nil
	}
	return func() int64 {
		time.Sleep(1100 * time.Millisecond)
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, sys.cfg.DatabaseURL)
		require.NoError(b, err)
		defer conn.Close(ctx)
		var n int64
		require.NoError(b, conn.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n))
		return n
	}
}

// BenchmarkBaselineRawPostgres is the floor the PostgreSQL store is compared with in the same
// run: the least SQL a durable message plane does per message — insert the message, mark it
// delivered, mark it FULFILLED (one insert and two updates) — issued straight through pgx,
// without gRPC, validation or notification.
func BenchmarkBaselineRawPostgres(b *testing.B) {
	url := pgtest.NewDatabase(b)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(b, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `
		CREATE TABLE m (id uuid PRIMARY KEY, producer text, recipient text, state int, envelope bytea, updated_at timestamptz)`)
	require.NoError(b, err)
	envelope := make([]byte, 180)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		id := uuid.New()
		if _, err := pool.Exec(ctx, `INSERT INTO m VALUES ($1, 'a', 'b', 1, $2, now())`, id, envelope); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE m SET state = 2, updated_at = now() WHERE id = $1`, id); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE m SET state = 4, updated_at = now() WHERE id = $1`, id); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// reportLatency adds msgs/s and p50/p99 in milliseconds to the benchmark's output.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	var total time.Duration
	for _, d := range lat {
		total += d
	}
	b.ReportMetric(float64(len(lat))/total.Seconds(), "msgs/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, "p99-ms")
}

// BenchmarkRoomDecision measures a negotiation room decision with three critics over gRPC:
// SubmitProposal, three SubmitVote updates, WaitForDecision (the coordinator also sends the
// proposal to each critic and the decision to everyone through the router, and stores both
// as artifacts).
func BenchmarkRoomDecision(b *testing.B) {
	sys := start(b, newConfig(b, "memory"))
	rc := negotiationroompb.NewNegotiationRoomServiceClient(dialBench(b, sys))
	producer := dialAgent(b, sys, "producer")
	var critics []string
	for _, n := range []string{"c1", "c2", "c3"} {
		critics = append(critics, dialAgent(b, sys, n).ID())
	}
	ctx := context.Background()
	roomID := uniq(b, "room")
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		artifact := fmt.Sprintf("a-%d", i)
		_, err := rc.SubmitProposal(ctx, &negotiationroompb.SubmitProposalRequest{Proposal: &negotiationroompb.NegotiationProposal{
			ArtifactType: negotiationroompb.ArtifactType_CODE, ArtifactId: artifact, ProducerId: producer.ID(), Artifact: []byte("x"),
			ArtifactContentType: "text/plain", RequestedCritics: critics, NegotiationRoomId: roomID}})
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range critics {
			if _, err := rc.SubmitVote(ctx, &negotiationroompb.SubmitVoteRequest{Vote: &negotiationroompb.NegotiationVote{
				ArtifactId: artifact, CriticId: c, Score: 8.5, Confidence: 0.9, Passed: true, NegotiationRoomId: roomID}}); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := rc.WaitForDecision(ctx, &negotiationroompb.WaitForDecisionRequest{ArtifactId: artifact, NegotiationRoomId: roomID, TimeoutSeconds: 30}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// bareVotes is the bare-Temporal baseline's workflow: it takes three updates and returns.
func bareVotes(ctx workflow.Context) (int, error) {
	n := 0
	if err := workflow.SetUpdateHandler(ctx, "vote", func(ctx workflow.Context, score float64) error { n++; return nil }); err != nil {
		return 0, err
	}
	if err := workflow.Await(ctx, func() bool { return n == 3 }); err != nil {
		return 0, err
	}
	return n, nil
}

// BenchmarkBaselineBareTemporalRoom is the same shape in bare Temporal, measured in the same
// run: start a workflow, send three updates, wait for its result.
func BenchmarkBaselineBareTemporalRoom(b *testing.B) {
	c, tq := bareWorker(b, "bare-", []any{bareVotes}, nil)
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "bare/" + uuid.NewString(), TaskQueue: tq}, bareVotes)
		if err != nil {
			b.Fatal(err)
		}
		for i := range 3 {
			h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(), UpdateName: "vote", Args: []any{float64(i)}, WaitForStage: client.WorkflowUpdateStageCompleted})
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

func dialBench(b *testing.B, sys *system) *grpc.ClientConn {
	conn, err := grpc.NewClient(sys.app.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(b, err)
	b.Cleanup(func() { _ = conn.Close() })
	return conn
}

// warmupMessages is how many messages the router benchmarks send before their timers start.
const warmupMessages = 200

// BenchmarkRouterThroughput measures the router's sustained send → FULFILLED rate with up to
// eight messages in flight (inside the default buffer of ten) and both agents handling
// deliveries concurrently, as a producer streaming work to a consumer would run it; each
// operation is one message reaching FULFILLED.
//
// postgres-auth-required is the same run with SW4RM_AUTH=required and both agents signing
// every call: benchreport prints its ratio to postgres (the identity issue's target: ≤ 1.1×).
func BenchmarkRouterThroughput(b *testing.B) {
	for _, variant := range append(slices.Clone(storeKinds), "postgres-auth-required") {
		kind, mode := variant, auth.Off
		if variant == "postgres-auth-required" {
			kind, mode = "postgres", auth.Required
		}
		b.Run(variant, func(b *testing.B) {
			ctx := context.Background()
			sys, a, bb, aStream, bStream := routerPairAuth(b, kind, mode)
			count := commits(b, sys)
			// Both agents handle their deliveries with a few workers, as an agent with
			// independent work items would; the stream itself is read by one goroutine.
			handle := func(s *sdk.Stream, fn func(*sdk.Delivery)) {
				work := make(chan *sdk.Delivery, 64)
				for range 8 {
					go func() {
						for d := range work {
							fn(d)
						}
					}()
				}
				go func() {
					defer close(work)
					for {
						d, err := s.Next()
						if err != nil {
							return
						}
						work <- d
					}
				}()
			}
			handle(bStream, func(d *sdk.Delivery) {
				_, _ = d.Confirm(ctx)
				if d.Envelope.GetMessageType() == commonpb.MessageType_DATA {
					_ = d.Ack(ctx, commonpb.AckStage_FULFILLED, 0, "")
				}
			})
			// A: up to `window` messages in flight, sent concurrently as a producer streaming
			// work would (SendMessage calls share one HTTP/2 connection); a permit comes back
			// with each FULFILLED ACK.
			const window = 8
			permits := make(chan struct{}, window)
			fulfilled := make(chan struct{}, window)
			handle(aStream, func(d *sdk.Delivery) {
				_, _ = d.Confirm(ctx)
				if p, ok := d.AckPayload(); ok && p.Stage == commonpb.AckStage_FULFILLED {
					<-permits
					fulfilled <- struct{}{}
				}
			})
			payload := []byte(`{"task_type":"CreateTicket"}`)
			// run sends n messages and returns once all of them are FULFILLED.
			run := func(n int) {
				sendErr := make(chan error, 1)
				go func() {
					for range n {
						permits <- struct{}{}
						go func() {
							if _, err := a.Send(ctx, sdk.Message{To: bb.ID(), Payload: payload}); err != nil {
								select {
								case sendErr <- err:
								default:
								}
							}
						}()
					}
				}()
				for range n {
					select {
					case <-fulfilled:
					case err := <-sendErr:
						b.Fatal(err)
					}
				}
			}
			// The rate is a sustained one: a fresh system first opens its pool's connections
			// and prepares its statements, which a 2-second run would otherwise count.
			run(warmupMessages)
			var before int64
			if count != nil {
				before = count()
			}
			b.ResetTimer()
			t0 := time.Now()
			run(b.N)
			elapsed := time.Since(t0)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
			if count != nil {
				// Transactions per message, from SendMessage to the producer's FULFILLED.
				b.ReportMetric(float64(count()-before)/float64(b.N), "xacts/msg")
			}
			if gs, ok := sys.app.Store().(metrics.GroupCommitter); ok {
				// The mean group size, warm-up included.
				if groups, members := gs.GroupCommitStats(); groups > 0 {
					b.ReportMetric(float64(members)/float64(groups), "writes/commit")
				}
			}
		})
	}
}

// bareWorker is the setup every same-run baseline shares: a client of the test's Temporal
// server and a worker on a fresh task queue named prefix+random, running workflows and
// activities; both stop when the benchmark ends.
func bareWorker(b *testing.B, prefix string, workflows, activities []any) (client.Client, string) {
	b.Helper()
	c, err := client.Dial(client.Options{HostPort: temporalAddr, Logger: quietLogger()})
	require.NoError(b, err)
	b.Cleanup(c.Close)
	tq := prefix + uuid.NewString()[:8]
	w := sdkworker.New(c, tq, sdkworker.Options{})
	for _, wf := range workflows {
		w.RegisterWorkflow(wf)
	}
	for _, a := range activities {
		w.RegisterActivity(a)
	}
	require.NoError(b, w.Start())
	b.Cleanup(w.Stop)
	return c, tq
}
