package workflows_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// schedulerHarness drives an agent lifecycle as the scheduler of its tasks: it reads the
// CONTROL messages the workflow sends to "subject" and records the task events it reports.
type schedulerHarness struct {
	t      *testing.T
	env    *testsuite.TestWorkflowEnvironment
	st     store.Store
	mu     sync.Mutex
	events map[string][]workflows.TaskEvent // task_id → events reported
	// signals lists, per task, the states each signal carried (one per TaskEventSignal,
	// several per TaskEventsSignal).
	signals map[string][][]string
	codes   map[string]commonpb.ErrorCode
	run     string // the lifecycle's run ID, as its task reports saw it
}

// runID is the lifecycle run's ID (known once it reported a task event).
func (h *schedulerHarness) runID() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	require.NotEmpty(h.t, h.run)
	return h.run
}

// states returns the states reported for a task in the scheduler's order (the mock runs
// each external signal on its own goroutine, so arrival order is not that order).
func (h *schedulerHarness) states(taskID string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	evs := slices.Clone(h.events[taskID])
	slices.SortFunc(evs, func(a, b workflows.TaskEvent) int { return int(a.Seq - b.Seq) })
	var out []string
	for _, ev := range evs {
		out = append(out, ev.State)
	}
	return out
}

// requireStates asserts a task's reported states once the mock's goroutines, which may still
// be running when the workflow has returned, have recorded them.
func (h *schedulerHarness) requireStates(taskID string, want ...string) {
	h.t.Helper()
	assert.Eventually(h.t, func() bool { return slices.Equal(want, h.states(taskID)) }, 5*time.Second, time.Millisecond)
	require.Equal(h.t, want, h.states(taskID))
}

// requireCode asserts a task's reported error code, as requireStates does its states.
func (h *schedulerHarness) requireCode(taskID string, want commonpb.ErrorCode, msg ...any) {
	h.t.Helper()
	assert.Eventually(h.t, func() bool { return h.code(taskID) == want }, 5*time.Second, time.Millisecond)
	require.Equal(h.t, want, h.code(taskID), msg...)
}

func (h *schedulerHarness) code(taskID string) commonpb.ErrorCode {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.codes[taskID]
}

func newSchedulerHarness(t *testing.T) *schedulerHarness {
	env, st := newEnv(t)
	h := &schedulerHarness{t: t, env: env, st: st, events: map[string][]workflows.TaskEvent{}, signals: map[string][][]string{}, codes: map[string]commonpb.ErrorCode{}}
	var acts *activities.Activities
	signal := func(ctx context.Context, in activities.SignalInput) error {
		var evs []workflows.TaskEvent
		switch in.Signal {
		case workflows.TaskEventSignal:
			var ev workflows.TaskEvent
			require.NoError(t, json.Unmarshal(in.Arg, &ev))
			evs = []workflows.TaskEvent{ev}
		case workflows.TaskEventsSignal:
			var b workflows.TaskEvents
			require.NoError(t, json.Unmarshal(in.Arg, &b))
			evs = b.Events
		default:
			t.Errorf("unexpected signal %s", in.Signal)
		}
		id := in.WorkflowID[len("task/"):]
		h.mu.Lock()
		defer h.mu.Unlock()
		h.run = activity.GetInfo(ctx).WorkflowExecution.RunID
		var states []string
		for _, ev := range evs {
			h.events[id] = append(h.events[id], ev)
			states = append(states, ev.State)
			if ev.ErrorCode != 0 {
				h.codes[id] = ev.ErrorCode
			}
		}
		h.signals[id] = append(h.signals[id], states)
		return nil
	}
	env.OnActivity(acts.SignalWorkflow, mock.Anything, mock.Anything).Return(signal)
	// A step's report records its transitions for real and hands its task events to signal.
	recorder := &activities.Activities{Store: st, Sink: audit.New(nil, st.Audit())}
	env.OnActivity(acts.ReportStep, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in activities.StepReport) error {
			for _, s := range in.States {
				if err := recorder.RecordAgentState(ctx, s); err != nil {
					return err
				}
			}
			for _, s := range in.Signals {
				if err := signal(ctx, s); err != nil {
					return err
				}
			}
			return nil
		})
	return h
}

