package activities

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"go.temporal.io/sdk/temporal"

	"github.com/sw4rm/sw4rm-temporal/observe"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/inference"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// SchedulerPolicy configures task admission (§9): concurrency limits per agent type, the
// conflict threshold and the inference engine.
type SchedulerPolicy struct {
	// MaxParallel maps an agent type (the descriptor's name) to its max_parallel_instances
	// (§9.1); the key "*" applies to types not listed. Zero or absent means no limit.
	MaxParallel map[string]int
	// ConflictThreshold is the confidence below which a scope conflict goes to HITL (§9.3);
	// zero means inference.DefaultThreshold.
	ConflictThreshold float64
	// Engine assesses scope conflicts; nil means the default rule engine.
	Engine inference.Engine
	// Unavailable is what to do when the engine fails (§9.3); empty means serialize.
	Unavailable inference.UnavailablePolicy
	// ActivityLimits are the activity buffer's limits (§10.1).
	ActivityLimits store.ActivityLimits
}

// Admission verdicts of AdmitTask.
const (
	// AdmitOK: the task's activity entry was created; it may be queued at its agent.
	AdmitOK = "admit"
	// AdmitReject: the task cannot run (unknown or shutting-down agent, full activity buffer).
	AdmitReject = "reject"
	// AdmitDuplicate: an identical job is active (§9.2); only HITL may authorize it.
	AdmitDuplicate = "duplicate"
	// AdmitConflict: the inference engine's confidence is below the threshold (§9.3).
	AdmitConflict = "conflict"
	// AdmitSerialize: the engine is unavailable and policy serializes; wait and retry (§9.2).
	AdmitSerialize = "serialize"
	// AdmitConcurrency: the agent type's max_parallel_instances is reached; wait (§9.1).
	AdmitConcurrency = "concurrency"
)

// AdmitTaskInput asks AdmitTask to admit a task.
type AdmitTaskInput struct {
	// TaskID and AgentID name the task and its agent.
	TaskID, AgentID string
	// Scope is the task's scope metadata (§9.2).
	Scope string
	// JobKey is the task's job identity (see JobKey).
	JobKey string
	// AuthorizedDuplicate is set once HITL authorized running an identical job.
	AuthorizedDuplicate bool
	// AuthorizedConflicts lists the tasks HITL approved running in parallel with.
	AuthorizedConflicts []string
	// Description is the activity entry's description.
	Description string
}

// AdmitTaskResult is AdmitTask's verdict.
type AdmitTaskResult struct {
	// Verdict is one of the Admit* constants.
	Verdict string
	// Reason explains it, prefixed by an error_code where one applies.
	Reason string
	// Code is the error_code of a rejection.
	Code commonpb.ErrorCode `json:",omitempty"`
	// OtherTaskID and OtherAgentID name the duplicate or conflicting task.
	OtherTaskID, OtherAgentID string `json:",omitempty"`
	// Confidence is the engine's confidence for a conflict.
	Confidence float64 `json:",omitempty"`
	// Overlaps says what the scopes share.
	Overlaps []string `json:",omitempty"`
	// AgentType is the agent's type (descriptor name).
	AgentType string `json:",omitempty"`
	// BufferWarning is set when the activity buffer passed 80 % of a limit (§10.1).
	BufferWarning bool `json:",omitempty"`
}

// JobKey is a task's job identity (§9.2 "implementations MUST define job identity
// criteria"): the agent type with a digest of the parameters, their content type and the
// scope. Two tasks with the same key do the same work, whatever their task_ids.
func JobKey(agentType string, params []byte, contentType, scope string) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(agentType), []byte(contentType), []byte(scope), params} {
		h.Write([]byte(strconv.Itoa(len(part)) + ":")) // length-prefixed, so the parts cannot run into each other
		h.Write(part)
	}
	return agentType + ":" + hex.EncodeToString(h.Sum(nil))[:32]
}

// AgentTypeOf returns the agent's type (its descriptor name; §9.1 counts instances per type),
// or a non-retryable error when the agent is not registered.
func (a *Activities) AgentTypeOf(ctx context.Context, agentID string) (string, error) {
	rec, err := a.Store.Registry().GetAgent(ctx, agentID)
	if errors.Is(err, store.ErrNotFound) {
		return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("agent %q is not registered", agentID), "no_route", err)
	}
	if err != nil {
		return "", err
	}
	return cmp.Or(rec.Descriptor.GetName(), agentID), nil
}

