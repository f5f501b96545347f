package workflows_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// dagNode is a DEPENDENCY node run by agent "agent-<id>".
func dagNode(id string, deps ...string) *workflowpb.WorkflowNode {
	return &workflowpb.WorkflowNode{NodeId: id, AgentId: "agent-" + id, Dependencies: deps,
		TriggerType: workflowpb.TriggerType_DEPENDENCY, InputMapping: map[string]string{}, OutputMapping: map[string]string{}, Metadata: map[string]string{}}
}

// dagDef marshals a definition of workflow "wf" with nodes.
func dagDef(t testing.TB, nodes ...*workflowpb.WorkflowNode) []byte {
	t.Helper()
	def := &workflowpb.WorkflowDefinition{WorkflowId: "wf", Nodes: map[string]*workflowpb.WorkflowNode{}}
	for _, n := range nodes {
		def.Nodes[n.GetNodeId()] = n
	}
	b, err := proto.Marshal(def)
	require.NoError(t, err)
	return b
}

// dagEvent is one start or end of a node's task, at workflow time.
type dagEvent struct {
	kind, node string
	at         time.Time
}

// dagHarness runs DAGRun with TaskWorkflow mocked: behave decides each node's task, and
// every start and end is recorded.
type dagHarness struct {
	t   *testing.T
	env *testsuite.TestWorkflowEnvironment

	mu     sync.Mutex
	starts map[string]int
	inputs map[string][]workflows.TaskInput
	log    []dagEvent
	// audited are the transitions RecordDAGTransitions was given, in order.
	audited []activities.DAGTransition
	// behave answers a node's task; nil completes it with result "{}".
	behave func(ctx workflow.Context, node string, in workflows.TaskInput) (workflows.TaskStatus, error)
}

func newDAGHarness(t *testing.T) *dagHarness {
	t.Helper()
	h := &dagHarness{t: t, starts: map[string]int{}, inputs: map[string][]workflows.TaskInput{}}
	h.reset()
	return h
}

// reset gives the harness a fresh environment (the next execution of a continued or resumed
// run), keeping the counts.
func (h *dagHarness) reset() {
	var suite testsuite.WorkflowTestSuite
	h.env = suite.NewTestWorkflowEnvironment()
	h.env.SetStartTime(time.Date(2025, 1, 1, 8, 0, 0, 0, time.UTC))
	h.env.RegisterWorkflow(workflows.TaskWorkflow)
	var acts *activities.Activities
	h.env.OnActivity(acts.RecordDAGTransitions, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.DAGTransitionsInput) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.audited = append(h.audited, in.Transitions...)
		return nil
	}).Maybe()
	h.env.OnWorkflow(workflows.TaskWorkflow, mock.Anything, mock.Anything).Return(
		func(ctx workflow.Context, in workflows.TaskInput) (workflows.TaskStatus, error) {
			// Task ids are dag-wf-<node>-<attempt>.
			node := strings.TrimPrefix(in.TaskID[:strings.LastIndex(in.TaskID, "-")], "dag-wf-")
			h.mu.Lock()
			h.starts[node]++
			h.inputs[node] = append(h.inputs[node], in)
			h.log = append(h.log, dagEvent{"start", node, workflow.Now(ctx)})
			behave := h.behave
			h.mu.Unlock()
			st := workflows.TaskStatus{TaskID: in.TaskID, AgentID: in.AgentID, State: workflows.TaskCompleted, Result: "{}"}
			var err error
			if behave != nil {
				st, err = behave(ctx, node, in)
				st.TaskID, st.AgentID = in.TaskID, in.AgentID
			}
			h.mu.Lock()
			h.log = append(h.log, dagEvent{"end", node, workflow.Now(ctx)})
			h.mu.Unlock()
			return st, err
		})
}

// run executes the run to its end and returns its state.
func (h *dagHarness) run(in workflows.DAGRunInput) workflows.DAGRunState {
	h.t.Helper()
	h.env.ExecuteWorkflow(workflows.DAGRun, in)
	require.True(h.t, h.env.IsWorkflowCompleted())
	require.NoError(h.t, h.env.GetWorkflowError())
	var st workflows.DAGRunState
	require.NoError(h.t, h.env.GetWorkflowResult(&st))
	return st
}

// state queries the run's state.
func (h *dagHarness) state() workflows.DAGRunState {
	h.t.Helper()
	v, err := h.env.QueryWorkflow(workflows.DAGStateQuery)
	require.NoError(h.t, err)
	var st workflows.DAGRunState
	require.NoError(h.t, v.Get(&st))
	return st
}

// dagUpdate is what the test environment reported for one update.
type dagUpdate struct {
	rejected error
	done     bool
	err      error
	state    workflows.DAGRunState
}

// update sends an update now (call it from a delayed callback).
func (h *dagHarness) update(name string, arg any) *dagUpdate {
	res := &dagUpdate{}
	h.env.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{
		OnReject: func(err error) { res.rejected = err },
		OnAccept: func() {},
		OnComplete: func(v any, err error) {
			res.done, res.err = true, err
			if s, ok := v.(workflows.DAGRunState); ok {
				res.state = s
			}
		},
	}, arg)
	return res
}

// index is the position of the first event of kind for node in the log, -1 if none.
func (h *dagHarness) index(kind, node string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, e := range h.log {
		if e.kind == kind && e.node == node {
			return i
		}
	}
	return -1
}

// startedAt is the workflow time of node's first start.
func (h *dagHarness) startedAt(node string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.log {
		if e.kind == "start" && e.node == node {
			return e.at
		}
	}
	h.t.Fatalf("node %s never started", node)
	return time.Time{}
}