// controls returns the CONTROL messages sent to the agent since the last call.
func (h *schedulerHarness) controls() []sentControl {
	h.t.Helper()
	ds, err := h.st.Messages().Claim(context.Background(), store.ClaimRequest{AgentID: "subject", Limit: 100, Lease: time.Hour})
	require.NoError(h.t, err)
	var out []sentControl
	for _, d := range ds {
		if d.Envelope.GetMessageType() != commonpb.MessageType_CONTROL {
			continue
		}
		c, perr := protocol.ParseControl(d.Envelope)
		require.Nil(h.t, perr)
		out = append(out, sentControl{id: d.Envelope.GetMessageId(), c: c})
	}
	return out
}

type sentControl struct {
	id string
	c  protocol.Control
}

func (h *schedulerHarness) ack(id string, stage commonpb.AckStage, code commonpb.ErrorCode, note string) {
	h.env.SignalWorkflow(workflows.AgentControlAckSignal, workflows.ControlAck{MessageID: id, Stage: stage, ErrorCode: code, Note: note})
}

func (h *schedulerHarness) enqueue(id string, prio int32, at time.Duration) {
	h.env.SignalWorkflow(workflows.AgentTaskEnqueueSignal, workflows.QueuedTask{TaskID: id, Priority: prio, SubmittedAt: time.Unix(0, 0).Add(at)})
}

// signalsOf returns the states each signal to a task carried, in the order sent.
func (h *schedulerHarness) signalsOf(taskID string) [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.signals[taskID])
}

func (h *schedulerHarness) tasks() workflows.DispatchStatus {
	h.t.Helper()
	v, err := h.env.QueryWorkflow(workflows.AgentTasksQuery)
	require.NoError(h.t, err)
	var s workflows.DispatchStatus
	require.NoError(h.t, v.Get(&s))
	return s
}

func onlyControl(t *testing.T, cs []sentControl, typ, task string) sentControl {
	t.Helper()
	require.Len(t, cs, 1, "exactly one CONTROL message: %+v", cs)
	require.Equal(t, typ, cs[0].c.Type)
	require.Equal(t, task, cs[0].c.TaskID)
	return cs[0]
}