// AdmitTask decides whether a task may be queued at its agent (§9) and, if so, creates its
// activity entry before it executes (§10). The checks, in order: the agent is registered and
// accepts tasks; no identical job is active (§9.2 job uniqueness); the agent type's
// max_parallel_instances is not exceeded (§9.1: an agent already holding tasks is one running
// instance, so its own queue never counts twice); the scopes of concurrent tasks on other
// agents do not conflict (§9.2–§9.3, through the inference engine and inference.Decide).
// Every verdict is audited (§19). The reads and the Put are not one transaction, so two
// tasks admitted in the same instant may both pass; the window is one round trip.
func (a *Activities) AdmitTask(ctx context.Context, in AdmitTaskInput) (AdmitTaskResult, error) {
	p, err := a.PrepareAdmission(ctx, in, nil)
	if err != nil {
		return AdmitTaskResult{}, err
	}
	return p.Commit(ctx)
}

// PreparedAdmission is AdmitTask's verdict before the admitted task's activity entry exists:
// the checks have run (they only read), and Commit creates the entry. SubmitTask prepares
// while the task's workflow starts and commits once it has, so a refused start (a task_id
// used before) writes nothing.
type PreparedAdmission struct {
	a     *Activities
	in    AdmitTaskInput
	res   AdmitTaskResult
	ab    store.ActivityBuffer
	entry *store.ActivityEntry // nil unless the checks admitted the task
}

// PrepareAdmission runs AdmitTask's checks. When jobKey is not nil it computes the task's job
// identity from the agent's type, which the checks look up anyway (in.JobKey is then
// ignored).
func (a *Activities) PrepareAdmission(ctx context.Context, in AdmitTaskInput, jobKey func(agentType string) string) (*PreparedAdmission, error) {
	p := &PreparedAdmission{a: a, in: in}
	if err := p.check(ctx, jobKey); err != nil {
		return nil, err
	}
	return p, nil
}

// Commit creates the admitted task's activity entry (a full buffer turns the admission into
// a rejection, §10.1), audits the verdict (§19) and returns it.
func (p *PreparedAdmission) Commit(ctx context.Context) (AdmitTaskResult, error) {
	a, in := p.a, p.in
	if p.entry != nil {
		usage, err := p.ab.Put(ctx, *p.entry, a.Scheduler.ActivityLimits)
		var full *store.ActivityFullError
		switch {
		case errors.As(err, &full):
			p.res = AdmitTaskResult{Verdict: AdmitReject, Code: commonpb.ErrorCode_OVERLOADED, AgentType: p.res.AgentType,
				Reason: fmt.Sprintf("activity_buffer_full: %v (§10.1)", err)}
		case err != nil:
			return AdmitTaskResult{}, fmt.Errorf("create activity entry: %w", err)
		case usage.Warn():
			p.res.BufferWarning = true
			a.Sink.Record(ctx, observe.Event{Actor: protocol.SchedulerID, Type: "activity.buffer_high", AgentID: in.AgentID, Level: slog.LevelWarn,
				Details: map[string]any{"active": usage.Active, "agent_active": usage.AgentActive, "max_active": usage.Limits.MaxActive, "max_per_agent": usage.Limits.MaxPerAgent}})
		}
		p.entry = nil
	}
	res := p.res
	level := slog.LevelInfo
	if res.Verdict != AdmitOK {
		level = slog.LevelWarn
	}
	a.Sink.Record(ctx, observe.Event{CorrelationID: protocol.TaskCorrelationID(in.TaskID), Actor: protocol.SchedulerID, Type: "task.admission",
		AgentID: in.AgentID, Level: level, Details: map[string]any{"task_id": in.TaskID, "verdict": res.Verdict, "reason": res.Reason,
			"other_task_id": res.OtherTaskID, "confidence": res.Confidence}})
	return res, nil
}