// sleepy returns behave that takes d of workflow time and then completes with result.
func sleepy(d time.Duration, result func(node string, in workflows.TaskInput) string) func(workflow.Context, string, workflows.TaskInput) (workflows.TaskStatus, error) {
	return func(ctx workflow.Context, node string, in workflows.TaskInput) (workflows.TaskStatus, error) {
		if err := workflow.Sleep(ctx, d); err != nil {
			return workflows.TaskStatus{}, err
		}
		r := "{}"
		if result != nil {
			r = result(node, in)
		}
		return workflows.TaskStatus{State: workflows.TaskCompleted, Result: r}, nil
	}
}

func TestDAGDiamondCompletesWithMappedData(t *testing.T) {
	h := newDAGHarness(t)
	a := dagNode("a")
	a.InputMapping["x"] = "/x"
	a.OutputMapping["y"] = "/a/y"
	b := dagNode("b", "a")
	b.InputMapping["v"] = "/a/y"
	b.OutputMapping["z"] = "/b"
	c := dagNode("c", "a")
	c.InputMapping["v"] = "/a/y"
	c.OutputMapping["z"] = "/c"
	d := dagNode("d", "b", "c")
	d.InputMapping["left"] = "/b"
	d.InputMapping["right"] = "/c"
	d.OutputMapping["/sum"] = "/result"
	h.behave = sleepy(time.Minute, func(node string, in workflows.TaskInput) string {
		var p map[string]float64
		require.NoError(t, json.Unmarshal(in.Params, &p))
		switch node {
		case "a":
			return fmt.Sprintf(`{"y": %v}`, p["x"]*10)
		case "b":
			return fmt.Sprintf(`{"z": %v}`, p["v"]+1)
		case "c":
			return fmt.Sprintf(`{"z": %v}`, p["v"]+2)
		}
		return fmt.Sprintf(`{"sum": %v}`, p["left"]+p["right"])
	})

	st := h.run(workflows.DAGRunInput{WorkflowID: "wf", Version: 1, Definition: dagDef(t, a, b, c, d), Data: `{"x": 4}`})

	assert.Equal(t, workflows.DAGCompleted, st.Status)
	assert.JSONEq(t, `{"x": 4, "a": {"y": 40}, "b": 41, "c": 42, "result": 83}`, st.Data)
	for _, id := range []string{"a", "b", "c", "d"} {
		assert.Equal(t, workflowpb.NodeStatus_COMPLETED, st.Nodes[id].Status, id)
		assert.Equal(t, 1, h.starts[id], id)
		assert.Equal(t, 1, st.Nodes[id].Attempts, id)
	}
	assert.JSONEq(t, `{"sum": 83}`, st.Nodes["d"].Output)
	// A node never starts before every dependency completed (§17.7).
	assert.Less(t, h.index("end", "a"), h.index("start", "b"))
	assert.Less(t, h.index("end", "a"), h.index("start", "c"))
	assert.Less(t, h.index("end", "b"), h.index("start", "d"))
	assert.Less(t, h.index("end", "c"), h.index("start", "d"))
	// Each node is an ordinary task: its task id, agent, default scope and JSON params.
	in := h.inputs["b"][0]
	assert.Equal(t, "dag-wf-b-1", in.TaskID)
	assert.Equal(t, "agent-b", in.AgentID)
	assert.Equal(t, `resource:"dag/wf/b"`, in.Scope)
	assert.Equal(t, "application/json", in.ContentType)
	assert.Equal(t, st.Nodes["b"].TaskID, in.TaskID)
	assert.False(t, st.CompletedAt.IsZero())
	assert.Equal(t, 1, st.Runs)
}

func TestDAGNodePriorityAndScopeFromMetadata(t *testing.T) {
	h := newDAGHarness(t)
	a := dagNode("a")
	a.Metadata["priority"] = "-5"
	a.Metadata["scope"] = "repo:shop path:src/**"
	b := dagNode("b", "a")
	b.Metadata["priority"] = "99" // out of range: the node fails, it is not sent
	h.env.RegisterDelayedCallback(func() {
		st := h.state()
		assert.Equal(t, workflows.DAGWaiting, st.Status)
		assert.Equal(t, workflowpb.NodeStatus_FAILED, st.Nodes["b"].Status)
		assert.Contains(t, st.Nodes["b"].Error, "priority")
		h.env.CancelWorkflow()
	}, time.Hour)
	h.env.ExecuteWorkflow(workflows.DAGRun, workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, a, b)})
	require.Len(t, h.inputs["a"], 1)
	assert.Equal(t, int32(-5), h.inputs["a"][0].Priority)
	assert.Equal(t, "repo:shop path:src/**", h.inputs["a"][0].Scope[:len("repo:shop path:src/**")])
	assert.Zero(t, h.starts["b"])
}

func TestDAGFanOutRunsInParallel(t *testing.T) {
	h := newDAGHarness(t)
	nodes := []*workflowpb.WorkflowNode{dagNode("root")}
	var leaves []string
	for i := range 20 {
		id := fmt.Sprintf("f%02d", i)
		leaves = append(leaves, id)
		nodes = append(nodes, dagNode(id, "root"))
	}
	nodes = append(nodes, dagNode("join", leaves...))
	h.behave = sleepy(time.Minute, nil)

	st := h.run(workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, nodes...)})

	require.Equal(t, workflows.DAGCompleted, st.Status)
	firstEnd := len(h.log)
	for _, id := range leaves {
		firstEnd = min(firstEnd, h.index("end", id))
	}
	for _, id := range leaves {
		assert.Less(t, h.index("start", id), firstEnd, "%s started only after another leaf finished", id)
		assert.Equal(t, h.startedAt("f00"), h.startedAt(id), "leaves start together")
	}
	// The whole fan-out took one task's time, not twenty.
	assert.Equal(t, 2*time.Minute, h.startedAt("join").Sub(h.startedAt("root")))
}

