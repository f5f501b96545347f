package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestDecide: the rule of §10's reconciliation, one workflow outcome at a time.
func TestDecide(t *testing.T) {
	known := func(s enums.WorkflowExecutionStatus, state string) Outcome {
		return Outcome{Known: true, Status: s, RunID: "run-1", TaskState: state}
	}
	for _, c := range []struct {
		name  string
		o     Outcome
		close bool
		want  store.ActivityStatus
	}{
		{"running", known(enums.WORKFLOW_EXECUTION_STATUS_RUNNING, ""), false, ""},
		{"continued as new", known(enums.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW, ""), false, ""},
		{"unspecified", known(enums.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED, ""), false, ""},
		{"completed, task completed", known(enums.WORKFLOW_EXECUTION_STATUS_COMPLETED, workflows.TaskCompleted), true, store.ActivityCompleted},
		{"completed, task failed", known(enums.WORKFLOW_EXECUTION_STATUS_COMPLETED, workflows.TaskFailed), true, store.ActivityFailed},
		{"completed, task rejected", known(enums.WORKFLOW_EXECUTION_STATUS_COMPLETED, workflows.TaskRejected), true, store.ActivityFailed},
		{"completed, no final state", known(enums.WORKFLOW_EXECUTION_STATUS_COMPLETED, workflows.TaskRunning), true, store.ActivityUnknown},
		{"completed, unreadable result", Outcome{Known: true, Status: enums.WORKFLOW_EXECUTION_STATUS_COMPLETED, ResultError: "bad json"}, true, store.ActivityUnknown},
		{"failed", known(enums.WORKFLOW_EXECUTION_STATUS_FAILED, ""), true, store.ActivityFailed},
		{"failed, task failed", known(enums.WORKFLOW_EXECUTION_STATUS_FAILED, workflows.TaskFailed), true, store.ActivityFailed},
		{"failed, task rejected", known(enums.WORKFLOW_EXECUTION_STATUS_FAILED, workflows.TaskRejected), true, store.ActivityFailed},
		{"timed out", known(enums.WORKFLOW_EXECUTION_STATUS_TIMED_OUT, ""), true, store.ActivityFailed},
		{"terminated", known(enums.WORKFLOW_EXECUTION_STATUS_TERMINATED, ""), true, store.ActivityFailed},
		{"cancelled", known(enums.WORKFLOW_EXECUTION_STATUS_CANCELED, ""), true, store.ActivityCancelled},
		{"not found", Outcome{}, true, store.ActivityUnknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := Decide(c.o)
			assert.Equal(t, c.close, v.Close)
			assert.Equal(t, c.want, v.Status)
			assert.NotEmpty(t, v.Why)
			if c.close {
				assert.NoError(t, store.ValidateActivityCompletion(v.Status), "Complete takes the status")
			}
		})
	}
	assert.Equal(t, "NotFound", Outcome{}.StatusName())
	assert.Equal(t, "Terminated", known(enums.WORKFLOW_EXECUTION_STATUS_TERMINATED, "").StatusName())
}

// fakeOracle answers from a table; a task it does not list is unknown to Temporal.
type fakeOracle struct {
	mu       sync.Mutex
	outcomes map[string]Outcome
	failing  map[string]bool
	asked    map[string]int
}

func (f *fakeOracle) TaskOutcome(_ context.Context, taskID string) (Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked[taskID]++
	if f.failing[taskID] {
		return Outcome{}, errors.New("temporal unreachable")
	}
	return f.outcomes[taskID], nil
}

func newFixture(t *testing.T) (store.Store, *fakeOracle) {
	st := memory.New()
	t.Cleanup(st.Close)
	f := &fakeOracle{outcomes: map[string]Outcome{}, failing: map[string]bool{}, asked: map[string]int{}}
	return st, f
}

func newReconciler(st store.Store, o Oracle, grace time.Duration) *Reconciler {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return New(st, o, audit.New(log, st.Audit()), Config{Interval: time.Hour, Grace: grace}, log)
}

func put(t *testing.T, st store.Store, agent, task string, age time.Duration) {
	t.Helper()
	_, err := st.ActivityBuffer().Put(t.Context(), store.ActivityEntry{AgentID: agent, TaskID: task, CreatedAt: time.Now().Add(-age)}, store.ActivityLimits{})
	require.NoError(t, err)
}

func reconciledEvents(t *testing.T, st store.Store) []store.Event {
	t.Helper()
	evs, err := st.Audit().List(t.Context(), store.AuditFilter{TypePrefix: AuditType})
	require.NoError(t, err)
	return evs
}