// check decides the verdict; for an admitted task it leaves the entry to create.
func (p *PreparedAdmission) check(ctx context.Context, jobKey func(string) string) error {
	a := p.a
	reg := a.Store.Registry()
	rec, err := reg.GetAgent(ctx, p.in.AgentID)
	if errors.Is(err, store.ErrNotFound) {
		p.res = AdmitTaskResult{Verdict: AdmitReject, Code: commonpb.ErrorCode_NO_ROUTE, Reason: fmt.Sprintf("no_route: agent %q is not registered", p.in.AgentID)}
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up %s: %w", p.in.AgentID, err)
	}
	agentType := cmp.Or(rec.Descriptor.GetName(), p.in.AgentID)
	if jobKey != nil {
		p.in.JobKey = jobKey(agentType)
	}
	in := p.in
	if rec.State == commonpb.AgentState_SHUTTING_DOWN {
		// §8.1: the Scheduler MUST NOT dispatch new tasks to an agent that is shutting down.
		p.res = AdmitTaskResult{Verdict: AdmitReject, Code: commonpb.ErrorCode_AGENT_SHUTDOWN, AgentType: agentType,
			Reason: fmt.Sprintf("agent_shutdown: agent %q is shutting down and accepts no tasks (§8.1)", in.AgentID)}
		return nil
	}
	ab, ok := store.ActivityBufferOf(a.Store)
	if !ok {
		return temporal.NewNonRetryableApplicationError("the store has no activity buffer (§10)", "internal_error", nil)
	}
	p.ab = ab
	lim := a.Scheduler.ActivityLimits.Effective()
	active, err := ab.List(ctx, store.ActivityFilter{Limit: max(lim.MaxActive, store.DefaultActivityListLimit)})
	if err != nil {
		return fmt.Errorf("list active tasks: %w", err)
	}
	others := slices.DeleteFunc(active, func(e store.ActivityEntry) bool { return e.AgentID == in.AgentID && e.TaskID == in.TaskID })

	if !in.AuthorizedDuplicate {
		for _, e := range others {
			if e.JobKey != "" && e.JobKey == in.JobKey {
				p.res = AdmitTaskResult{Verdict: AdmitDuplicate, Code: commonpb.ErrorCode_DUPLICATE_DETECTED, AgentType: agentType,
					OtherTaskID: e.TaskID, OtherAgentID: e.AgentID,
					Reason: fmt.Sprintf("duplicate_detected: task %s on agent %s is the identical job (same agent type, parameters and scope, §9.2)", e.TaskID, e.AgentID)}
				return nil
			}
		}
	}

	if limit := a.maxParallel(agentType); limit > 0 && !slices.ContainsFunc(others, func(e store.ActivityEntry) bool { return e.AgentID == in.AgentID }) {
		busy := map[string]bool{}
		for _, e := range others {
			if e.AgentID == in.AgentID || busy[e.AgentID] {
				continue
			}
			if other, err := reg.GetAgent(ctx, e.AgentID); err == nil && cmp.Or(other.Descriptor.GetName(), other.Descriptor.GetAgentId()) == agentType {
				busy[e.AgentID] = true
			}
		}
		if len(busy) >= limit {
			p.res = AdmitTaskResult{Verdict: AdmitConcurrency, AgentType: agentType,
				Reason: fmt.Sprintf("queued: max_parallel_instances=%d of agent type %q reached (%d instances busy, §9.1)", limit, agentType, len(busy))}
			return nil
		}
	}

	if res, conflict := a.checkConflicts(in, agentType, others); conflict {
		p.res = res
		return nil
	}

	scope, _ := inference.ParseScope(in.Scope) // validated at submission; a parse failure only loses the location fields
	e := store.ActivityEntry{AgentID: in.AgentID, TaskID: in.TaskID, Description: in.Description, Scope: in.Scope, JobKey: in.JobKey}
	if len(scope.Repos) == 1 {
		e.RepoID = scope.Repos[0]
	}
	if len(scope.Worktrees) == 1 {
		e.WorktreeID = scope.Worktrees[0]
	}
	if len(scope.Branches) == 1 {
		e.Branch = scope.Branches[0]
	}
	p.entry = &e
	p.res = AdmitTaskResult{Verdict: AdmitOK, AgentType: agentType, Reason: "admitted"}
	return nil
}

// maxParallel returns the configured max_parallel_instances of a type, zero for none.
func (a *Activities) maxParallel(agentType string) int {
	if n, ok := a.Scheduler.MaxParallel[agentType]; ok {
		return n
	}
	return a.Scheduler.MaxParallel["*"]
}

