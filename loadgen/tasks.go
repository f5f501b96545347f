package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// taskParams are a generated task's params.
type taskParams struct {
	Op string `json:"loadgen_op"`
	// Steps of 10 ms the handler works, with a safe point between steps.
	Steps int `json:"steps"`
}

// Task priorities of the Tasks pattern: the high one is numerically lower, so it preempts.
const (
	lowPriority  = 10
	highPriority = -5
)

// servers are agents that run tasks with sdk.Agent.Serve, counting each task's completed
// handler runs.
type servers struct {
	agents []*sdk.Agent
	mu     sync.Mutex
	// completions counts handler runs that returned a result, by task_id; started is
	// closed once a task's handler first ran.
	completions map[string]int
	started     map[string]chan struct{}
	// onDone is called with a task's params and task_id each time its handler returned a
	// result; n counts those runs, so n > 1 is a task run to completion again.
	onDone func(p taskParams, taskID string, n int)
	l      *ledger
}

func (s *servers) setup(ctx context.Context, r *runner, role string, n int) error {
	s.completions, s.started = map[string]int{}, map[string]chan struct{}{}
	for i := range n {
		a, err := r.agent(ctx, role+"-"+strconv.Itoa(i), nil)
		if err != nil {
			return err
		}
		s.agents = append(s.agents, a)
		r.background(func() {
			// Serve rides out outages by itself and returns only for good reasons (a
			// SHUTDOWN, a permanent failure): serve again until Run ends.
			for attempt := 0; ctx.Err() == nil; attempt++ {
				err := a.Serve(ctx, s.handle, &sdk.ServeOptions{Logf: r.cfg.Logf})
				if ctx.Err() == nil {
					r.logf("loadgen: %s: serve: %v (serving again)", a.ID(), err)
				}
				if !sleep(ctx, backoff(attempt)) {
					return
				}
			}
		})
	}
	return nil
}

// startedCh returns the channel closed once taskID's handler ran.
func (s *servers) startedCh(taskID string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.started[taskID]
	if ch == nil {
		ch = make(chan struct{})
		s.started[taskID] = ch
	}
	return ch
}

func (s *servers) handle(ctx context.Context, run *sdk.TaskRun) ([]byte, error) {
	t := run.Task()
	var p taskParams
	_ = json.Unmarshal(t.Params, &p)
	ch := s.startedCh(t.ID)
	s.mu.Lock()
	select {
	case <-ch:
	default:
		close(ch)
	}
	s.mu.Unlock()
	for range p.Steps {
		if err := run.SafePoint(); err != nil {
			if errors.Is(err, sdk.ErrPreempted) {
				s.l.note("preempted", 1)
			}
			return nil, err
		}
		if !sleep(ctx, 10*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	s.completions[t.ID]++
	n := s.completions[t.ID]
	s.mu.Unlock()
	if s.onDone != nil {
		s.onDone(p, t.ID, n)
	}
	return []byte(`{"done":"` + t.ID + `"}`), nil
}

// taskState asks the activity buffer for a task's state ("active", "completed", ...), ""
// when it lists no entry for it.
func taskState(ctx context.Context, a *sdk.Agent, taskID string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	resp, err := directorypb.NewDirectoryServiceClient(a.ClientConn()).ListTasks(ctx, &directorypb.ListTasksRequest{AgentId: a.ID(), TaskId: taskID})
	if err != nil {
		return "", err
	}
	for _, e := range resp.GetTasks() {
		if e.GetTaskId() == taskID {
			return e.GetState(), nil
		}
	}
	return "", nil
}

// tasks is the Tasks pattern.
type tasks struct {
	l     *ledger
	srv   servers
	next  atomic.Int64
	mu    sync.Mutex
	done  map[string]int        // op → its tasks completed
	agent map[string]*sdk.Agent // op → the agent serving it
}

func (t *tasks) setup(ctx context.Context, r *runner) error {
	t.done, t.agent = map[string]int{}, map[string]*sdk.Agent{}
	t.srv.l = t.l
	t.srv.onDone = func(p taskParams, taskID string, n int) {
		if p.Op == "" {
			return
		}
		if n > 1 {
			t.l.double(p.Op)
			return
		}
		t.mu.Lock()
		t.done[p.Op]++
		both := t.done[p.Op] == 2
		t.mu.Unlock()
		if both {
			t.l.complete(p.Op)
		}
	}
	return t.srv.setup(ctx, r, "task", r.cfg.TaskAgents)
}

// submit submits one task until the scheduler answers; it reports whether it was accepted.
func submit(ctx context.Context, l *ledger, a *sdk.Agent, taskID string, prio int32, p taskParams) bool {
	params, _ := json.Marshal(p)
	sc := schedulerpb.NewSchedulerServiceClient(a.ClientConn())
	attempts := 0
	var res *schedulerpb.SubmitTaskResponse
	err := retry(ctx, l, func(ctx context.Context) error {
		attempts++
		var err error
		res, err = sc.SubmitTask(ctx, &schedulerpb.SubmitTaskRequest{AgentId: a.ID(), TaskId: taskID, Priority: prio,
			Params: params, ContentType: "application/json", Scope: "resource:" + taskID})
		return err
	})
	switch {
	case err != nil:
		return false
	case res.GetAccepted():
		return true
	case attempts > 1 && strings.HasPrefix(res.GetReason(), "duplicate_detected: task_id"):
		// A retry told the task_id was submitted: the earlier attempt went through.
		return true
	default:
		l.note("refused", 1)
		return false
	}
}

func (t *tasks) op(ctx context.Context, id string) {
	a := t.srv.agents[int(t.next.Add(1))%len(t.srv.agents)]
	t.mu.Lock()
	t.agent[id] = a
	t.mu.Unlock()
	o := t.l.start(id)
	low, high := id+"-low", id+"-high"
	if !submit(ctx, t.l, a, low, lowPriority, taskParams{Op: id, Steps: 40}) {
		if ctx.Err() == nil {
			t.l.refuse(id)
		}
		return
	}
	t.l.ack(id)
	// The high-priority task goes in once the low one runs, so that it preempts it (or, when
	// the agent is busy with another pair, queues ahead of it).
	select {
	case <-t.srv.startedCh(low):
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
		return
	}
	if !submit(ctx, t.l, a, high, highPriority, taskParams{Op: id, Steps: 5}) {
		if ctx.Err() == nil {
			t.l.fail(id)
		}
		return
	}
	select {
	case <-o.done:
	case <-ctx.Done():
	}
}

// probe asks the activity buffer whether the unfinished pairs' tasks are still active.
func (t *tasks) probe(ctx context.Context) {
	t.mu.Lock()
	agents := make(map[string]*sdk.Agent, len(t.agent))
	for k, v := range t.agent {
		agents[k] = v
	}
	t.mu.Unlock()
	for _, id := range t.l.unfinished() {
		a := agents[id]
		if a == nil {
			continue
		}
		active := false
		for _, task := range []string{id + "-low", id + "-high"} {
			if st, err := taskState(ctx, a, task); err == nil && st == "active" {
				active = true
			}
		}
		t.l.setInFlight(id, active)
	}
}
