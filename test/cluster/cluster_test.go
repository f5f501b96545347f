// Package cluster_test runs SW4RM on the cluster kit (package cluster): a Temporal server on
// a PostgreSQL of the test's own, two sw4rm servers behind the kit's load balancer and three
// workers, and shows agents' traffic going on while a server and a worker are killed.
package cluster_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sw4rm/sw4rm-temporal/cluster"
	"github.com/sw4rm/sw4rm-temporal/cluster/clustertest"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// startCluster starts the kit on a PostgreSQL of its own, in a state directory under the
// system's temp dir (which the postgres user can reach, when the test runs as root).
func startCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	server, sqlTool := clustertest.NeedTools(t)
	state, err := os.MkdirTemp("", "sw4rm-cluster-test-")
	if err != nil {
		t.Fatal(err)
	}
	bin := clustertest.Build(t, state, "sw4rm", "")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{
		StateDir: state, TemporalServer: server, SQLTool: sqlTool, SW4RM: bin,
		Env:  []string{"SW4RM_LOG_LEVEL=info", "SW4RM_HEARTBEAT_INTERVAL=2s"},
		Logf: t.Logf,
	})
	if err != nil {
		_ = os.RemoveAll(state)
		t.Fatalf("start cluster: %v", err)
	}
	t.Logf("cluster up in %s", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range c.Procs() {
				t.Logf("%s log (tail):\n%s", name, tailFile(c.LogPath(name), 15))
			}
		}
		c.Stop()
		_ = os.RemoveAll(state)
	})
	return c
}

