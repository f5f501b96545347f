package test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// taskStatus queries a task's workflow.
func taskStatus(t testing.TB, sys *system, taskID string) (workflows.TaskStatus, error) {
	v, err := sys.app.Temporal().QueryWorkflow(context.Background(), workflows.TaskWorkflowID(taskID), "", workflows.TaskStatusQuery)
	if err != nil {
		return workflows.TaskStatus{}, err
	}
	var st workflows.TaskStatus
	return st, v.Get(&st)
}

// waitTask waits until a task reaches state and returns its status.
func waitTask(t testing.TB, sys *system, taskID, state string) workflows.TaskStatus {
	t.Helper()
	var (
		st      workflows.TaskStatus
		lastErr error
	)
	ok := assert.Eventually(t, func() bool {
		s, err := taskStatus(t, sys, taskID)
		if err != nil {
			lastErr = err
			return false
		}
		st = s
		return st.State == state
	}, 30*time.Second, 20*time.Millisecond)
	require.True(t, ok, "task %s never reached %s (last %+v, last error %v)", taskID, state, st, lastErr)
	return st
}

// serve runs an SDK agent's task loop for the test's lifetime.
func serve(t *testing.T, a *sdk.Agent, h sdk.TaskHandler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Serve(ctx, h, &sdk.ServeOptions{Logf: t.Logf})
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func submit(t *testing.T, sc schedulerpb.SchedulerServiceClient, agentID, taskID string, prio int32, scope string) *schedulerpb.SubmitTaskResponse {
	t.Helper()
	res, err := sc.SubmitTask(context.Background(), &schedulerpb.SubmitTaskRequest{AgentId: agentID, TaskId: taskID, Priority: prio, Scope: scope,
		Params: []byte(`{"task":"` + taskID + `"}`), ContentType: "application/json"})
	require.NoError(t, err)
	return res
}

// runLog records the order in which an agent's handler started tasks.
type runLog struct {
	mu   sync.Mutex
	runs []string
}

func (l *runLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs = append(l.runs, s)
}

func (l *runLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.runs)
}

// TestCooperativePreemptionC4 replays App. D C.4 with an SDK agent on both stores: a task of
// priority 5 runs; one of equal priority does not preempt it; one of priority -5 makes the
// scheduler send PREEMPT_REQUEST, the agent yields at its next safe point, the urgent task
// runs, then the suspended task is resumed and completes, then the equal-priority one runs.
func TestCooperativePreemptionC4(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			b := dialAgent(t, sys, "b")
			sc := schedulerpb.NewSchedulerServiceClient(b.Conn())
			low, same, high := uniq(t, "low"), uniq(t, "same"), uniq(t, "high")
			var log runLog
			serve(t, b, func(ctx context.Context, run *sdk.TaskRun) ([]byte, error) {
				task := run.Task()
				log.add(task.ID + "/" + strconv.FormatBool(task.Resumed))
				if task.ID != low || task.Resumed {
					return []byte("done " + task.ID), nil
				}
				for { // long work in steps, with a safe point after each
					if err := run.SafePoint(); err != nil {
						return nil, err
					}
					select {
					case <-ctx.Done():
						return nil, ctx.Err()
					case <-time.After(5 * time.Millisecond):
					}
				}
			})
			waitState(t, sys, b.ID(), commonpb.AgentState_RUNNABLE)

			require.True(t, submit(t, sc, b.ID(), low, 5, "repo:app path:src/low/**").GetAccepted())
			waitTask(t, sys, low, workflows.TaskRunning)
			require.True(t, submit(t, sc, b.ID(), same, 5, "repo:app path:src/same/**").GetAccepted())
			waitTask(t, sys, same, workflows.TaskQueued)
			time.Sleep(200 * time.Millisecond)
			st, err := taskStatus(t, sys, low)
			require.NoError(t, err)
			require.Equal(t, workflows.TaskRunning, st.State, "equal priority never preempts (§7.1)")

			require.True(t, submit(t, sc, b.ID(), high, -5, "repo:app path:src/high/**").GetAccepted())
			hs := waitTask(t, sys, high, workflows.TaskCompleted)
			assert.Equal(t, "done "+high, hs.Result)
			ls := waitTask(t, sys, low, workflows.TaskCompleted)
			assert.Equal(t, "done "+low, ls.Result)
			assert.Equal(t, 1, ls.Suspensions)
			// Events may overtake each other on the way; the task applies them in the order
			// the scheduler numbered them.
			assert.Equal(t, []string{"ADMITTING", "QUEUED", "SCHEDULED", "RUNNING", "SUSPENDED", "RESUMED", "RUNNING", "COMPLETED"}, ls.History)
			waitTask(t, sys, same, workflows.TaskCompleted)
			assert.Equal(t, []string{low + "/false", high + "/false", low + "/true", same + "/false"}, log.get(),
				"the urgent task runs at once, the suspended one resumes before the later equal-priority one")
			waitState(t, sys, b.ID(), commonpb.AgentState_RUNNABLE)

			// Activity entries are created before execution and closed on completion (§10).
			poll, err := sc.PollActivityBuffer(context.Background(), &schedulerpb.PollActivityBufferRequest{AgentId: b.ID()})
			require.NoError(t, err)
			assert.Empty(t, poll.GetEntries())
			if kind == "postgres" {
				recordHistory(t, sys.app.Temporal(), workflows.TaskWorkflowID(low), "task_preempted_and_resumed")
				recordHistory(t, sys.app.Temporal(), workflows.AgentWorkflowID(b.ID()), "agent_c4_preemption")
			}
		})
	}
}

