package faults

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// pickFirst makes a client use the first frontend that answers and move to the next one
// only when it is gone.
var pickFirst = grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"pick_first":{}}]}`)

// TestFrontendKilledWithTwoFrontendsAndTwoWorkers: two `sw4rm server`s and two
// `sw4rm worker`s share one PostgreSQL and one Temporal. A sends B 500 messages through both
// frontends (round robin), B streams from the first frontend, an operator submits 33 tasks
// through both to three agents that serve from the first too, and the first frontend is killed
// with SIGKILL midway, while each task agent runs a task. Clients move to the frontend that is
// left: B's stream reopens there and gets what it had not confirmed, the task agents' streams
// reopen there while their tasks run on, and the tasks' results reach the scheduler through it;
// a submission that died with the frontend is retried with the same task_id. Nothing accepted
// is lost, handled twice or stranded.
func TestFrontendKilledWithTwoFrontendsAndTwoWorkers(t *testing.T) {
	dir := t.TempDir()
	pg := newCluster(t)
	ts := startTemporal(t, dir)
	cfg := sw4rmConfig{temporal: ts.addr, database: pg.URL(), extra: []string{"SW4RM_ACK_TIMEOUT=60s"}}
	f1 := startSW4RM(t, dir, "server", "frontend-1", cfg)
	f2 := startSW4RM(t, dir, "server", "frontend-2", cfg)
	startSW4RM(t, dir, "worker", "worker-1", cfg)
	startSW4RM(t, dir, "worker", "worker-2", cfg)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Task agents serve from the frontend that is killed: their streams break with tasks
	// running, and the SDK's Serve reopens them on the other frontend while the tasks run on
	// and their ACKs are sent again there.
	var agents []*taskAgent
	var stops []func()
	streams := make([]*streamCount, 3)
	for i := range streams {
		streams[i] = &streamCount{}
		killed, killedOpt := frontends(f1.addr, f2.addr)
		a := dialAgent(t, killed, agentID("runner"), killedOpt, pickFirst, streams[i].interceptor())
		register(t, a, "runner")
		ta := newTaskAgent(a, nil, 100*time.Millisecond)
		agents = append(agents, ta)
		stops = append(stops, ta.serve(ctx))
	}
	both, bothOpt := frontends(f1.addr, f2.addr)
	conn, err := grpc.NewClient(both, connOpts(bothOpt, grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`))...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	op := newOperator(conn, ts.client)

	first, firstOpt := frontends(f1.addr, f2.addr)
	b := dialAgent(t, first, agentID("consumer"), firstOpt, pickFirst)
	register(t, b, "consumer")
	spread, spreadOpt := frontends(f1.addr, f2.addr)
	a := dialAgent(t, spread, agentID("producer"), spreadOpt)
	register(t, a, "producer")
	fl := startFlow(ctx, a, b, 500, 4, 0)
	p := fl.p

	var submitting sync.WaitGroup
	submit := func(from, to int) {
		submitting.Go(func() {
			for i := from; i < to; i++ {
				op.submit(ctx, agents[i%len(agents)].agent.ID(), taskID("task", i))
			}
		})
	}
	submit(0, 15)
	if err := waitFor(2*time.Minute, 10*time.Millisecond, func() bool { return p.acceptedCount() >= 150 && endedTasks(agents) >= 3 }); err != nil {
		t.Fatalf("before the kill: %d messages accepted, %d tasks ended", p.acceptedCount(), endedTasks(agents))
	}
	// A task runs on every task agent when frontend-1 dies: each waits until after the kill.
	for i, ta := range agents {
		ta.hold()
		op.submit(ctx, ta.agent.ID(), taskID("held", i))
	}
	if err := waitFor(time.Minute, 10*time.Millisecond, func() bool {
		for _, ta := range agents {
			if !ta.held() {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatal("the held tasks never started running")
	}
	f1.kill()
	// The held tasks finish only once every task agent's stream reopened on frontend-2.
	if err := waitFor(time.Minute, 10*time.Millisecond, func() bool {
		for _, c := range streams {
			if c.n.Load() < 2 {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatal("a task agent's stream never reopened on frontend-2")
	}
	for _, ta := range agents {
		ta.release()
	}
	submit(15, 30)
	fl.settle(t, ctx, time.Minute)
	submitting.Wait()
	// A submission that died with frontend-1 after starting its task's workflow leaves the
	// admission to the workflow, which takes over after workflows.FrontendAdmitWait (30 s).
	notDone := op.waitCompleted(ctx, 90*time.Second)
	cancel()
	fl.stop()
	for _, stop := range stops {
		stop()
	}

	f := figures{scenario: "frontend-kill"}
	fl.figures(&f)
	fl.audit(t, &f, pg)
	taskFigures(&f, op, notDone, agents...)
	opened := int64(0)
	for _, c := range streams {
		opened += c.n.Load()
	}
	f.add("task_agent_streams=%d", opened)
	f.add("frontends=2 workers=2 killed=frontend-1")
	f.report(t)
}