// dial connects an agent through the load balancer, reconnecting within a second when its
// server goes away.
func dial(t *testing.T, c *cluster.Cluster, id string) *sdk.Agent {
	t.Helper()
	a, err := sdk.Dial(c.Addr(), id, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// retry runs fn until it succeeds or timeout passes; calls made while a server dies fail.
func retry(t *testing.T, timeout time.Duration, what string, fn func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := fn(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func register(t *testing.T, a *sdk.Agent) {
	t.Helper()
	retry(t, 60*time.Second, "register "+a.ID(), func(ctx context.Context) error {
		if err := a.Register(ctx, &registrypb.AgentDescriptor{Name: a.ID(), ModalitiesSupported: []string{"application/json"}}); err != nil {
			return err
		}
		return a.Heartbeat(ctx, commonpb.AgentState_RUNNABLE, nil)
	})
}

// each reads a's stream until ctx ends, confirming every delivery and handing it to fn, and
// reopens the stream when it breaks (its server killed).
func each(ctx context.Context, a *sdk.Agent, fn func(d *sdk.Delivery)) {
	for ctx.Err() == nil {
		s, err := a.Receive(ctx)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for {
			d, err := s.Next()
			if err != nil {
				break
			}
			_, _ = d.Confirm(ctx)
			fn(d)
		}
		s.Close()
	}
}

// echo answers every DATA message it receives with the same payload, until ctx ends.
func echo(ctx context.Context, a *sdk.Agent) {
	each(ctx, a, func(d *sdk.Delivery) {
		if d.Envelope.GetMessageType() == commonpb.MessageType_DATA {
			_, _ = a.Send(ctx, sdk.Message{To: d.Envelope.GetProducerId(), Payload: d.Envelope.GetPayload(),
				CorrelationID: d.Envelope.GetCorrelationId()})
		}
	})
}

// inbox collects the payloads of DATA messages an agent receives.
type inbox struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (in *inbox) run(ctx context.Context, a *sdk.Agent) {
	each(ctx, a, func(d *sdk.Delivery) {
		in.mu.Lock()
		in.seen[string(d.Envelope.GetPayload())] = true
		in.mu.Unlock()
	})
}

func (in *inbox) has(p string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.seen[p]
}

// roundTrip sends a message to the echo agent and waits for it to come back.
func roundTrip(t *testing.T, from *sdk.Agent, in *inbox, to string, n int) {
	t.Helper()
	payload := fmt.Sprintf(`{"n":%d}`, n)
	start := time.Now()
	retry(t, 60*time.Second, fmt.Sprintf("send message %d", n), func(ctx context.Context) error {
		_, err := from.Send(ctx, sdk.Message{To: to, Payload: []byte(payload), IdempotencyToken: fmt.Sprintf("rt-%d", n)})
		return err
	})
	deadline := time.Now().Add(60 * time.Second)
	for !in.has(payload) {
		if time.Now().After(deadline) {
			t.Fatalf("message %d did not come back within 60s", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("message %d round trip: %s", n, time.Since(start).Round(time.Millisecond))
}

// submit submits a task to agent through the load balancer; a retry told the task_id was
// already submitted counts (the earlier attempt went through).
func submit(t *testing.T, conn grpc.ClientConnInterface, agent, taskID string) {
	t.Helper()
	sched := schedulerpb.NewSchedulerServiceClient(conn)
	retry(t, 60*time.Second, "submit "+taskID, func(ctx context.Context) error {
		res, err := sched.SubmitTask(ctx, &schedulerpb.SubmitTaskRequest{AgentId: agent, TaskId: taskID, Scope: "resource:" + taskID,
			Params: []byte(`{}`), ContentType: "application/json"})
		if err != nil {
			return err
		}
		if !res.GetAccepted() && res.GetReason() != "" && !isDuplicate(res.GetReason()) {
			t.Fatalf("task %s refused: %s", taskID, res.GetReason())
		}
		return nil
	})
}

func isDuplicate(reason string) bool { return strings.HasPrefix(reason, "duplicate_detected") }

// waitTask waits until the task's workflow reports COMPLETED.
func waitTask(t *testing.T, tc client.Client, taskID string, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	var st workflows.TaskStatus
	retry(t, timeout, "task "+taskID+" completed", func(ctx context.Context) error {
		v, err := tc.QueryWorkflow(ctx, workflows.TaskWorkflowID(taskID), "", workflows.TaskStatusQuery)
		if err != nil {
			return err
		}
		if err := v.Get(&st); err != nil {
			return err
		}
		if st.State != workflows.TaskCompleted {
			return fmt.Errorf("state %s", st.State)
		}
		return nil
	})
	t.Logf("task %s completed (%s after the wait began)", taskID, time.Since(start).Round(time.Millisecond))
}

// TestClusterKills registers agents and runs a task and a message round trip through the
// load balancer, kills server-1 and worker-1 with SIGKILL while a task runs, and shows
// messages and tasks going on and the running task finishing.
func TestClusterKills(t *testing.T) {
	c := startCluster(t)
	tc, err := client.Dial(client.Options{HostPort: c.TemporalAddr(), Namespace: c.Namespace(),
		Logger: tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Closed runs are kept for the namespace's retention, the 7 days sw4rm expects
	// (docs/reliability.md, "Retention"); the kit registered it.
	ns, err := tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: c.Namespace()})
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration(); got != 7*24*time.Hour {
		t.Errorf("namespace %s retains closed runs %s, want 168h", c.Namespace(), got)
	}

	echoer, producer, tasker := dial(t, c, "echo-agent"), dial(t, c, "producer-agent"), dial(t, c, "task-agent")
	for _, a := range []*sdk.Agent{echoer, producer, tasker} {
		register(t, a)
	}
	in := &inbox{seen: map[string]bool{}}
	go echo(ctx, echoer)
	go in.run(ctx, producer)
	// Tasks take a moment, so that one is running when the kills come.
	go func() {
		for ctx.Err() == nil {
			_ = tasker.Serve(ctx, func(ctx context.Context, run *sdk.TaskRun) ([]byte, error) {
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(2 * time.Second):
				}
				return []byte(`{"ok":true}`), nil
			}, nil)
			time.Sleep(100 * time.Millisecond)
		}
	}()

	roundTrip(t, producer, in, "echo-agent", 1)
	submit(t, producer.ClientConn(), "task-agent", "task-1")
	waitTask(t, tc, "task-1", 90*time.Second)

	// The balancer gave the agents' connections out in turn: server-1 holds some of them.
	conns := c.Connections()
	t.Logf("connections through the load balancer: %v", conns)
	if conns["server-1"] == 0 {
		t.Fatalf("no agent connection goes to server-1: %v", conns)
	}
	// task-2 runs while server-1 and worker-1 die.
	submit(t, producer.ClientConn(), "task-agent", "task-2")
	killed := time.Now()
	for _, name := range []string{"server-1", "worker-1"} {
		if err := c.Kill(name); err != nil {
			t.Fatal(err)
		}
	}
	for i := 2; i <= 4; i++ {
		roundTrip(t, producer, in, "echo-agent", i)
	}
	submit(t, producer.ClientConn(), "task-agent", "task-3")
	waitTask(t, tc, "task-2", 90*time.Second)
	waitTask(t, tc, "task-3", 90*time.Second)
	t.Logf("after the kills: 3 round trips and 2 tasks in %s", time.Since(killed).Round(time.Millisecond))

	// The killed processes come back on their ports.
	for _, name := range []string{"server-1", "worker-1"} {
		if err := c.Start(context.Background(), name); err != nil {
			t.Fatal(err)
		}
	}
	roundTrip(t, producer, in, "echo-agent", 5)
	t.Logf("connections through the load balancer after the restart: %v", c.Connections())
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