// checkConflicts compares the task's scope with those of the active tasks of other agents
// (tasks of one agent never run at the same time) and reports the first that may not run in
// parallel, in the buffer's order.
func (a *Activities) checkConflicts(in AdmitTaskInput, agentType string, others []store.ActivityEntry) (AdmitTaskResult, bool) {
	mine, err := inference.ParseScope(in.Scope)
	if err != nil {
		mine = inference.Scope{}
	}
	engine := a.Scheduler.Engine
	if engine == nil {
		engine = &inference.RuleEngine{} // the default table, as ReasoningProxy serves it
	}
	for _, e := range others {
		if e.AgentID == in.AgentID || slices.Contains(in.AuthorizedConflicts, e.TaskID) || e.JobKey == "" {
			continue // not scheduler-created, same agent, or already approved by HITL
		}
		theirs, perr := inference.ParseScope(e.Scope)
		if perr != nil {
			theirs = inference.Scope{}
		}
		assessment, eerr := engine.CheckParallelism(mine, theirs)
		v := inference.Decide(assessment, a.Scheduler.ConflictThreshold, eerr, a.Scheduler.Unavailable)
		if v.Parallel {
			continue
		}
		res := AdmitTaskResult{OtherTaskID: e.TaskID, OtherAgentID: e.AgentID, Confidence: assessment.Confidence,
			Overlaps: assessment.Overlaps, AgentType: agentType}
		if v.Escalate {
			res.Verdict = AdmitConflict
			res.Reason = fmt.Sprintf("conflict with task %s on agent %s: %s", e.TaskID, e.AgentID, v.Reason)
		} else {
			res.Verdict = AdmitSerialize
			res.Reason = fmt.Sprintf("queued behind task %s on agent %s: %s", e.TaskID, e.AgentID, v.Reason)
		}
		return res, true
	}
	return AdmitTaskResult{}, false
}

// FinishTaskInput asks FinishTask to close a task's activity entry.
type FinishTaskInput struct {
	// AgentID and TaskID name the entry.
	AgentID, TaskID string
	// Failed selects the history status.
	Failed bool
}

// FinishTask moves the task's activity entry to the history (§10: removed on completion);
// an entry that is already gone (purged) is not an error.
func (a *Activities) FinishTask(ctx context.Context, in FinishTaskInput) error {
	ab, ok := store.ActivityBufferOf(a.Store)
	if !ok {
		return nil
	}
	status := store.ActivityCompleted
	if in.Failed {
		status = store.ActivityFailed
	}
	if _, err := ab.Complete(ctx, in.AgentID, in.TaskID, status); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("complete activity entry %s/%s: %w", in.AgentID, in.TaskID, err)
	}
	return nil
}

// SendControlInput asks SendControl to send one CONTROL message.
type SendControlInput struct {
	// AgentID is the recipient.
	AgentID string
	// MessageID is the message_id, chosen by the workflow so a retry sends the same message.
	MessageID string
	// Control is the payload.
	Control protocol.Control
}

// SendControl sends the scheduler's CONTROL message to an agent through the router (tracked,
// PRIVILEGED lane). An agent that is gone is a non-retryable no_route failure.
func (a *Activities) SendControl(ctx context.Context, in SendControlInput) error {
	env, err := protocol.NewControlEnvelope(in.MessageID, protocol.SchedulerID, in.Control)
	if err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), "validation_error", err)
	}
	if err := a.Router.SendControl(ctx, in.AgentID, env); err != nil {
		var perr *protocol.Error
		if errors.As(err, &perr) {
			return temporal.NewNonRetryableApplicationError(perr.Error(), strings.ToLower(protocol.CodeName(perr.Code)), err)
		}
		return err
	}
	a.Sink.Record(ctx, observe.Event{CorrelationID: env.GetCorrelationId(), Actor: protocol.SchedulerID, Type: "scheduler.control_sent",
		AgentID: in.AgentID, MessageID: in.MessageID, Details: map[string]any{"type": in.Control.Type, "task_id": in.Control.TaskID,
			"priority": in.Control.Priority, "resume": in.Control.Resume, "grace_ms": in.Control.GraceMS, "reason": in.Control.Reason}})
	return nil
}

// TaskEnded reports whether a task no longer has an active activity entry, i.e. it
// completed, failed or was purged.
func (a *Activities) TaskEnded(ctx context.Context, taskID string) (bool, error) {
	ab, ok := store.ActivityBufferOf(a.Store)
	if !ok {
		return true, nil
	}
	es, err := ab.List(ctx, store.ActivityFilter{TaskID: taskID, Limit: 1})
	if err != nil {
		return false, fmt.Errorf("look up task %s: %w", taskID, err)
	}
	return len(es) == 0, nil
}