// failUntil fails node's task until data field "/fixed" is true.
func failUntilFixed(node string) func(workflow.Context, string, workflows.TaskInput) (workflows.TaskStatus, error) {
	return func(ctx workflow.Context, n string, in workflows.TaskInput) (workflows.TaskStatus, error) {
		if err := workflow.Sleep(ctx, time.Minute); err != nil {
			return workflows.TaskStatus{}, err
		}
		if n == node {
			var p map[string]any
			_ = json.Unmarshal(in.Params, &p)
			if p["fixed"] != true {
				return workflows.TaskStatus{State: workflows.TaskFailed, Reason: "tool_error: the build broke"}, nil
			}
		}
		return workflows.TaskStatus{State: workflows.TaskCompleted, Result: `{"ok": true}`}, nil
	}
}

func TestDAGFailureWaitsAndResumeRerunsOnlyTheFailedBranch(t *testing.T) {
	h := newDAGHarness(t)
	// a → {b → c, d}; b fails until the data is fixed.
	a, d := dagNode("a"), dagNode("d", "a")
	b, c := dagNode("b", "a"), dagNode("c", "b")
	b.InputMapping["fixed"] = "/fixed"
	h.behave = failUntilFixed("b")

	var waiting workflows.DAGRunState
	var refused, resumed *dagUpdate
	h.env.RegisterDelayedCallback(func() {
		waiting = h.state()
		assert.False(t, h.env.IsWorkflowCompleted(), "a run with a failed node waits, it does not close")
		// Resuming a node that is neither failed nor completed is fine in a WAITING run, but
		// an unknown node is refused.
		refused = h.update(workflows.DAGResumeUpdate, workflows.DAGResume{NodeID: "nope"})
		resumed = h.update(workflows.DAGResumeUpdate, workflows.DAGResume{NodeID: "b", Data: `{"fixed": true}`, By: "ops"})
	}, time.Hour)

	st := h.run(workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, a, b, c, d), Data: `{"fixed": false}`})

	// While waiting: b FAILED with its reason, its dependent c never ran, d (another branch) did.
	assert.Equal(t, workflows.DAGWaiting, waiting.Status)
	assert.Equal(t, workflowpb.NodeStatus_FAILED, waiting.Nodes["b"].Status)
	assert.Contains(t, waiting.Nodes["b"].Error, "tool_error: the build broke")
	assert.Equal(t, workflowpb.NodeStatus_PENDING, waiting.Nodes["c"].Status)
	assert.Equal(t, workflowpb.NodeStatus_COMPLETED, waiting.Nodes["d"].Status)
	require.Error(t, refused.rejected)
	assert.Contains(t, refused.rejected.Error(), "no node")
	require.NoError(t, resumed.rejected)
	require.True(t, resumed.done)
	require.NoError(t, resumed.err)
	assert.Equal(t, workflowpb.NodeStatus_PENDING, resumed.state.Nodes["b"].Status)
	assert.Equal(t, workflows.DAGRunning, resumed.state.Status)

	// After the resume: completed, b ran again (a new task id), c once, a and d never again.
	assert.Equal(t, workflows.DAGCompleted, st.Status)
	assert.JSONEq(t, `{"fixed": true}`, st.Data)
	assert.Equal(t, map[string]int{"a": 1, "b": 2, "c": 1, "d": 1}, h.starts)
	assert.Equal(t, "dag-wf-b-2", st.Nodes["b"].TaskID)
	assert.Equal(t, 2, st.Nodes["b"].Attempts)
	assert.Empty(t, st.Nodes["b"].Error)
	assert.Less(t, h.index("end", "d"), len(h.log))
}

func TestDAGResumeOfACompletedNodeRerunsItsDescendantsOnly(t *testing.T) {
	h := newDAGHarness(t)
	// a → b → c and a → d; m is MANUAL and never triggered, so the run stays open.
	a, b, c, d := dagNode("a"), dagNode("b", "a"), dagNode("c", "b"), dagNode("d", "a")
	m := dagNode("m", "a")
	m.TriggerType = workflowpb.TriggerType_MANUAL
	h.behave = sleepy(time.Minute, nil)
	var running, resumed *dagUpdate
	h.env.RegisterDelayedCallback(func() {
		// b is completed, but the run is RUNNING (m waits): resuming a PENDING node is refused.
		running = h.update(workflows.DAGResumeUpdate, workflows.DAGResume{NodeID: "m"})
		resumed = h.update(workflows.DAGResumeUpdate, workflows.DAGResume{NodeID: "b"})
	}, time.Hour)
	h.env.RegisterDelayedCallback(func() {
		h.update(workflows.DAGTriggerUpdate, workflows.DAGTrigger{NodeID: "m", By: "ops"})
	}, 2*time.Hour)

	st := h.run(workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, a, b, c, d, m)})

	require.Error(t, running.rejected)
	assert.Contains(t, running.rejected.Error(), "failed_precondition")
	require.True(t, resumed.done)
	assert.Equal(t, workflows.DAGCompleted, st.Status)
	assert.Equal(t, map[string]int{"a": 1, "b": 2, "c": 2, "d": 1, "m": 1}, h.starts)
}

