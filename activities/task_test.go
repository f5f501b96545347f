package activities_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
	"github.com/sw4rm/sw4rm-temporal/taskadmission"
)

// admitter returns activities over a memory store with agents coder-1, coder-2 and coder-3
// (type "coder") and reviewer-1 (type "reviewer"), all RUNNABLE.
func admitter(t *testing.T, policy taskadmission.Policy) (*activities.Activities, store.Store) {
	t.Helper()
	st := memory.New()
	t.Cleanup(st.Close)
	for id, name := range map[string]string{"coder-1": "coder", "coder-2": "coder", "coder-3": "coder", "reviewer-1": "reviewer"} {
		require.NoError(t, st.Registry().PutAgent(context.Background(), store.AgentRecord{
			Descriptor: &registrypb.AgentDescriptor{AgentId: id, Name: name}, State: commonpb.AgentState_RUNNABLE}))
	}
	sink := audit.New(nil, st.Audit())
	return &activities.Activities{Store: st, Router: router.New(st, router.Config{}, sink), Sink: sink, Scheduler: policy}, st
}

func admit(t *testing.T, a *activities.Activities, agent, task, scope string, params string) taskadmission.Result {
	t.Helper()
	typ, err := a.AgentTypeOf(t.Context(), agent)
	require.NoError(t, err)
	res, err := a.AdmitTask(t.Context(), taskadmission.Input{TaskID: task, AgentID: agent, Scope: scope,
		JobKey: taskadmission.JobKey(typ, []byte(params), "application/json", scope)})
	require.NoError(t, err)
	return res
}

func TestAdmitTaskVerdicts(t *testing.T) {
	a, st := admitter(t, taskadmission.Policy{MaxParallel: map[string]int{"coder": 2}})
	ab := st.ActivityBuffer()

	// Admission creates the entry before execution, with the scope's location (§10).
	res := admit(t, a, "coder-1", "t1", "repo:shop path:src/api/** branch:main", `{"n":1}`)
	require.Equal(t, taskadmission.OK, res.Verdict, res.Reason)
	es, err := ab.List(t.Context(), store.ActivityFilter{TaskID: "t1"})
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.Equal(t, "shop", es[0].RepoID)
	require.Equal(t, "main", es[0].Branch)
	require.NotEmpty(t, es[0].JobKey)

	// The identical job on another agent of the type is a duplicate (§9.2).
	res = admit(t, a, "coder-2", "t2", "repo:shop path:src/api/** branch:main", `{"n":1}`)
	require.Equal(t, taskadmission.Duplicate, res.Verdict)
	require.Equal(t, commonpb.ErrorCode_DUPLICATE_DETECTED, res.Code)
	require.Equal(t, "t1", res.OtherTaskID)

	// An overlapping scope is a conflict with a confidence below the threshold (§9.3).
	res = admit(t, a, "coder-2", "t3", "repo:shop path:src/api/orders.go", `{"n":3}`)
	require.Equal(t, taskadmission.Conflict, res.Verdict, res.Reason)
	require.Less(t, res.Confidence, 0.7)

	// A disjoint scope runs in parallel; the second busy coder reaches max_parallel_instances.
	require.Equal(t, taskadmission.OK, admit(t, a, "coder-2", "t4", "repo:docs path:guide/**", `{"n":4}`).Verdict)
	res = admit(t, a, "coder-3", "t5", "repo:infra path:tf/**", `{"n":5}`)
	require.Equal(t, taskadmission.Concurrency, res.Verdict)
	require.Contains(t, res.Reason, `max_parallel_instances=2 of agent type "coder"`)
	// An agent already holding a task is one instance: its own queue is not held back, and
	// other types have no limit.
	require.Equal(t, taskadmission.OK, admit(t, a, "coder-1", "t6", "repo:infra path:tf/**", `{"n":6}`).Verdict)
	require.Equal(t, taskadmission.OK, admit(t, a, "reviewer-1", "t7", "repo:infra2 path:x/**", `{"n":7}`).Verdict)

	// Finishing a task frees its instance.
	require.NoError(t, a.FinishTask(t.Context(), activities.FinishTaskInput{AgentID: "coder-2", TaskID: "t4"}))
	ended, err := a.TaskEnded(t.Context(), "t4")
	require.NoError(t, err)
	require.True(t, ended)
	require.Equal(t, taskadmission.OK, admit(t, a, "coder-3", "t5", "repo:infra3 path:tf/**", `{"n":5}`).Verdict)
}

func TestAdmitTaskRejections(t *testing.T) {
	a, st := admitter(t, taskadmission.Policy{ActivityLimits: store.ActivityLimits{MaxActive: 1}})
	_, err := a.AgentTypeOf(t.Context(), "nobody")
	require.Error(t, err)
	res, err := a.AdmitTask(t.Context(), taskadmission.Input{TaskID: "t0", AgentID: "nobody", Scope: "resource:x"})
	require.NoError(t, err)
	require.Equal(t, taskadmission.Reject, res.Verdict)
	require.Equal(t, commonpb.ErrorCode_NO_ROUTE, res.Code)

	require.Equal(t, taskadmission.OK, admit(t, a, "coder-1", "t1", "resource:a", `{}`).Verdict)
	// A full activity buffer refuses the entry, not the task (§10: it MUST NOT block
	// scheduling; §10.1: the registration is refused with activity_buffer_full, audited).
	res = admit(t, a, "coder-2", "t2", "resource:b", `{}`)
	require.Equal(t, taskadmission.OK, res.Verdict, "the activity buffer is full, and the task is admitted all the same")
	require.True(t, res.NoActivityEntry)
	require.Contains(t, res.Reason, "activity_buffer_full")
	ended, err := a.TaskEnded(t.Context(), "t2")
	require.NoError(t, err)
	require.True(t, ended, "t2 has no entry")
	evs, err := st.Audit().List(t.Context(), store.AuditFilter{TypePrefix: "activity.buffer_full"})
	require.NoError(t, err)
	require.Len(t, evs, 1, "the refused registration is not silent (§10.1)")
	require.Equal(t, "coder-2", evs[0].AgentID)
	require.Contains(t, string(evs[0].Details), `"error_code":"activity_buffer_full"`)

	require.NoError(t, st.Registry().SetAgentState(t.Context(), "reviewer-1", commonpb.AgentState_SHUTTING_DOWN))
	res = admit(t, a, "reviewer-1", "t3", "resource:c", `{}`)
	require.Equal(t, taskadmission.Reject, res.Verdict)
	require.Equal(t, commonpb.ErrorCode_AGENT_SHUTDOWN, res.Code)
}