// TestForcedPreemptionC5 replays App. D C.5: a task inside a declared non-preemptible section
// ignores the PREEMPT_REQUEST until the section's max_duration passes; the scheduler sends
// TERMINATE with a grace period; an agent that stops in time has its task FAILED with
// forced_preemption, one that does not is sent KILL and the task fails the same way. The
// urgent task then runs on each.
func TestForcedPreemptionC5(t *testing.T) {
	cfg := newConfig(t, "postgres")
	cfg.TerminateGrace = time.Second
	sys := start(t, cfg)
	for _, honours := range []bool{true, false} {
		name := "kill"
		if honours {
			name = "terminate"
		}
		t.Run(name, func(t *testing.T) {
			a := dialAgent(t, sys, "critical")
			sc := schedulerpb.NewSchedulerServiceClient(a.Conn())
			crit, urgent := uniq(t, "crit"), uniq(t, "urgent")
			release := make(chan struct{})
			t.Cleanup(func() { close(release) })
			var endedBy error
			var mu sync.Mutex
			serve(t, a, func(ctx context.Context, run *sdk.TaskRun) ([]byte, error) {
				if run.Task().ID != crit {
					return []byte("urgent done"), nil
				}
				err := run.NonPreemptible(ctx, 1500*time.Millisecond, func(ctx context.Context) error {
					if honours {
						<-ctx.Done() // overruns its bound, but stops when terminated
						return ctx.Err()
					}
					<-release // overruns and ignores termination
					return nil
				})
				mu.Lock()
				endedBy = err
				mu.Unlock()
				return nil, err
			})
			waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)
			require.True(t, submit(t, sc, a.ID(), crit, 0, "repo:db resource:schema-migration").GetAccepted())
			waitTask(t, sys, crit, workflows.TaskRunning)
			require.Eventually(t, func() bool {
				v, err := sys.app.Temporal().QueryWorkflow(context.Background(), workflows.AgentWorkflowID(a.ID()), "", workflows.AgentTasksQuery)
				var d workflows.DispatchStatus
				return err == nil && v.Get(&d) == nil && d.NonPreemptible
			}, 10*time.Second, 10*time.Millisecond, "the section is declared")
			require.True(t, submit(t, sc, a.ID(), urgent, -19, "repo:other resource:cache").GetAccepted())
			time.Sleep(500 * time.Millisecond)
			st, err := taskStatus(t, sys, crit)
			require.NoError(t, err)
			require.Equal(t, workflows.TaskRunning, st.State, "preemption is deferred inside the section (§7.2)")

			cs := waitTask(t, sys, crit, workflows.TaskFailed)
			assert.Equal(t, commonpb.ErrorCode_FORCED_PREEMPTION, cs.ErrorCode)
			assert.Contains(t, cs.Reason, "forced_preemption")
			if honours {
				assert.Contains(t, cs.Reason, "terminated")
				mu.Lock()
				assert.True(t, errors.Is(endedBy, context.Canceled), "the handler saw its context cancelled: %v", endedBy)
				mu.Unlock()
			} else {
				assert.Contains(t, cs.Reason, "killed")
			}
			us := waitTask(t, sys, urgent, workflows.TaskCompleted)
			assert.Equal(t, "urgent done", us.Result)
		})
	}
}