// App. D C.4: RUN low; a higher-priority task makes the scheduler send PREEMPT_REQUEST; the
// agent yields; the urgent task runs; then the suspended one is resumed. A task of equal
// priority never preempts and runs after the resumed one (FIFO within a priority, §7.1).
func TestDispatchCooperativePreemption(t *testing.T) {
	h := newSchedulerHarness(t)
	var lowRun, urgentRun, preempt sentControl
	step := func(at time.Duration, f func()) { h.env.RegisterDelayedCallback(f, at) }
	step(time.Second, func() { h.env.SignalWorkflow(workflows.AgentReadySignal, workflows.AgentReady{Via: "stream"}) })
	step(2*time.Second, func() { h.enqueue("low", 5, 1) })
	step(3*time.Second, func() {
		lowRun = onlyControl(t, h.controls(), protocol.ControlRun, "low")
		require.Equal(t, int32(5), lowRun.c.Priority)
		require.False(t, lowRun.c.Resume)
		h.ack(lowRun.id, commonpb.AckStage_RECEIVED, 0, "")
	})
	step(4*time.Second, func() {
		require.Equal(t, "RUNNING", status(t, h.env).State)
		h.enqueue("same", 5, 2) // equal priority: no preemption (§7.1)
	})
	step(5*time.Second, func() {
		require.Empty(t, h.controls(), "equal priority never preempts")
		h.enqueue("urgent", -10, 3)
	})
	step(6*time.Second, func() {
		preempt = onlyControl(t, h.controls(), protocol.ControlPreemptRequest, "low")
		st := h.tasks()
		require.True(t, st.PreemptPending)
		require.Equal(t, "low", st.Running)
		require.Equal(t, int32(5), st.RunningPriority)
		require.Equal(t, []string{"urgent", "same"}, st.Queue, "the queue in dispatch order")
		require.Equal(t, []int32{-10, 5}, st.QueuePriorities, "each queued task's priority, index for index")
		h.ack(preempt.id, commonpb.AckStage_RECEIVED, 0, "")
		h.ack(preempt.id, commonpb.AckStage_FULFILLED, 0, "yielded")
	})
	step(7*time.Second, func() {
		urgentRun = onlyControl(t, h.controls(), protocol.ControlRun, "urgent")
		require.Equal(t, []string{"low", "same"}, h.tasks().Queue, "the suspended task keeps its place ahead of the later one")
		h.ack(urgentRun.id, commonpb.AckStage_RECEIVED, 0, "")
		h.ack(urgentRun.id, commonpb.AckStage_FULFILLED, 0, "done urgently")
	})
	step(8*time.Second, func() {
		resume := onlyControl(t, h.controls(), protocol.ControlRun, "low")
		require.True(t, resume.c.Resume, "the suspended task is resumed")
		h.ack(resume.id, commonpb.AckStage_RECEIVED, 0, "")
		h.ack(resume.id, commonpb.AckStage_FULFILLED, 0, "low done")
	})
	step(9*time.Second, func() {
		same := onlyControl(t, h.controls(), protocol.ControlRun, "same")
		h.ack(same.id, commonpb.AckStage_RECEIVED, 0, "")
		h.ack(same.id, commonpb.AckStage_FULFILLED, 0, "")
	})
	step(10*time.Second, func() {
		require.Equal(t, "RUNNABLE", status(t, h.env).State)
		h.env.SignalWorkflow(workflows.AgentDeregisterSignal, workflows.AgentDeregistration{Reason: "done"})
	})
	h.env.ExecuteWorkflow(workflows.AgentLifecycle, workflows.AgentLifecycleInput{AgentID: "subject", Name: "subject", HeartbeatInterval: time.Hour})
	require.NoError(t, h.env.GetWorkflowError())
	h.requireStates("low", "SCHEDULED", "RUNNING", "SUSPENDED", "RESUMED", "RUNNING", "COMPLETED")
	h.requireStates("urgent", "SCHEDULED", "RUNNING", "COMPLETED")
	h.requireStates("same", "SCHEDULED", "RUNNING", "COMPLETED")
}

// App. D C.5: the agent is inside a declared non-preemptible section; preemption is deferred
// until the section's max_duration, then TERMINATE{grace_ms}, then KILL; the task fails with
// forced_preemption and the urgent task runs.
func TestDispatchForcedPreemptionAfterNonPreemptibleTimeout(t *testing.T) {
	h := newSchedulerHarness(t)
	var run sentControl
	step := func(at time.Duration, f func()) { h.env.RegisterDelayedCallback(f, at) }
	step(time.Second, func() { h.env.SignalWorkflow(workflows.AgentReadySignal, workflows.AgentReady{Via: "stream"}) })
	step(2*time.Second, func() { h.enqueue("long", 0, 1) })
	step(3*time.Second, func() {
		run = onlyControl(t, h.controls(), protocol.ControlRun, "long")
		h.ack(run.id, commonpb.AckStage_RECEIVED, 0, "")
		h.env.SignalWorkflow(workflows.AgentControlSignal, workflows.AgentControl{Type: protocol.ControlNonPreemptibleBegin, TaskID: "long", MaxDuration: 30 * time.Second})
	})
	step(4*time.Second, func() { h.enqueue("urgent", -19, 2) })
	step(5*time.Second, func() {
		onlyControl(t, h.controls(), protocol.ControlPreemptRequest, "long")
		require.True(t, h.tasks().NonPreemptible)
	})
	step(32*time.Second, func() {
		require.Empty(t, h.controls(), "deferred while the section lasts (until 33 s)")
	})
	step(34*time.Second, func() {
		term := onlyControl(t, h.controls(), protocol.ControlTerminate, "long")
		require.Equal(t, int64(3000), term.c.GraceMS, "C.5: TERMINATE{grace_ms:3000}")
	})
	step(38*time.Second, func() {
		cs := h.controls()
		require.Len(t, cs, 2, "KILL, then the urgent task's RUN")
		require.Equal(t, protocol.ControlKill, cs[0].c.Type)
		require.Equal(t, protocol.ControlRun, cs[1].c.Type)
		require.Equal(t, "urgent", cs[1].c.TaskID)
		h.env.SignalWorkflow(workflows.AgentDeregisterSignal, workflows.AgentDeregistration{Reason: "done"})
	})
	h.env.ExecuteWorkflow(workflows.AgentLifecycle, workflows.AgentLifecycleInput{AgentID: "subject", Name: "subject", HeartbeatInterval: time.Hour})
	require.NoError(t, h.env.GetWorkflowError())
	h.requireStates("long", "SCHEDULED", "RUNNING", "FAILED")
	h.requireCode("long", commonpb.ErrorCode_FORCED_PREEMPTION)
	h.requireCode("urgent", commonpb.ErrorCode_AGENT_SHUTDOWN, "deregistration fails what the agent still holds")
}