func TestDAGRetriesFromMetadata(t *testing.T) {
	h := newDAGHarness(t)
	flaky, broken := dagNode("flaky"), dagNode("broken")
	flaky.Metadata["retries"] = "2"
	broken.Metadata["retries"] = "1"
	after := dagNode("after", "broken")
	h.behave = func(ctx workflow.Context, node string, in workflows.TaskInput) (workflows.TaskStatus, error) {
		if err := workflow.Sleep(ctx, time.Minute); err != nil {
			return workflows.TaskStatus{}, err
		}
		switch {
		case node == "flaky" && !strings.HasSuffix(in.TaskID, "-3"):
			return workflows.TaskStatus{State: workflows.TaskFailed, Reason: "tool_error: flaked"}, nil
		case node == "broken":
			// A child that errors counts as a failure too.
			return workflows.TaskStatus{}, errors.New("agent vanished")
		}
		return workflows.TaskStatus{State: workflows.TaskCompleted, Result: `"done"`}, nil
	}
	h.env.RegisterDelayedCallback(func() {
		st := h.state()
		assert.Equal(t, workflows.DAGWaiting, st.Status)
		assert.Equal(t, workflowpb.NodeStatus_COMPLETED, st.Nodes["flaky"].Status)
		assert.Equal(t, 3, st.Nodes["flaky"].Attempts)
		assert.Equal(t, `"done"`, st.Nodes["flaky"].Output)
		assert.Equal(t, workflowpb.NodeStatus_FAILED, st.Nodes["broken"].Status)
		assert.Equal(t, 2, st.Nodes["broken"].Attempts)
		assert.Contains(t, st.Nodes["broken"].Error, "agent vanished")
		assert.Equal(t, workflowpb.NodeStatus_PENDING, st.Nodes["after"].Status)
		h.env.CancelWorkflow()
	}, time.Hour)
	h.env.ExecuteWorkflow(workflows.DAGRun, workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, flaky, broken, after)})

	assert.Equal(t, 3, h.starts["flaky"])
	assert.Equal(t, 2, h.starts["broken"])
	assert.Zero(t, h.starts["after"])
	var ids []string
	for _, in := range h.inputs["flaky"] {
		ids = append(ids, in.TaskID)
	}
	assert.Equal(t, []string{"dag-wf-flaky-1", "dag-wf-flaky-2", "dag-wf-flaky-3"}, ids)
}

// TestDAGSkipIfLetsDependentsRun: runs recorded before DAGRevisionSpecDependencies (revision
// zero) counted a SKIPPED dependency as satisfied, and still do when they replay.
func TestDAGSkipIfLetsDependentsRun(t *testing.T) {
	h := newDAGHarness(t)
	a := dagNode("a")
	b := dagNode("b", "a")
	b.Metadata["skip_if"] = "/flags/skip_b"
	c := dagNode("c", "b")
	e := dagNode("e", "a")
	e.Metadata["skip_if"] = "/flags/skip_e" // false: runs

	st := h.run(workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, a, b, c, e), Data: `{"flags": {"skip_b": true, "skip_e": false}}`})

	assert.Equal(t, workflows.DAGCompleted, st.Status)
	assert.Equal(t, workflowpb.NodeStatus_SKIPPED, st.Nodes["b"].Status)
	assert.Zero(t, h.starts["b"])
	assert.Equal(t, workflowpb.NodeStatus_COMPLETED, st.Nodes["c"].Status)
	assert.Equal(t, 1, h.starts["c"])
	assert.Equal(t, 1, h.starts["e"])
}

func TestDAGManualWaitsForItsTrigger(t *testing.T) {
	h := newDAGHarness(t)
	a := dagNode("a")
	m := dagNode("m", "a")
	m.TriggerType = workflowpb.TriggerType_MANUAL
	c := dagNode("c", "m")
	h.behave = sleepy(time.Minute, nil)
	start := time.Date(2025, 1, 1, 8, 0, 0, 0, time.UTC)
	var before workflows.DAGRunState
	var unknown, notManual, ok, again *dagUpdate
	h.env.RegisterDelayedCallback(func() {
		before = h.state()
		unknown = h.update(workflows.DAGTriggerUpdate, workflows.DAGTrigger{NodeID: "zzz"})
		notManual = h.update(workflows.DAGTriggerUpdate, workflows.DAGTrigger{NodeID: "c"})
		ok = h.update(workflows.DAGTriggerUpdate, workflows.DAGTrigger{NodeID: "m", By: "ops"})
		again = h.update(workflows.DAGTriggerUpdate, workflows.DAGTrigger{NodeID: "m", By: "ops"})
	}, 3*time.Hour)

	st := h.run(workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, a, m, c)})

	assert.Equal(t, workflows.DAGRunning, before.Status, "waiting for a trigger is not a failure")
	assert.Equal(t, workflowpb.NodeStatus_PENDING, before.Nodes["m"].Status)
	require.Error(t, unknown.rejected)
	require.Error(t, notManual.rejected)
	assert.Contains(t, notManual.rejected.Error(), "not MANUAL")
	require.NoError(t, ok.rejected)
	require.True(t, ok.done)
	require.Error(t, again.rejected, "a node is triggered once")
	assert.Equal(t, workflows.DAGCompleted, st.Status)
	assert.Equal(t, start.Add(3*time.Hour), h.startedAt("m"))
	assert.Equal(t, 1, h.starts["m"])
	assert.Equal(t, 1, h.starts["c"])
}

func TestDAGManualTriggerRefusedBeforeDependencies(t *testing.T) {
	h := newDAGHarness(t)
	a := dagNode("a")
	m := dagNode("m", "a")
	m.TriggerType = workflowpb.TriggerType_MANUAL
	h.behave = sleepy(time.Hour, nil)
	var early *dagUpdate
	h.env.RegisterDelayedCallback(func() {
		early = h.update(workflows.DAGTriggerUpdate, workflows.DAGTrigger{NodeID: "m"})
	}, time.Minute)
	h.env.RegisterDelayedCallback(func() {
		h.update(workflows.DAGTriggerUpdate, workflows.DAGTrigger{NodeID: "m"})
	}, 2*time.Hour)
	st := h.run(workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, a, m)})
	require.Error(t, early.rejected)
	assert.Contains(t, early.rejected.Error(), "dependencies")
	assert.Equal(t, workflows.DAGCompleted, st.Status)
}

