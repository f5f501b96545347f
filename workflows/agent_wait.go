package workflows

import (
	"slices"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
)

// An agent waiting on a response (004 draft §1, §2, §6). The router tells the agent's
// lifecycle, through the outbox, when the agent sends a request that requires a response and
// when that wait ends; the lifecycle moves the agent RUNNING → WAITING and back, keeping the
// task assigned (§8.1 WAITING), and records what the task waits on in its activity entry.

// AgentResponseWaitSignal carries a ResponseWait.
const AgentResponseWaitSignal = "agent-response-wait"

// versionResponseWaits marks runs that apply ResponseWait signals.
const versionResponseWaits = "agent-response-waits"

// maxEndedWaits bounds Dispatch.EndedWaits.
const maxEndedWaits = 64

// How a wait ended (ResponseWait.Outcome).
const (
	// ResponseAnswered: the response arrived; the request is FULFILLED.
	ResponseAnswered = "answered"
	// ResponseFailed: the request failed (no response after its attempts, or its recipient
	// refused it); its producer got the NACK.
	ResponseFailed = "failed"
)

// ResponseWait is the payload of AgentResponseWaitSignal.
type ResponseWait struct {
	// Key names the wait from beginning to end: the request's idempotency token, which every
	// attempt of the request shares (§11.2; the router gives a request without one a token).
	Key string
	// RequestID is the request's first message_id: what the agent waits on (the activity
	// entry's waiting_on, 004 §6); set when the wait begins.
	RequestID string `json:",omitempty"`
	// Waiting is true when the wait begins, false when it ends.
	Waiting bool
	// Bound is the longest the wait may last (every attempt's response timeout and some
	// slack; 004 §2: WAITING MUST be bounded), set when it begins. The lifecycle ends a wait
	// whose end it never hears of when its bound passes.
	Bound time.Duration `json:",omitempty"`
	// Outcome is ResponseAnswered or ResponseFailed when the wait ends.
	Outcome string `json:",omitempty"`
	// Reason explains the outcome.
	Reason string `json:",omitempty"`
}

// TaskWait is one response the running task waits on.
type TaskWait struct {
	// Key is the request's idempotency token (ResponseWait.Key).
	Key string
	// RequestID is the request's first message_id.
	RequestID string
	// Until is when the wait's bound passes.
	Until time.Time
}