// TestPriorityOrderingManyTasks: while a task runs, tasks of equal or lower priority queue;
// they run by priority, then in submission order (§7.1).
func TestPriorityOrderingManyTasks(t *testing.T) {
	sys := start(t, newConfig(t, "postgres"))
	a := dialAgent(t, sys, "worker")
	sc := schedulerpb.NewSchedulerServiceClient(a.Conn())
	blocker := uniq(t, "blocker")
	release := make(chan struct{})
	var log runLog
	serve(t, a, func(ctx context.Context, run *sdk.TaskRun) ([]byte, error) {
		log.add(run.Task().ID)
		if run.Task().ID == blocker {
			<-release
		}
		return nil, nil
	})
	waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)
	require.True(t, submit(t, sc, a.ID(), blocker, -19, "resource:blocker").GetAccepted())
	waitTask(t, sys, blocker, workflows.TaskRunning)

	prios := []int32{20, 3, 0, 7, 3, -19, 0, 20, 12, 3, -2, 7}
	type sub struct {
		id   string
		prio int32
		i    int
	}
	var subs []sub
	for i, p := range prios {
		id := uniq(t, "t"+strconv.Itoa(i))
		require.True(t, submit(t, sc, a.ID(), id, p, "resource:r"+strconv.Itoa(i)).GetAccepted())
		waitTask(t, sys, id, workflows.TaskQueued) // submission order is well defined
		subs = append(subs, sub{id, p, i})
	}
	close(release)
	for _, s := range subs {
		waitTask(t, sys, s.id, workflows.TaskCompleted)
	}
	slices.SortStableFunc(subs, func(a, b sub) int { return int(a.prio - b.prio) })
	want := []string{blocker}
	for _, s := range subs {
		want = append(want, s.id)
	}
	assert.Equal(t, want, log.get())
}