func TestDAGEventWaitsForItsSignal(t *testing.T) {
	h := newDAGHarness(t)
	e := dagNode("e")
	e.TriggerType = workflowpb.TriggerType_EVENT
	e.Metadata["event"] = "artifact-ready"
	after := dagNode("after", "e")
	start := time.Date(2025, 1, 1, 8, 0, 0, 0, time.UTC)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(workflows.DAGEventSignal, workflows.DAGEvent{Name: "something-else"})
	}, time.Hour)
	h.env.RegisterDelayedCallback(func() {
		assert.Zero(t, h.starts["e"], "another event does not release the node")
		h.env.SignalWorkflow(workflows.DAGEventSignal, workflows.DAGEvent{Name: "artifact-ready"})
	}, 2*time.Hour)

	st := h.run(workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, e, after)})

	assert.Equal(t, workflows.DAGCompleted, st.Status)
	assert.Equal(t, start.Add(2*time.Hour), h.startedAt("e"))
	assert.Equal(t, 1, h.starts["after"])
}

// TestDAGEventByMessageAppliedOnce: an event a message delivered (DAGEvent.MessageID set) is
// applied once per message. The outbox delivers at least once, and a repeat that came after
// a resume put the EVENT node back to wait must not release it: only a new message does.
func TestDAGEventByMessageAppliedOnce(t *testing.T) {
	h := newDAGHarness(t)
	// a → e (EVENT "approved") → z; z fails its first run, so the run waits open.
	a, z := dagNode("a"), dagNode("z", "e")
	e := dagNode("e", "a")
	e.TriggerType = workflowpb.TriggerType_EVENT
	e.Metadata["event"] = "approved"
	h.behave = func(ctx workflow.Context, node string, in workflows.TaskInput) (workflows.TaskStatus, error) {
		if node == "z" && strings.HasSuffix(in.TaskID, "-1") {
			return workflows.TaskStatus{State: workflows.TaskFailed, Reason: "flaky"}, nil
		}
		return workflows.TaskStatus{State: workflows.TaskCompleted, Result: "{}"}, nil
	}
	first := workflows.DAGEvent{Name: "approved", MessageID: "m-1", By: "approver"}
	var afterRepeat, afterResume workflows.DAGRunState
	var resumed *dagUpdate
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(workflows.DAGEventSignal, first) }, time.Hour)
	h.env.RegisterDelayedCallback(func() {
		// The run waits on z; resuming a puts a, e and z back, e waiting for its event again.
		resumed = h.update(workflows.DAGResumeUpdate, workflows.DAGResume{NodeID: "a"})
	}, 2*time.Hour)
	h.env.RegisterDelayedCallback(func() {
		afterResume = h.state()
		h.env.SignalWorkflow(workflows.DAGEventSignal, first) // the outbox delivers m-1 again
	}, 3*time.Hour)
	h.env.RegisterDelayedCallback(func() {
		afterRepeat = h.state()
		h.env.SignalWorkflow(workflows.DAGEventSignal, workflows.DAGEvent{Name: "approved", MessageID: "m-2", By: "approver"})
	}, 4*time.Hour)

	st := h.run(workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, a, e, z)})

	require.NoError(t, resumed.err)
	assert.Equal(t, workflowpb.NodeStatus_PENDING, afterResume.Nodes["e"].Status)
	assert.Equal(t, workflowpb.NodeStatus_PENDING, afterRepeat.Nodes["e"].Status, "a repeated delivery of m-1 does not release e again")
	assert.False(t, afterRepeat.Nodes["e"].Released)
	assert.Equal(t, workflows.DAGCompleted, st.Status)
	assert.Equal(t, map[string]int{"a": 2, "e": 2, "z": 2}, h.starts)
	var eStarts []time.Time
	for _, ev := range h.log {
		if ev.kind == "start" && ev.node == "e" {
			eStarts = append(eStarts, ev.at.UTC())
		}
	}
	assert.Equal(t, []time.Time{time.Date(2025, 1, 1, 9, 0, 0, 0, time.UTC), time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)}, eStarts,
		"e ran with m-1, then with m-2, not with m-1's repeat")
	assert.Equal(t, []string{"m-1", "m-2"}, st.EventMessages)
}

func TestDAGScheduleWaitsForItsCronTime(t *testing.T) {
	h := newDAGHarness(t)
	a := dagNode("a")
	s := dagNode("s", "a")
	s.TriggerType = workflowpb.TriggerType_SCHEDULE
	s.Metadata["schedule"] = "30 9 * * *"
	var timers []time.Duration
	h.env.SetOnTimerScheduledListener(func(_ string, d time.Duration) { timers = append(timers, d) })

	st := h.run(workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, a, s)})

	assert.Equal(t, workflows.DAGCompleted, st.Status)
	// The run started at 08:00; a finished at once; s ran at the next 09:30.
	assert.Equal(t, time.Date(2025, 1, 1, 9, 30, 0, 0, time.UTC), h.startedAt("s").UTC())
	assert.Contains(t, timers, 90*time.Minute)
	assert.Equal(t, 1, h.starts["s"])
}

func TestDAGBadScheduleFailsTheNode(t *testing.T) {
	h := newDAGHarness(t)
	s := dagNode("s")
	s.TriggerType = workflowpb.TriggerType_SCHEDULE
	s.Metadata["schedule"] = "every tuesday-ish"
	h.env.RegisterDelayedCallback(func() {
		st := h.state()
		assert.Equal(t, workflows.DAGWaiting, st.Status)
		assert.Contains(t, st.Nodes["s"].Error, "schedule")
		h.env.CancelWorkflow()
	}, time.Hour)
	h.env.ExecuteWorkflow(workflows.DAGRun, workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, s)})
	assert.Zero(t, h.starts["s"])
}

