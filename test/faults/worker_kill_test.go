package faults

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// TestWorkerKilledUnderTasks: one `sw4rm server` and two `sw4rm worker`s share PostgreSQL and
// Temporal; four agents serve tasks with the SDK. An operator submits 40 tasks, and one worker
// is killed with SIGKILL while they run. Every task completes, exactly once, on the worker
// that is left.
func TestWorkerKilledUnderTasks(t *testing.T) {
	dir := t.TempDir()
	pg := newCluster(t)
	ts := startTemporal(t, dir)
	cfg := sw4rmConfig{temporal: ts.addr, database: pg.URL()}
	server := startSW4RM(t, dir, "server", "server", cfg)
	w1 := startSW4RM(t, dir, "worker", "worker-1", cfg)
	startSW4RM(t, dir, "worker", "worker-2", cfg)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var agents []*taskAgent
	var stops []func()
	for range 4 {
		a := dialAgent(t, server.addr, agentID("runner"))
		register(t, a, "runner")
		ta := newTaskAgent(a, nil, 100*time.Millisecond)
		agents = append(agents, ta)
		stops = append(stops, ta.serve(ctx))
	}
	conn, err := grpc.NewClient(server.addr, connOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	op := newOperator(conn, ts.client)

	submit := func(from, to int) {
		for i := from; i < to; i++ {
			op.submit(ctx, agents[i%len(agents)].agent.ID(), taskID("task", i))
		}
	}
	submit(0, 20)
	// Kill the worker while tasks are running and queued: after a few have finished.
	if err := waitFor(time.Minute, 20*time.Millisecond, func() bool { return endedTasks(agents) >= 6 }); err != nil {
		t.Fatalf("only %d tasks ended before the kill", endedTasks(agents))
	}
	endedBeforeKill := endedTasks(agents)
	w1.kill()
	submit(20, 40)
	notDone := op.waitCompleted(ctx, 90*time.Second)
	cancel()
	for _, stop := range stops {
		stop()
	}

	f := figures{scenario: "worker-kill"}
	taskFigures(&f, op, notDone, agents...)
	f.add("ended_before_kill=%d", endedBeforeKill)
	f.report(t)
}

// endedTasks counts the tasks the agents finished.
func endedTasks(agents []*taskAgent) int {
	n := 0
	for _, ta := range agents {
		ta.mu.Lock()
		n += len(ta.ended)
		ta.mu.Unlock()
	}
	return n
}