// TestSweep: one sweep closes the entries of ended or unknown tasks with the status Decide
// gives and audits each, leaves running tasks, young entries (unasked) and the entries whose
// task could not be asked about, and says so in its error.
func TestSweep(t *testing.T) {
	st, o := newFixture(t)
	put(t, st, "alice", "done", time.Hour)
	put(t, st, "alice", "killed", time.Hour)
	put(t, st, "alice", "gone", time.Hour)
	put(t, st, "bob", "running", time.Hour)
	put(t, st, "bob", "unreachable", time.Hour)
	put(t, st, "bob", "young", 0)
	o.outcomes["done"] = Outcome{Known: true, Status: enums.WORKFLOW_EXECUTION_STATUS_COMPLETED, RunID: "r1", TaskState: workflows.TaskCompleted}
	o.outcomes["killed"] = Outcome{Known: true, Status: enums.WORKFLOW_EXECUTION_STATUS_TERMINATED, RunID: "r2"}
	o.outcomes["running"] = Outcome{Known: true, Status: enums.WORKFLOW_EXECUTION_STATUS_RUNNING, RunID: "r3"}
	o.outcomes["young"] = Outcome{Known: true, Status: enums.WORKFLOW_EXECUTION_STATUS_TERMINATED}
	o.failing["unreachable"] = true

	got, err := newReconciler(st, o, time.Minute).Sweep(t.Context())
	require.ErrorContains(t, err, "temporal unreachable")
	status := map[string]store.ActivityStatus{}
	for _, r := range got {
		status[r.Entry.TaskID] = r.Entry.Status
	}
	assert.Equal(t, map[string]store.ActivityStatus{"done": store.ActivityCompleted, "killed": store.ActivityFailed, "gone": store.ActivityUnknown}, status)
	assert.Zero(t, o.asked["young"], "an entry within the grace period is not asked about")

	active, err := st.ActivityBuffer().List(t.Context(), store.ActivityFilter{})
	require.NoError(t, err)
	var left []string
	for _, e := range active {
		left = append(left, e.TaskID)
	}
	assert.ElementsMatch(t, []string{"running", "unreachable", "young"}, left)
	hist, err := st.ActivityBuffer().History(t.Context(), store.ActivityFilter{AgentID: "alice"})
	require.NoError(t, err)
	assert.Len(t, hist, 3)

	evs := reconciledEvents(t, st)
	require.Len(t, evs, 3)
	for _, ev := range evs {
		var d map[string]any
		require.NoError(t, json.Unmarshal(ev.Details, &d))
		assert.Equal(t, "alice", ev.AgentID)
		assert.Equal(t, "task/"+d["task_id"].(string), ev.CorrelationID)
		assert.Equal(t, "active", d["before"])
		assert.Equal(t, string(status[d["task_id"].(string)]), d["after"])
		assert.NotEmpty(t, d["reason"])
		if d["task_id"] == "killed" {
			assert.Equal(t, "Terminated", d["workflow_status"])
			assert.Equal(t, "r2", d["run_id"])
		}
		if d["task_id"] == "gone" {
			assert.Equal(t, "NotFound", d["workflow_status"])
		}
	}

	// The next sweep finds nothing more to close, and audits nothing again.
	o.failing["unreachable"] = false
	o.outcomes["unreachable"] = Outcome{Known: true, Status: enums.WORKFLOW_EXECUTION_STATUS_CANCELED}
	got, err = newReconciler(st, o, time.Minute).Sweep(t.Context())
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, store.ActivityCancelled, got[0].Entry.Status)
	assert.Len(t, reconciledEvents(t, st), 4)
}

// TestConcurrentSweeps: reconcilers of several workers sweeping one store at once close and
// audit each orphaned entry exactly once.
func TestConcurrentSweeps(t *testing.T) {
	st, o := newFixture(t)
	const n = 40
	for i := range n {
		put(t, st, "alice", "task-"+string(rune('a'+i%26))+string(rune('a'+i/26)), time.Hour)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		closed int
	)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := newReconciler(st, o, time.Minute).Sweep(context.Background())
			assert.NoError(t, err)
			mu.Lock()
			closed += len(got)
			mu.Unlock()
		}()
	}
	wg.Wait()
	assert.Equal(t, n, closed, "each entry is closed by one sweep")
	assert.Len(t, reconciledEvents(t, st), n, "and audited once")
	active, err := st.ActivityBuffer().List(t.Context(), store.ActivityFilter{})
	require.NoError(t, err)
	assert.Empty(t, active)
}