func TestDAGRefusesAnInvalidDefinition(t *testing.T) {
	h := newDAGHarness(t)
	h.env.ExecuteWorkflow(workflows.DAGRun, workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, dagNode("a", "b"), dagNode("b", "a"))})
	require.True(t, h.env.IsWorkflowCompleted())
	err := h.env.GetWorkflowError()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "workflow_cycle_detected")
	assert.Empty(t, h.starts)
}

// runToEnd runs the input and every continue-as-new that follows in fresh environments,
// returning the final state and the number of executions.
func (h *dagHarness) runToEnd(in workflows.DAGRunInput) (workflows.DAGRunState, int) {
	h.t.Helper()
	for execs := 1; ; execs++ {
		h.env.ExecuteWorkflow(workflows.DAGRun, in)
		require.True(h.t, h.env.IsWorkflowCompleted())
		err := h.env.GetWorkflowError()
		var can *workflow.ContinueAsNewError
		if errors.As(err, &can) {
			in = workflows.DAGRunInput{}
			require.NoError(h.t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &in))
			require.NotNil(h.t, in.Prior)
			h.reset()
			continue
		}
		require.NoError(h.t, err)
		var st workflows.DAGRunState
		require.NoError(h.t, h.env.GetWorkflowResult(&st))
		return st, execs
	}
}

func TestDAGThousandNodesWithWideFanOutContinuesAsNew(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 child workflows")
	}
	h := newDAGHarness(t)
	// root → 500 wide → join → a chain of 498: 1,000 nodes.
	nodes := []*workflowpb.WorkflowNode{dagNode("root")}
	var wide []string
	for i := range 500 {
		id := fmt.Sprintf("w%03d", i)
		wide = append(wide, id)
		n := dagNode(id, "root")
		n.OutputMapping["v"] = "/w/" + id
		nodes = append(nodes, n)
	}
	nodes = append(nodes, dagNode("join", wide...))
	prev := "join"
	for i := range 498 {
		id := fmt.Sprintf("c%03d", i)
		nodes = append(nodes, dagNode(id, prev))
		prev = id
	}
	require.Len(t, nodes, 1000)
	h.behave = func(_ workflow.Context, node string, _ workflows.TaskInput) (workflows.TaskStatus, error) {
		return workflows.TaskStatus{State: workflows.TaskCompleted, Result: `{"v": "` + node + `"}`}, nil
	}

	st, execs := h.runToEnd(workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, nodes...), ContinueAsNewAfter: 300})

	assert.Equal(t, workflows.DAGCompleted, st.Status)
	// 501 (root and the fan-out in flight when the threshold came), 300, 199.
	assert.Equal(t, 3, execs, "1,000 node attempts at about 300 per execution")
	assert.Equal(t, execs, st.Runs)
	require.Len(t, st.Nodes, 1000)
	for _, n := range nodes {
		id := n.GetNodeId()
		assert.Equal(t, workflowpb.NodeStatus_COMPLETED, st.Nodes[id].Status, id)
		require.Equal(t, 1, h.starts[id], "node %s ran once across the executions", id)
	}
	// Outputs written before a continue-as-new are still in workflow_data at the end.
	var data struct{ W map[string]string }
	require.NoError(t, json.Unmarshal([]byte(st.Data), &data))
	assert.Len(t, data.W, 500)
	assert.Equal(t, "w123", data.W["w123"])
}

func TestDAGContinueAsNewKeepsAFailureWaiting(t *testing.T) {
	h := newDAGHarness(t)
	a, b, c := dagNode("a"), dagNode("b", "a"), dagNode("c", "b")
	b.InputMapping["fixed"] = "/fixed"
	h.behave = failUntilFixed("b")

	// Continue as new after every finished attempt: b's failure is carried over, the run
	// still waits, and a resume in the later execution completes it.
	in := workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, a, b, c), ContinueAsNewAfter: 1}
	h.env.ExecuteWorkflow(workflows.DAGRun, in)
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, h.env.GetWorkflowError(), &can)
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &in))
	assert.Equal(t, workflowpb.NodeStatus_COMPLETED, in.Prior.Nodes["a"].Status)

	h.reset()
	h.env.ExecuteWorkflow(workflows.DAGRun, in)
	require.ErrorAs(t, h.env.GetWorkflowError(), &can)
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &in))
	assert.Equal(t, workflowpb.NodeStatus_FAILED, in.Prior.Nodes["b"].Status)
	assert.Equal(t, workflows.DAGWaiting, in.Prior.Status)

	h.reset()
	var resumed *dagUpdate
	h.env.RegisterDelayedCallback(func() {
		assert.Equal(t, workflows.DAGWaiting, h.state().Status)
		resumed = h.update(workflows.DAGResumeUpdate, workflows.DAGResume{NodeID: "b", Data: `{"fixed": true}`})
	}, time.Hour)
	in.ContinueAsNewAfter = 0
	st := h.run(in)
	require.True(t, resumed.done)
	assert.Equal(t, workflows.DAGCompleted, st.Status)
	assert.Equal(t, 3, st.Runs)
	assert.Equal(t, map[string]int{"a": 1, "b": 2, "c": 1}, h.starts)
}