// TestScopeConflictGoesToHITL (§9.2–§9.3, App. D C.6): a task whose scope overlaps a running
// task's on another agent gets a confidence below the threshold and waits for HITL with
// reason CONFLICT; an operator approves by Temporal signal; the task then runs. A duplicate
// job and a reused task_id are refused.
func TestScopeConflictGoesToHITL(t *testing.T) {
	sys := start(t, hitlConfig(t, "postgres"))
	x, y := dialAgent(t, sys, "x"), dialAgent(t, sys, "y")
	sc := schedulerpb.NewSchedulerServiceClient(x.Conn())
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	serve(t, x, func(ctx context.Context, run *sdk.TaskRun) ([]byte, error) { <-release; return []byte("x done"), nil })
	serve(t, y, func(ctx context.Context, run *sdk.TaskRun) ([]byte, error) { return []byte("y done"), nil })
	t.Cleanup(free) // before the agents stop (cleanups run last-in first-out)
	waitState(t, sys, x.ID(), commonpb.AgentState_RUNNABLE)
	waitState(t, sys, y.ID(), commonpb.AgentState_RUNNABLE)

	tx, ty := uniq(t, "tx"), uniq(t, "ty")
	require.True(t, submit(t, sc, x.ID(), tx, 0, "repo:shop path:src/api/**").GetAccepted())
	waitTask(t, sys, tx, workflows.TaskRunning)

	res := submit(t, sc, y.ID(), ty, 0, "repo:shop path:src/api/orders.go")
	require.True(t, res.GetAccepted(), "held, not refused: %s", res.GetReason())
	assert.Contains(t, res.GetReason(), "awaiting HITL decision hitl/")
	assert.Contains(t, res.GetReason(), "CONFLICT")
	st := waitTask(t, sys, ty, workflows.TaskAwaitingHITL)
	require.Len(t, st.HitlIDs, 1)
	assert.Regexp(t, regexp.MustCompile(`^[0-9a-f-]{36}$`), st.HitlIDs[0])

	// A duplicate job (same agent type, params and scope) is refused pending authorization,
	// and a task_id is never reused.
	dup, err := sc.SubmitTask(context.Background(), &schedulerpb.SubmitTaskRequest{AgentId: x.ID(), TaskId: uniq(t, "dup"),
		Scope: "repo:shop path:src/api/**", Params: []byte(`{"task":"` + tx + `"}`), ContentType: "application/json"})
	require.NoError(t, err)
	assert.False(t, dup.GetAccepted())
	assert.Contains(t, dup.GetReason(), "duplicate_detected")
	again := submit(t, sc, x.ID(), tx, 7, "repo:elsewhere")
	assert.False(t, again.GetAccepted())
	assert.Contains(t, again.GetReason(), "already submitted")
	// The refused resubmission left the running task's activity entry as it was (§10).
	poll, err := sc.PollActivityBuffer(context.Background(), &schedulerpb.PollActivityBufferRequest{AgentId: x.ID()})
	require.NoError(t, err)
	require.Len(t, poll.GetEntries(), 1)
	assert.Equal(t, tx, poll.GetEntries()[0].GetTaskId())
	assert.Contains(t, poll.GetEntries()[0].GetDescription(), "(priority 0) scope: repo:shop path:src/api/**")

	// carol may decide CONFLICT invocations; she approves with a raw Temporal signal, signed
	// with her own key.
	require.NoError(t, sys.app.Temporal().SignalWorkflow(context.Background(), hitl.WorkflowID(st.HitlIDs[0]), "", hitl.DecisionSignal,
		signedBy(t, hitl.Decision{InvocationID: st.HitlIDs[0], Decision: hitl.Approve, Rationale: "different files in practice", Operator: "carol"}, carolKey)))
	ys := waitTask(t, sys, ty, workflows.TaskCompleted)
	assert.Equal(t, "y done", ys.Result)
	assert.Contains(t, ys.History, workflows.TaskAwaitingHITL)
	free()
	waitTask(t, sys, tx, workflows.TaskCompleted)
}

// TestControlToSchedulerValidated: what an agent addresses to the scheduler is checked
// (§7.2): only section declarations, with their mandatory bound, for a task the agent holds.
func TestControlToSchedulerValidated(t *testing.T) {
	sys := start(t, newConfig(t, "memory"))
	a := dialAgent(t, sys, "agent")
	require.NoError(t, a.Heartbeat(context.Background(), commonpb.AgentState_AGENT_STATE_UNSPECIFIED, nil))
	waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)
	send := func(c protocol.Control) error {
		env, err := protocol.NewControlEnvelope(uuid.NewString(), a.ID(), c)
		require.NoError(t, err)
		return a.SendEnvelope(context.Background(), env, protocol.SchedulerID)
	}
	err := send(protocol.Control{Type: protocol.ControlRun, TaskID: "t1"})
	require.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, sdk.CodeOf(err), "%v", err)
	assert.Contains(t, err.Error(), "agents may send the scheduler only")
	err = send(protocol.Control{Type: protocol.ControlNonPreemptibleBegin, TaskID: "t1"})
	require.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, sdk.CodeOf(err), "%v", err)
	assert.Contains(t, err.Error(), "max_duration_ms")
	require.NoError(t, send(protocol.Control{Type: protocol.ControlNonPreemptibleBegin, TaskID: "t1", MaxDurationMS: 1000}),
		"a well-formed declaration is accepted (and ignored by the scheduler while t1 is not running)")
	v, err := sys.app.Temporal().QueryWorkflow(context.Background(), workflows.AgentWorkflowID(a.ID()), "", workflows.AgentTasksQuery)
	require.NoError(t, err)
	var d workflows.DispatchStatus
	require.NoError(t, v.Get(&d))
	assert.False(t, d.NonPreemptible)
}
