// Package taskadmission decides whether a task may be queued at its agent (§9): job uniqueness,
// max_parallel_instances, scope conflicts through the inference engine, and the activity
// entry created before the task executes (§10). SubmitTask's fast path in the frontend and
// the task workflow's AdmitTask activity both call it, so there is one task admission (the router's admission of messages is another thing), and the
// frontend does not depend on the activities package.
package taskadmission

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

	"golang.org/x/sync/errgroup"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/inference"
	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// Admitter admits tasks against the registry and the activity buffer of Store, under Policy,
// recording every verdict through Sink (§19).
type Admitter struct {
	Store  store.Store
	Sink   *audit.Sink
	Policy Policy
}

// Policy configures task admission (§9): concurrency limits per agent type, the
// conflict threshold and the inference engine.
type Policy struct {
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

// Admission verdicts (Result.Verdict).
const (
	// OK: the task's activity entry was created; it may be queued at its agent.
	OK = "admit"
	// Reject: the task cannot run (unknown or shutting-down agent).
	Reject = "reject"
	// Duplicate: an identical job is active (§9.2); only HITL may authorize it.
	Duplicate = "duplicate"
	// Conflict: the inference engine's confidence is below the threshold (§9.3).
	Conflict = "conflict"
	// Serialize: the engine is unavailable and policy serializes; wait and retry (§9.2).
	Serialize = "serialize"
	// Concurrency: the agent type's max_parallel_instances is reached; wait (§9.1).
	Concurrency = "concurrency"
)

// Input asks for a task's admission.
type Input struct {
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

// Result is an admission's verdict.
type Result struct {
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
	// NoActivityEntry is set when a full activity buffer refused the admitted task's entry
	// (§10.1 activity_buffer_full): the task runs all the same (§10).
	NoActivityEntry bool `json:",omitempty"`
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

// Admit decides whether a task may be queued at its agent (§9) and, if so, creates its
// activity entry before it executes (§10), located by Location: the agent's worktree binding
// when it is bound, else the task's scope. The checks, in order: the agent is registered and
// accepts tasks; no identical job is active (§9.2 job uniqueness); the agent type's
// max_parallel_instances is not exceeded (§9.1: an agent already holding tasks is one running
// instance, so its own queue never counts twice); the scopes of concurrent tasks on other
// agents do not conflict (§9.2–§9.3, through the inference engine and inference.Decide).
// Every verdict is audited (§19). The reads and the Put are not one transaction, so two
// tasks admitted in the same instant may both pass; the window is one round trip.
func (a *Admitter) Admit(ctx context.Context, in Input) (Result, error) {
	p, err := a.Prepare(ctx, in, nil)
	if err != nil {
		return Result{}, err
	}
	return p.Commit(ctx)
}

// Prepared is Admit's verdict before the admitted task's activity entry exists:
// the checks have run (they only read), and Commit creates the entry. SubmitTask prepares
// while the task's workflow starts and commits once it has, so a refused start (a task_id
// used before) writes nothing.
type Prepared struct {
	a     *Admitter
	in    Input
	res   Result
	ab    store.ActivityBuffer
	entry *store.ActivityEntry // nil unless the checks admitted the task
}

// Prepare runs Admit's checks. When jobKey is not nil it computes the task's job
// identity from the agent's type, which the checks look up anyway (in.JobKey is then
// ignored).
func (a *Admitter) Prepare(ctx context.Context, in Input, jobKey func(agentType string) string) (*Prepared, error) {
	p := &Prepared{a: a, in: in}
	if err := p.check(ctx, jobKey); err != nil {
		return nil, err
	}
	return p, nil
}

// Commit creates the admitted task's activity entry, audits the verdict (§19) and returns it.
//
// A full activity buffer does not refuse the task: the buffer is advisory and MUST NOT block
// task scheduling (§10). What it refuses is the entry — "reject new activity registrations
// with error_code=activity_buffer_full", never dropping another entry to make room (§10.1) —
// so the task is admitted without one, the refusal is audited as activity.buffer_full with
// that code and the verdict says so (NoActivityEntry). Without an entry the task is invisible
// to the job-uniqueness, max_parallel_instances and conflict checks of later tasks, which
// read the buffer.
func (p *Prepared) Commit(ctx context.Context) (Result, error) {
	a, in := p.a, p.in
	if p.entry != nil {
		usage, err := p.ab.Put(ctx, *p.entry, a.Policy.ActivityLimits)
		var full *store.ActivityFullError
		switch {
		case errors.As(err, &full):
			p.res.NoActivityEntry, p.res.BufferWarning = true, true
			p.res.Reason = fmt.Sprintf("admitted without an activity entry: activity_buffer_full: %v (§10.1); the buffer does not block scheduling (§10)", err)
			a.Sink.Record(ctx, audit.Event{CorrelationID: protocol.TaskCorrelationID(in.TaskID), Actor: protocol.SchedulerID, Type: "activity.buffer_full",
				AgentID: in.AgentID, Level: slog.LevelWarn, Details: map[string]any{"task_id": in.TaskID, "error_code": "activity_buffer_full",
					"per_agent": full.PerAgent, "limit": full.Limit, "reason": err.Error()}})
		case err != nil:
			return Result{}, fmt.Errorf("create activity entry: %w", err)
		case usage.Warn():
			p.res.BufferWarning = true
			a.Sink.Record(ctx, audit.Event{Actor: protocol.SchedulerID, Type: "activity.buffer_high", AgentID: in.AgentID, Level: slog.LevelWarn,
				Details: map[string]any{"active": usage.Active, "agent_active": usage.AgentActive, "max_active": usage.Limits.MaxActive, "max_per_agent": usage.Limits.MaxPerAgent}})
		}
		p.entry = nil
	}
	res := p.res
	level := slog.LevelInfo
	if res.Verdict != OK {
		level = slog.LevelWarn
	}
	a.Sink.Record(ctx, audit.Event{CorrelationID: protocol.TaskCorrelationID(in.TaskID), Actor: protocol.SchedulerID, Type: "task.admission",
		AgentID: in.AgentID, Level: level, Details: map[string]any{"task_id": in.TaskID, "verdict": res.Verdict, "reason": res.Reason,
			"other_task_id": res.OtherTaskID, "confidence": res.Confidence}})
	return res, nil
}

// check decides the verdict; for an admitted task it leaves the entry to create.
func (p *Prepared) check(ctx context.Context, jobKey func(string) string) error {
	a := p.a
	reg := a.Store.Registry()
	rec, err := reg.GetAgent(ctx, p.in.AgentID)
	if errors.Is(err, store.ErrNotFound) {
		p.res = Result{Verdict: Reject, Code: commonpb.ErrorCode_NO_ROUTE, Reason: fmt.Sprintf("no_route: agent %q is not registered", p.in.AgentID)}
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
		p.res = Result{Verdict: Reject, Code: commonpb.ErrorCode_AGENT_SHUTDOWN, AgentType: agentType,
			Reason: fmt.Sprintf("agent_shutdown: agent %q is shutting down and accepts no tasks (§8.1)", in.AgentID)}
		return nil
	}
	ab := a.Store.ActivityBuffer()
	p.ab = ab
	lim := a.Policy.ActivityLimits.Effective()
	// The agent's binding locates the entry (§10); it is read beside the active tasks, so
	// admission waits for one round trip, not two.
	var (
		active  []store.ActivityEntry
		binding *store.WorktreeBinding
	)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		var err error
		if active, err = ab.List(gctx, store.ActivityFilter{Limit: max(lim.MaxActive, store.DefaultActivityListLimit)}); err != nil {
			return fmt.Errorf("list active tasks: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		b, err := a.Store.Worktrees().GetBinding(gctx, in.AgentID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("look up the worktree binding of %s: %w", in.AgentID, err)
		}
		binding = &b
		return nil
	})
	if err := g.Wait(); err != nil {
		return err
	}
	others := slices.DeleteFunc(active, func(e store.ActivityEntry) bool { return e.AgentID == in.AgentID && e.TaskID == in.TaskID })

	if !in.AuthorizedDuplicate {
		for _, e := range others {
			if e.JobKey != "" && e.JobKey == in.JobKey {
				p.res = Result{Verdict: Duplicate, Code: commonpb.ErrorCode_DUPLICATE_DETECTED, AgentType: agentType,
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
			p.res = Result{Verdict: Concurrency, AgentType: agentType,
				Reason: fmt.Sprintf("queued: max_parallel_instances=%d of agent type %q reached (%d instances busy, §9.1)", limit, agentType, len(busy))}
			return nil
		}
	}

	if res, conflict := a.checkConflicts(in, agentType, others); conflict {
		p.res = res
		return nil
	}

	e := store.ActivityEntry{AgentID: in.AgentID, TaskID: in.TaskID, Description: in.Description, Scope: in.Scope, JobKey: in.JobKey}
	e.RepoID, e.WorktreeID, e.Branch = Location(binding, in.Scope)
	if c := a.Sink.Clock(); c != nil {
		// The entry's HLC (§4): admission runs in the frontend or in an activity, never in
		// workflow code, so reading the clock here is replay-safe.
		e.HLC = c.Now().String()
	}
	p.entry = &e
	p.res = Result{Verdict: OK, AgentType: agentType, Reason: "admitted"}
	return nil
}

// Location is where a task's activity entry says the work happens (§10: repo_id,
// worktree_id, branch): the worktree its agent is bound to — the home worktree, or an
// approved switch's target while BOUND_NON_HOME, with its branch — when binding is a bound
// state (worktree.Bound); otherwise what the task's scope names, each field only when the
// scope names exactly one. binding is the agent's projection (nil: none recorded).
func Location(binding *store.WorktreeBinding, scope string) (repoID, worktreeID, branch string) {
	if binding != nil && worktree.Bound(worktree.State(binding.State)) && binding.WorktreeID != "" {
		return binding.RepoID, binding.WorktreeID, binding.Branch
	}
	sc, _ := inference.ParseScope(scope) // validated at submission; a parse failure only loses the location
	if len(sc.Repos) == 1 {
		repoID = sc.Repos[0]
	}
	if len(sc.Worktrees) == 1 {
		worktreeID = sc.Worktrees[0]
	}
	if len(sc.Branches) == 1 {
		branch = sc.Branches[0]
	}
	return repoID, worktreeID, branch
}

// maxParallel returns the configured max_parallel_instances of a type, zero for none.
func (a *Admitter) maxParallel(agentType string) int {
	if n, ok := a.Policy.MaxParallel[agentType]; ok {
		return n
	}
	return a.Policy.MaxParallel["*"]
}

// checkConflicts compares the task's scope with those of the active tasks of other agents
// (tasks of one agent never run at the same time) and reports the first that may not run in
// parallel, in the buffer's order.
func (a *Admitter) checkConflicts(in Input, agentType string, others []store.ActivityEntry) (Result, bool) {
	mine, err := inference.ParseScope(in.Scope)
	if err != nil {
		mine = inference.Scope{}
	}
	engine := a.Policy.Engine
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
		v := inference.Decide(assessment, a.Policy.ConflictThreshold, eerr, a.Policy.Unavailable)
		if v.Parallel {
			continue
		}
		res := Result{OtherTaskID: e.TaskID, OtherAgentID: e.AgentID, Confidence: assessment.Confidence,
			Overlaps: assessment.Overlaps, AgentType: agentType}
		if v.Escalate {
			res.Verdict = Conflict
			res.Reason = fmt.Sprintf("conflict with task %s on agent %s: %s", e.TaskID, e.AgentID, v.Reason)
		} else {
			res.Verdict = Serialize
			res.Reason = fmt.Sprintf("queued behind task %s on agent %s: %s", e.TaskID, e.AgentID, v.Reason)
		}
		return res, true
	}
	return Result{}, false
}