func TestDAGResumeOfAClosedRunViaPrior(t *testing.T) {
	h := newDAGHarness(t)
	a, b, c := dagNode("a"), dagNode("b", "a"), dagNode("c", "a")
	d := dagNode("d", "b", "c")
	b.InputMapping["n"] = "/n"
	b.OutputMapping["/n"] = "/b"
	h.behave = sleepy(time.Minute, func(node string, in workflows.TaskInput) string {
		if node == "b" {
			return `{"n": ` + string(in.Params[len(`{"n":`):len(in.Params)-1]) + `}`
		}
		return "{}"
	})
	def := dagDef(t, a, b, c, d)
	first := h.run(workflows.DAGRunInput{WorkflowID: "wf", Definition: def, Data: `{"n": 1}`})
	require.Equal(t, workflows.DAGCompleted, first.Status)
	assert.JSONEq(t, `{"n": 1, "b": 1}`, first.Data)

	// The run closed; ResumeWorkflow starts a new execution from its last state.
	h.reset()
	second := h.run(workflows.DAGRunInput{WorkflowID: "wf", Definition: def, Prior: &first,
		Resume: &workflows.DAGResume{NodeID: "b", Data: `{"n": 2}`, By: "ops"}})

	assert.Equal(t, workflows.DAGCompleted, second.Status)
	assert.Equal(t, 2, second.Runs)
	assert.Equal(t, first.StartedAt, second.StartedAt)
	assert.JSONEq(t, `{"n": 2, "b": 2}`, second.Data)
	assert.Equal(t, map[string]int{"a": 1, "b": 2, "c": 1, "d": 2}, h.starts)
	assert.Equal(t, "dag-wf-b-2", second.Nodes["b"].TaskID)
	assert.Equal(t, first.Nodes["a"].CompletedAt, second.Nodes["a"].CompletedAt, "a is untouched")

	// A resume naming an unknown node fails the new execution before anything runs.
	h.reset()
	h.env.ExecuteWorkflow(workflows.DAGRun, workflows.DAGRunInput{WorkflowID: "wf", Definition: def, Prior: &second, Resume: &workflows.DAGResume{NodeID: "zz"}})
	require.Error(t, h.env.GetWorkflowError())
	assert.Contains(t, h.env.GetWorkflowError().Error(), "no node")
}

func TestDAGLargeOutputStoredAsArtifact(t *testing.T) {
	h := newDAGHarness(t)
	a := dagNode("a")
	a.OutputMapping["blob"] = "/blob"
	big := strings.Repeat("x", workflows.DAGLargeOutput)
	h.behave = sleepy(time.Minute, func(string, workflows.TaskInput) string { return `{"blob": "` + big + `"}` })
	var acts *activities.Activities
	var stored []activities.DAGOutputInput
	h.env.OnActivity(acts.StoreDAGOutput, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.DAGOutputInput) (string, error) {
		stored = append(stored, in)
		return activities.DAGOutputRef(in.WorkflowID, in.NodeID, in.Attempt), nil
	})

	st := h.run(workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, a)})

	require.Len(t, stored, 1)
	assert.Equal(t, "a", stored[0].NodeID)
	assert.Equal(t, 1, stored[0].Attempt)
	assert.Equal(t, "artifact:dag/wf/node-output/a/1", st.Nodes["a"].Output)
	assert.Contains(t, st.Data, big, "the mapped value is still in workflow_data")
}

func TestDAGNonJSONResultBecomesAString(t *testing.T) {
	h := newDAGHarness(t)
	a := dagNode("a")
	a.OutputMapping[""] = "/a"
	h.behave = sleepy(time.Minute, func(string, workflows.TaskInput) string { return "plain text" })
	st := h.run(workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, a)})
	assert.Equal(t, `"plain text"`, st.Nodes["a"].Output)
	assert.JSONEq(t, `{"a": "plain text"}`, st.Data)
}

func TestDAGTaskID(t *testing.T) {
	assert.Equal(t, "dag-wf-build-1", workflows.DAGTaskID("wf", "build", 1))
	assert.Equal(t, "dag-my_wf-a_b-2", workflows.DAGTaskID("my wf", "a\tb", 2))
	long := workflows.DAGTaskID(strings.Repeat("w", 150), strings.Repeat("n", 150), 7)
	other := workflows.DAGTaskID(strings.Repeat("w", 150), strings.Repeat("n", 149)+"m", 7)
	assert.LessOrEqual(t, len(long), 200)
	assert.NotEqual(t, long, other, "distinct long ids stay distinct")
	assert.True(t, strings.HasSuffix(long, "-7"))
}

func TestDAGStartOptions(t *testing.T) {
	o := workflows.DAGStartOptions("wf", "q")
	assert.Equal(t, "dag/wf", o.ID)
	assert.Equal(t, "q", o.TaskQueue)
	assert.True(t, o.WorkflowExecutionErrorWhenAlreadyStarted)
	v, ok := o.TypedSearchAttributes.GetKeyword(workflows.DAGStateKey)
	assert.True(t, ok)
	assert.Equal(t, workflows.DAGRunning, v)
	assert.Contains(t, workflows.SearchAttributeFlags(), "SW4RMDAGState=Keyword")
}