// A TERMINATE acknowledged within its grace ends the task FAILED forced_preemption without
// KILL; without a section, the preemption deadline (PreemptTimeout) starts forced preemption.
func TestDispatchTerminateAcknowledged(t *testing.T) {
	h := newSchedulerHarness(t)
	step := func(at time.Duration, f func()) { h.env.RegisterDelayedCallback(f, at) }
	step(time.Second, func() { h.env.SignalWorkflow(workflows.AgentReadySignal, workflows.AgentReady{Via: "stream"}) })
	step(2*time.Second, func() { h.enqueue("stubborn", 3, 1) })
	step(3*time.Second, func() {
		run := onlyControl(t, h.controls(), protocol.ControlRun, "stubborn")
		h.ack(run.id, commonpb.AckStage_RECEIVED, 0, "")
		h.env.SignalWorkflow(workflows.AgentPreemptSignal, workflows.PreemptionRequest{Reason: "maintenance"})
	})
	step(4*time.Second, func() {
		p := onlyControl(t, h.controls(), protocol.ControlPreemptRequest, "stubborn")
		require.Equal(t, "maintenance", p.c.Reason)
	})
	step(64*time.Second, func() {
		term := onlyControl(t, h.controls(), protocol.ControlTerminate, "stubborn")
		h.ack(term.id, commonpb.AckStage_FULFILLED, 0, "terminated")
	})
	step(70*time.Second, func() {
		require.Empty(t, h.controls(), "no KILL after an acknowledged TERMINATE")
		require.Equal(t, "RUNNABLE", status(t, h.env).State, "a task's failure is not the agent's")
		h.env.SignalWorkflow(workflows.AgentDeregisterSignal, workflows.AgentDeregistration{Reason: "done"})
	})
	h.env.ExecuteWorkflow(workflows.AgentLifecycle, workflows.AgentLifecycleInput{AgentID: "subject", Name: "subject",
		HeartbeatInterval: time.Hour, PreemptTimeout: time.Minute})
	require.NoError(t, h.env.GetWorkflowError())
	h.requireStates("stubborn", "SCHEDULED", "RUNNING", "FAILED")
	h.requireCode("stubborn", commonpb.ErrorCode_FORCED_PREEMPTION)
}