// TestAdmittedEntryCarriesTheBinding: the activity entry of a task admitted for a bound
// agent carries the repository, worktree and branch of its binding (§10) — the home
// worktree, or an approved switch's target — rather than its scope's; an agent that is not
// bound (no binding, UNBOUND, BIND_FAILED) keeps the scope's location.
func TestAdmittedEntryCarriesTheBinding(t *testing.T) {
	a, st := admitter(t, taskadmission.Policy{})
	ctx := t.Context()
	entry := func(agent, task string) store.ActivityEntry {
		t.Helper()
		es, err := st.ActivityBuffer().List(ctx, store.ActivityFilter{AgentID: agent, TaskID: task})
		require.NoError(t, err)
		require.Len(t, es, 1)
		return es[0]
	}
	put := func(b store.WorktreeBinding) {
		t.Helper()
		b.UpdatedAt = time.Now()
		require.NoError(t, st.Worktrees().PutBinding(ctx, b))
	}

	require.Equal(t, taskadmission.OK, admit(t, a, "coder-1", "none", "repo:shop worktree:w branch:main path:a/**", `{"n":1}`).Verdict)
	e := entry("coder-1", "none")
	require.Equal(t, [3]string{"shop", "w", "main"}, [3]string{e.RepoID, e.WorktreeID, e.Branch}, "no binding: the scope's")

	put(store.WorktreeBinding{AgentID: "coder-1", State: "BOUND_HOME", RepoID: "app", HomeWorktreeID: "home", WorktreeID: "home", Branch: "sw4rm/home"})
	require.Equal(t, taskadmission.OK, admit(t, a, "coder-1", "home", "repo:shop path:b/**", `{"n":2}`).Verdict)
	e = entry("coder-1", "home")
	require.Equal(t, [3]string{"app", "home", "sw4rm/home"}, [3]string{e.RepoID, e.WorktreeID, e.Branch}, "bound: the binding's")

	put(store.WorktreeBinding{AgentID: "coder-1", State: "BOUND_NON_HOME", RepoID: "app", HomeWorktreeID: "home", WorktreeID: "hotfix",
		Branch: "sw4rm/hotfix", TargetWorktreeID: "hotfix"})
	require.Equal(t, taskadmission.OK, admit(t, a, "coder-1", "away", "repo:shop path:c/**", `{"n":3}`).Verdict)
	e = entry("coder-1", "away")
	require.Equal(t, [3]string{"app", "hotfix", "sw4rm/hotfix"}, [3]string{e.RepoID, e.WorktreeID, e.Branch}, "switched: the target's")

	put(store.WorktreeBinding{AgentID: "coder-2", State: "BIND_FAILED", RepoID: "app", HomeWorktreeID: "w2", Reason: "worktree_locked"})
	require.Equal(t, taskadmission.OK, admit(t, a, "coder-2", "failed", "repo:docs path:d/**", `{"n":4}`).Verdict)
	e = entry("coder-2", "failed")
	require.Equal(t, [3]string{"docs", "", ""}, [3]string{e.RepoID, e.WorktreeID, e.Branch}, "BIND_FAILED: the scope's")
}

// TestAdmitNewTask: the one-trip admission derives the same job key as AgentTypeOf and
// JobKey do, so its first verdict and every later attempt agree; an agent that is not
// registered is a non-retryable no_route failure.
func TestAdmitNewTask(t *testing.T) {
	a, _ := admitter(t, taskadmission.Policy{})
	in := taskadmission.Input{TaskID: "t1", AgentID: "coder-1", Scope: "repo:shop path:src/**"}
	got, err := a.AdmitNewTask(t.Context(), activities.NewTaskAdmission{Input: in, Params: []byte(`{"n":1}`), ContentType: "application/json"})
	require.NoError(t, err)
	require.Equal(t, taskadmission.OK, got.Result.Verdict, got.Result.Reason)
	require.Equal(t, taskadmission.JobKey("coder", []byte(`{"n":1}`), "application/json", in.Scope), got.JobKey)
	// The identical job on another coder is a duplicate of the first: same key.
	dup := admit(t, a, "coder-2", "t2", in.Scope, `{"n":1}`)
	require.Equal(t, taskadmission.Duplicate, dup.Verdict)

	_, err = a.AdmitNewTask(t.Context(), activities.NewTaskAdmission{Input: taskadmission.Input{TaskID: "t3", AgentID: "nobody", Scope: "resource:x"}})
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.True(t, appErr.NonRetryable())
	require.Equal(t, "no_route", appErr.Type())
}