// TestDAGSkippedDependencySkipsDependents: under DAGRevisionSpecDependencies a node runs only
// once every dependency is COMPLETED (§17.7). A node with a SKIPPED dependency is SKIPPED in
// turn, naming the dependency, and so are its own dependents; a node whose metadata
// after_skipped is "run" runs all the same; nodes off the skipped branch are untouched.
func TestDAGSkippedDependencySkipsDependents(t *testing.T) {
	h := newDAGHarness(t)
	a := dagNode("a")
	b := dagNode("b", "a")
	b.Metadata["skip_if"] = "/flags/skip_b"
	c := dagNode("c", "b")
	d := dagNode("d", "c")
	r := dagNode("r", "b")
	r.Metadata["after_skipped"] = "run"
	e := dagNode("e", "a")

	st := h.run(workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, a, b, c, d, r, e), Data: `{"flags": {"skip_b": true}}`,
		Revision: workflows.DAGRevisionCurrent})

	assert.Equal(t, workflows.DAGCompleted, st.Status)
	for _, id := range []string{"b", "c", "d"} {
		assert.Equal(t, workflowpb.NodeStatus_SKIPPED, st.Nodes[id].Status, id)
		assert.Zero(t, h.starts[id], id)
	}
	assert.Equal(t, workflowpb.NodeStatus_COMPLETED, st.Nodes["r"].Status)
	assert.Equal(t, 1, h.starts["r"])
	assert.Equal(t, 1, h.starts["e"])

	// Every transition reached the audit, with why each node was skipped.
	byNode := map[string][]string{}
	reasons := map[string]string{}
	for _, tr := range h.audited {
		byNode[tr.NodeID] = append(byNode[tr.NodeID], tr.From+">"+tr.To)
		if tr.To == "SKIPPED" {
			reasons[tr.NodeID] = tr.Reason
		}
	}
	assert.Equal(t, []string{"PENDING>READY", "READY>RUNNING", "RUNNING>COMPLETED"}, byNode["a"])
	assert.Equal(t, []string{"PENDING>SKIPPED"}, byNode["b"])
	assert.Equal(t, []string{"PENDING>SKIPPED"}, byNode["c"])
	assert.Equal(t, []string{"PENDING>READY", "READY>RUNNING", "RUNNING>COMPLETED"}, byNode["r"])
	assert.Contains(t, reasons["b"], "skip_if /flags/skip_b")
	assert.Contains(t, reasons["c"], "dependency b was SKIPPED")
	assert.Contains(t, reasons["d"], "dependency c was SKIPPED")
}

// TestDAGManualNodeIsReadyUntilTriggered: under DAGRevisionSpecDependencies a MANUAL node
// whose dependencies are COMPLETED is READY (§17.7: eligible for execution) until its
// trigger, then RUNNING; a failed node's transition carries its error.
func TestDAGManualNodeIsReadyUntilTriggered(t *testing.T) {
	h := newDAGHarness(t)
	a := dagNode("a")
	m := dagNode("m", "a")
	m.TriggerType = workflowpb.TriggerType_MANUAL
	f := dagNode("f", "m")
	h.behave = func(ctx workflow.Context, node string, _ workflows.TaskInput) (workflows.TaskStatus, error) {
		if node == "f" {
			return workflows.TaskStatus{State: workflows.TaskFailed, Reason: "broken"}, nil
		}
		return workflows.TaskStatus{State: workflows.TaskCompleted, Result: "{}"}, workflow.Sleep(ctx, time.Minute)
	}
	var before workflows.DAGRunState
	var trig *dagUpdate
	h.env.RegisterDelayedCallback(func() {
		before = h.state()
		trig = h.update(workflows.DAGTriggerUpdate, workflows.DAGTrigger{NodeID: "m", By: "ops"})
	}, time.Hour)
	h.env.ExecuteWorkflow(workflows.DAGRun, workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, a, m, f), Revision: workflows.DAGRevisionCurrent})
	require.True(t, h.env.IsWorkflowCompleted())

	assert.Equal(t, workflowpb.NodeStatus_READY, before.Nodes["m"].Status)
	require.NotNil(t, trig)
	require.NoError(t, trig.rejected)
	require.NoError(t, trig.err)
	var failed activities.DAGTransition
	for _, tr := range h.audited {
		if tr.NodeID == "f" && tr.To == "FAILED" {
			failed = tr
		}
	}
	assert.Equal(t, "RUNNING", failed.From)
	assert.Contains(t, failed.Reason, "broken")
	assert.Equal(t, "dag-wf-f-1", failed.TaskID)
}

// TestDAGNodeFailsOnEitherFormOfATaskFailure: a task that FAILED fails its workflow with its
// status as the error's details (TaskOutcome), and a run recorded before completed with the
// FAILED status: either way the node FAILS once, with the same reason, and the run waits —
// no Temporal retry of the child, no failure of the run.
func TestDAGNodeFailsOnEitherFormOfATaskFailure(t *testing.T) {
	reasons := map[bool]string{}
	for _, asError := range []bool{false, true} {
		h := newDAGHarness(t)
		h.behave = func(_ workflow.Context, node string, in workflows.TaskInput) (workflows.TaskStatus, error) {
			if node != "b" {
				return workflows.TaskStatus{State: workflows.TaskCompleted, Result: "{}"}, nil
			}
			st := workflows.TaskStatus{TaskID: in.TaskID, AgentID: in.AgentID, State: workflows.TaskFailed,
				Reason: "tool_error: the build broke", ErrorCode: commonpb.ErrorCode_INTERNAL_ERROR}
			if asError {
				return st, temporal.NewNonRetryableApplicationError("task "+in.TaskID+" FAILED", workflows.TaskErrorType(st), nil, st)
			}
			return st, nil
		}
		var waiting workflows.DAGRunState
		h.env.RegisterDelayedCallback(func() {
			waiting = h.state()
			h.env.CancelWorkflow()
		}, time.Hour)
		h.env.ExecuteWorkflow(workflows.DAGRun, workflows.DAGRunInput{WorkflowID: "wf", Definition: dagDef(t, dagNode("a"), dagNode("b", "a"), dagNode("c", "b"))})
		assert.Equal(t, workflows.DAGWaiting, waiting.Status, "asError=%v", asError)
		assert.Equal(t, workflowpb.NodeStatus_FAILED, waiting.Nodes["b"].Status)
		assert.Equal(t, workflowpb.NodeStatus_PENDING, waiting.Nodes["c"].Status)
		assert.Equal(t, 1, h.starts["b"], "the failed task is not started again")
		reasons[asError] = waiting.Nodes["b"].Error
	}
	assert.Equal(t, "task dag-wf-b-1 FAILED: tool_error: the build broke", reasons[true])
	assert.Equal(t, reasons[false], reasons[true], "both forms give the node the same reason")
}