// A long-lived agent continues as new carrying its running
// task, its queue and the pending preemption into the next run.
func TestDispatchContinueAsNewCarriesTasks(t *testing.T) {
	h := newSchedulerHarness(t)
	step := func(at time.Duration, f func()) { h.env.RegisterDelayedCallback(f, at) }
	step(time.Second, func() { h.env.SignalWorkflow(workflows.AgentReadySignal, workflows.AgentReady{Via: "stream"}) })
	step(2*time.Second, func() { h.enqueue("low", 5, 1) })
	step(3*time.Second, func() {
		run := onlyControl(t, h.controls(), protocol.ControlRun, "low")
		h.ack(run.id, commonpb.AckStage_RECEIVED, 0, "")
		h.enqueue("later", 5, 2)
	})
	step(4*time.Second, func() {
		h.env.SetContinueAsNewSuggested(true)
		h.enqueue("urgent", -10, 3)
	})
	h.env.ExecuteWorkflow(workflows.AgentLifecycle, workflows.AgentLifecycleInput{AgentID: "subject", Name: "subject", HeartbeatInterval: time.Hour})
	err := h.env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, err, &can)
	var next workflows.AgentLifecycleInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	require.Equal(t, commonpb.AgentState_RUNNING, next.State)
	require.NotNil(t, next.Dispatch.Running)
	require.Equal(t, "low", next.Dispatch.Running.TaskID)
	require.NotEmpty(t, next.Dispatch.Running.PreemptMsgID, "the urgent task's PREEMPT_REQUEST went out before the run ended")
	var queued []string
	for _, q := range next.Dispatch.Queue {
		queued = append(queued, q.TaskID)
	}
	require.Equal(t, []string{"urgent", "later"}, queued)
	pre := onlyControl(t, h.controls(), protocol.ControlPreemptRequest, "low")
	h.requireStates("low", "SCHEDULED", "RUNNING")
	// CONTROL message_ids follow from the run and the send count, so a workflow task retried
	// after its local activities ran sends the same ids and the router drops the repeats.
	runID := h.runID()
	require.Equal(t, next.Dispatch.Running.RunMsgID, workflows.ControlMessageID(runID, 1))
	require.Equal(t, pre.id, workflows.ControlMessageID(runID, 2))
}

// TestDispatchBatchesEventsAndAcks: for a task whose workflow takes its events in batches,
// the RUN's SCHEDULED is held until the task's next event; a RECEIVED and FULFILLED that
// arrive together in one AgentControlAcksSignal are one step, which tells the task SCHEDULED,
// RUNNING and COMPLETED in one signal and leaves the agent RUNNABLE; the registry projection
// has each step's last state.
func TestDispatchBatchesEventsAndAcks(t *testing.T) {
	h := newSchedulerHarness(t)
	step := func(at time.Duration, f func()) { h.env.RegisterDelayedCallback(f, at) }
	step(time.Second, func() { h.env.SignalWorkflow(workflows.AgentReadySignal, workflows.AgentReady{Via: "stream"}) })
	step(2*time.Second, func() {
		h.env.SignalWorkflow(workflows.AgentTaskEnqueueSignal, workflows.QueuedTask{TaskID: "fast", SubmittedAt: time.Unix(0, 0), EventBatches: true})
		h.env.SignalWorkflow(workflows.AgentTaskEnqueueSignal, workflows.QueuedTask{TaskID: "slow", SubmittedAt: time.Unix(1, 0), EventBatches: true})
	})
	step(3*time.Second, func() {
		run := onlyControl(t, h.controls(), protocol.ControlRun, "fast")
		require.Empty(t, h.signalsOf("fast"), "SCHEDULED waits for the task's next event")
		h.env.SignalWorkflow(workflows.AgentControlAcksSignal, workflows.ControlAcks{Acks: []workflows.ControlAck{
			{MessageID: run.id, Stage: commonpb.AckStage_RECEIVED}, {MessageID: run.id, Stage: commonpb.AckStage_FULFILLED, Note: "ok"}}})
	})
	step(4*time.Second, func() {
		require.Equal(t, [][]string{{"SCHEDULED", "RUNNING", "COMPLETED"}}, h.signalsOf("fast"), "one step, one signal")
		run := onlyControl(t, h.controls(), protocol.ControlRun, "slow")
		h.ack(run.id, commonpb.AckStage_RECEIVED, 0, "")
	})
	step(5*time.Second, func() {
		require.Equal(t, [][]string{{"SCHEDULED", "RUNNING"}}, h.signalsOf("slow"))
		require.Equal(t, "RUNNING", status(t, h.env).State)
		rec, err := h.st.Registry().GetAgent(context.Background(), "subject")
		require.NoError(t, err)
		require.Equal(t, commonpb.AgentState_RUNNING, rec.State, "the registry projection has the step's last state")
		h.env.SignalWorkflow(workflows.AgentDeregisterSignal, workflows.AgentDeregistration{Reason: "done"})
	})
	h.env.ExecuteWorkflow(workflows.AgentLifecycle, workflows.AgentLifecycleInput{AgentID: "subject", Name: "subject"})
	require.True(t, h.env.IsWorkflowCompleted())
	require.NoError(t, h.env.GetWorkflowError())
	h.requireStates("fast", "SCHEDULED", "RUNNING", "COMPLETED")
	h.requireStates("slow", "SCHEDULED", "RUNNING", "FAILED")
	require.Equal(t, [][]string{{"SCHEDULED", "RUNNING"}, {"FAILED"}}, h.signalsOf("slow"))
}