// onResponseWait applies AgentResponseWaitSignal.
func (w *agentLifecycle) onResponseWait(ctx workflow.Context, c workflow.ReceiveChannel) {
	var rw ResponseWait
	c.Receive(ctx, &rw)
	if workflow.GetVersion(ctx, versionResponseWaits, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	if rw.Waiting {
		w.stepErr = w.disp.beginWait(ctx, rw)
		return
	}
	why := "the response arrived (" + rw.Reason + ")"
	if rw.Outcome != ResponseAnswered {
		// 004 §2: without HITL the fallback on a failed request is documented and logged:
		// the router retried it, it FAILED, its producer got the NACK, and the task goes on.
		why = "the request failed (" + rw.Reason + "); the task continues with the NACK (004 §2 fallback)"
	}
	w.stepErr = w.disp.endWait(ctx, rw.Key, why)
}

// beginWait records that the running task waits on a response and moves a RUNNING agent to
// WAITING (004 §2). An agent that runs no task has no execution to suspend and stays where
// it is; a task the agent has not started yet (SCHEDULED, RESUMED) waits from RUNNING on.
func (p *dispatcher) beginWait(ctx workflow.Context, rw ResponseWait) error {
	r := p.d.Running
	switch {
	case slices.Contains(p.d.EndedWaits, rw.Key):
		return nil // the end overtook the beginning on the way, or a repeated delivery
	case r == nil:
		workflow.GetLogger(ctx).Info("request of an agent that runs no task: no WAITING", "agent_id", p.w.in.AgentID, "request", rw.RequestID)
		return nil
	case slices.ContainsFunc(r.Waits, func(tw TaskWait) bool { return tw.Key == rw.Key }):
		return nil // a repeated delivery (the outbox delivers at least once)
	}
	before := waitingOn(r)
	r.Waits = append(r.Waits, TaskWait{Key: rw.Key, RequestID: rw.RequestID, Until: workflow.Now(ctx).Add(rw.Bound)})
	if err := p.syncWaiting(ctx, "waiting on the response to request "+rw.RequestID+" (004 §2)"); err != nil {
		return err
	}
	p.recordWaitingOn(ctx, r, before)
	return nil
}

// endWait ends the running task's wait named key; the agent returns to RUNNING once it waits
// on nothing more.
func (p *dispatcher) endWait(ctx workflow.Context, key, why string) error {
	if !slices.Contains(p.d.EndedWaits, key) {
		p.d.EndedWaits = append(p.d.EndedWaits, key)
		if len(p.d.EndedWaits) > maxEndedWaits {
			p.d.EndedWaits = slices.Delete(p.d.EndedWaits, 0, len(p.d.EndedWaits)-maxEndedWaits)
		}
	}
	r := p.d.Running
	if r == nil {
		return nil
	}
	i := slices.IndexFunc(r.Waits, func(tw TaskWait) bool { return tw.Key == key })
	if i < 0 {
		return nil
	}
	before, requestID := waitingOn(r), r.Waits[i].RequestID
	r.Waits = slices.Delete(r.Waits, i, i+1)
	if err := p.syncWaiting(ctx, "request "+requestID+": "+why); err != nil {
		return err
	}
	p.recordWaitingOn(ctx, r, before)
	return nil
}

// syncWaiting moves the agent to WAITING when it is RUNNING a task that waits on a response,
// and back to RUNNING when that task waits on nothing more.
func (p *dispatcher) syncWaiting(ctx workflow.Context, why string) error {
	r := p.d.Running
	switch {
	case r == nil:
		return nil
	case len(r.Waits) > 0 && p.w.state == commonpb.AgentState_RUNNING:
		return p.w.transition(ctx, commonpb.AgentState_WAITING, why)
	case len(r.Waits) == 0 && p.w.state == commonpb.AgentState_WAITING:
		return p.w.transition(ctx, commonpb.AgentState_RUNNING, why)
	}
	return nil
}

// waitingOn is what the task's activity entry says it waits on: its latest wait.
func waitingOn(r *RunningTask) string {
	if len(r.Waits) == 0 {
		return ""
	}
	return r.Waits[len(r.Waits)-1].RequestID
}

// recordWaitingOn writes waiting_on to the task's activity entry when it changed from
// before (004 §6). The buffer is advisory (§10): a failure is logged, never the task's.
func (p *dispatcher) recordWaitingOn(ctx workflow.Context, r *RunningTask, before string) {
	now := waitingOn(r)
	if now == before {
		return
	}
	p.writeWaitingOn(ctx, r.TaskID, now)
}

func (p *dispatcher) writeWaitingOn(ctx workflow.Context, taskID, waitingOn string) {
	var acts *activities.Activities
	if err := workflow.ExecuteLocalActivity(p.la, acts.RecordWaitingOn, activities.WaitingOnInput{
		AgentID: p.w.in.AgentID, TaskID: taskID, WaitingOn: waitingOn,
	}).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("could not record waiting_on in the activity entry", "agent_id", p.w.in.AgentID, "task_id", taskID, "error", err)
	}
}

// leaveWaits drops the waits of a task that stops running (it ended or yielded): a response
// that arrives later is the agent's to handle, and its entry no longer waits.
func (p *dispatcher) leaveWaits(ctx workflow.Context, r *RunningTask) {
	if len(r.Waits) == 0 {
		return
	}
	r.Waits = nil
	p.stopWaitTimer()
	p.writeWaitingOn(ctx, r.TaskID, "")
}

// waitDeadline is when the earliest wait's bound passes, zero without waits.
func (p *dispatcher) waitDeadline() time.Time {
	var at time.Time
	if r := p.d.Running; r != nil {
		for _, tw := range r.Waits {
			if at.IsZero() || tw.Until.Before(at) {
				at = tw.Until
			}
		}
	}
	return at
}

// armWaitTimer keeps the wait timer on waitDeadline().
func (p *dispatcher) armWaitTimer(ctx workflow.Context) { p.waitTimer.arm(ctx, p.waitDeadline()) }

func (p *dispatcher) stopWaitTimer() { p.waitTimer.stop() }

// onWaitTimer ends the waits whose bound passed without news of their end (a lost handoff,
// a store that failed between the request's end and its report): WAITING is bounded (004 §2).
func (p *dispatcher) onWaitTimer(ctx workflow.Context) error {
	p.waitTimer.fired()
	r := p.d.Running
	if r == nil {
		return nil
	}
	now := workflow.Now(ctx)
	var due []TaskWait
	for _, tw := range r.Waits {
		if !tw.Until.After(now) {
			due = append(due, tw)
		}
	}
	for _, tw := range due {
		workflow.GetLogger(ctx).Warn("response wait passed its bound; the task continues", "agent_id", p.w.in.AgentID, "task_id", r.TaskID, "request", tw.RequestID)
		if err := p.endWait(ctx, tw.Key, "no end of the wait within its bound; the task continues (004 §2)"); err != nil {
			return err
		}
	}
	return nil
}