// SubmitTask queues a task by AgentTaskEnqueueUpdate: an urgent task arriving by update
// preempts the running one as the signal does (§7.1), the same task sent again by update or
// by signal is queued once, and a task without a task_id is refused by the validator.
func TestDispatchEnqueueUpdate(t *testing.T) {
	h := newSchedulerHarness(t)
	step := func(at time.Duration, f func()) { h.env.RegisterDelayedCallback(f, at) }
	update := func(q workflows.QueuedTask, wantErr string) {
		h.env.UpdateWorkflow(workflows.AgentTaskEnqueueUpdate, uuid.NewString(), &testsuite.TestUpdateCallback{
			OnReject: func(err error) {
				if wantErr == "" {
					t.Errorf("update of %q refused: %v", q.TaskID, err)
				} else {
					require.ErrorContains(t, err, wantErr)
				}
			},
			OnAccept: func() {
				if wantErr != "" {
					t.Errorf("update of %q accepted, want refused: %s", q.TaskID, wantErr)
				}
			},
			OnComplete: func(_ interface{}, err error) { require.NoError(t, err) },
		}, q)
	}
	step(time.Second, func() { h.env.SignalWorkflow(workflows.AgentReadySignal, workflows.AgentReady{Via: "stream"}) })
	step(2*time.Second, func() { update(workflows.QueuedTask{TaskID: "low", Priority: 5, SubmittedAt: time.Unix(1, 0)}, "") })
	step(3*time.Second, func() {
		run := onlyControl(t, h.controls(), protocol.ControlRun, "low")
		h.ack(run.id, commonpb.AckStage_RECEIVED, 0, "")
	})
	step(4*time.Second, func() {
		update(workflows.QueuedTask{Priority: -10}, "needs its task_id")
		update(workflows.QueuedTask{TaskID: "urgent", Priority: -10, SubmittedAt: time.Unix(2, 0)}, "")
		update(workflows.QueuedTask{TaskID: "urgent", Priority: -10, SubmittedAt: time.Unix(2, 0)}, "")
		h.enqueue("urgent", -10, 2)
	})
	step(5*time.Second, func() {
		preempt := onlyControl(t, h.controls(), protocol.ControlPreemptRequest, "low")
		require.Equal(t, []string{"urgent"}, h.tasks().Queue, "the urgent task is queued once")
		h.ack(preempt.id, commonpb.AckStage_FULFILLED, 0, "yielded")
	})
	step(6*time.Second, func() {
		urgent := onlyControl(t, h.controls(), protocol.ControlRun, "urgent")
		h.ack(urgent.id, commonpb.AckStage_FULFILLED, 0, "done")
	})
	step(7*time.Second, func() {
		resume := onlyControl(t, h.controls(), protocol.ControlRun, "low")
		require.True(t, resume.c.Resume)
		h.ack(resume.id, commonpb.AckStage_FULFILLED, 0, "done")
	})
	step(8*time.Second, func() {
		require.Empty(t, h.tasks().Queue)
		h.env.SignalWorkflow(workflows.AgentDeregisterSignal, workflows.AgentDeregistration{Reason: "done"})
	})
	h.env.ExecuteWorkflow(workflows.AgentLifecycle, workflows.AgentLifecycleInput{AgentID: "subject", Name: "subject", HeartbeatInterval: time.Hour})
	require.NoError(t, h.env.GetWorkflowError())
	h.requireStates("urgent", "SCHEDULED", "RUNNING", "COMPLETED")
}
