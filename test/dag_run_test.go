package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// pipelineAgents are SDK agents that serve DAG nodes as tasks and count what they ran, by
// node (the node's id is the part of the task id between the workflow id and the attempt).
type pipelineAgents struct {
	mu   sync.Mutex
	runs map[string]int
	// failOnce names nodes whose first run fails.
	failOnce map[string]bool
}

func (p *pipelineAgents) count(node string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs[node]
}

// serve registers an agent named name that answers every task with {"by": name, "input":
// params}, failing the first run of the nodes in failOnce.
func (p *pipelineAgents) serve(t *testing.T, sys *system, name, workflowID string) string {
	t.Helper()
	a := dialAgent(t, sys, name)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Serve(ctx, func(_ context.Context, run *sdk.TaskRun) ([]byte, error) {
			node := nodeOfTask(run.Task().ID, workflowID)
			p.mu.Lock()
			p.runs[node]++
			n := p.runs[node]
			p.mu.Unlock()
			if p.failOnce[node] && n == 1 {
				return nil, errors.New("flaky test suite")
			}
			var in any
			_ = json.Unmarshal(run.Task().Params, &in)
			return json.Marshal(map[string]any{"by": name, "node": node, "input": in})
		}, &sdk.ServeOptions{Logf: t.Logf})
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)
	return a.ID()
}

// nodeOfTask recovers the node id from a DAG task id "dag-<workflow>-<node>-<attempt>".
func nodeOfTask(taskID, workflowID string) string {
	s := strings.TrimPrefix(taskID, "dag-"+workflowID+"-")
	if i := strings.LastIndex(s, "-"); i >= 0 {
		s = s[:i]
	}
	return s
}

// diamond is build → {test, lint} → package, with mapped data.
func diamond(id string, agents map[string]string) *workflowpb.WorkflowDefinition {
	node := func(nid, agent string, deps []string, in, out map[string]string) *workflowpb.WorkflowNode {
		return &workflowpb.WorkflowNode{NodeId: nid, AgentId: agent, Dependencies: deps, TriggerType: workflowpb.TriggerType_DEPENDENCY,
			InputMapping: in, OutputMapping: out}
	}
	return &workflowpb.WorkflowDefinition{WorkflowId: id, Nodes: map[string]*workflowpb.WorkflowNode{
		"build":   node("build", agents["build"], nil, map[string]string{"version": "/version"}, map[string]string{"/input/version": "/build/version"}),
		"test":    node("test", agents["test"], []string{"build"}, map[string]string{"built": "/build/version"}, map[string]string{"/by": "/test/by"}),
		"lint":    node("lint", agents["lint"], []string{"build"}, map[string]string{"built": "/build/version"}, map[string]string{"/by": "/lint/by"}),
		"package": node("package", agents["package"], []string{"test", "lint"}, map[string]string{"tested": "/test/by", "linted": "/lint/by"}, map[string]string{"/input": "/package"}),
	}}
}

// waitRun polls GetWorkflowState until the run's status is want.
func waitRun(t *testing.T, wc workflowpb.WorkflowServiceClient, id, want string) *workflowpb.WorkflowState {
	t.Helper()
	var st *workflowpb.WorkflowState
	require.Eventually(t, func() bool {
		resp, err := wc.GetWorkflowState(context.Background(), &workflowpb.GetWorkflowStateRequest{WorkflowId: id})
		if err != nil {
			return false
		}
		st = resp.GetState()
		return st.GetMetadata()["sw4rm.run_status"] == want
	}, 60*time.Second, 100*time.Millisecond, "run %s never reached %s (last: %v)", id, want, st.GetMetadata())
	return st
}

// TestDAGRunDiamondFailResume: on both stores, a diamond DAG of four SDK agents runs with
// mapped data; a node that fails stops its dependents and the run waits (open); ResumeWorkflow
// from that node completes the run, and every completed node ran exactly once.
func TestDAGRunDiamondFailResume(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			id := uniq(t, "pipeline")
			p := &pipelineAgents{runs: map[string]int{}, failOnce: map[string]bool{"test": true}}
			agents := map[string]string{}
			for _, n := range []string{"build", "test", "lint", "package"} {
				agents[n] = p.serve(t, sys, n, id)
			}
			wc := workflowpb.NewWorkflowServiceClient(dialBenchT(t, sys))
			_, err := wc.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: diamond(id, agents)})
			require.NoError(t, err)
			_, err = wc.GetWorkflowState(ctx, &workflowpb.GetWorkflowStateRequest{WorkflowId: id})
			assert.Equal(t, codes.NotFound, status.Code(err), "no run yet: %v", err)

			resp, err := wc.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: id, WorkflowData: `{"version":"1.4.2"}`})
			require.NoError(t, err)
			assert.True(t, resp.GetSuccess())
			_, err = wc.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: id})
			assert.Equal(t, codes.AlreadyExists, status.Code(err), "one open run per workflow: %v", err)

			st := waitRun(t, wc, id, workflows.DAGWaiting)
			assert.Equal(t, workflowpb.NodeStatus_FAILED, st.GetNodeStates()["test"].GetStatus())
			assert.NotEmpty(t, st.GetNodeStates()["test"].GetError())
			assert.Equal(t, workflowpb.NodeStatus_PENDING, st.GetNodeStates()["package"].GetStatus(), "a failed node's dependents do not run")
			assert.Equal(t, workflowpb.NodeStatus_COMPLETED, st.GetNodeStates()["lint"].GetStatus())
			assert.Zero(t, p.count("package"))
			// The Temporal UI shows the failed node's task failed, labelled with its node.
			failed := workflows.TaskWorkflowID(workflows.DAGTaskID(id, "test", 1))
			d, err := sys.app.Temporal().DescribeWorkflowExecution(ctx, failed, "")
			require.NoError(t, err)
			assert.Equal(t, enums.WORKFLOW_EXECUTION_STATUS_FAILED, d.GetWorkflowExecutionInfo().GetStatus(), "a FAILED task fails its workflow")
			var summary string
			require.NoError(t, converter.GetDefaultDataConverter().FromPayload(d.GetExecutionConfig().GetUserMetadata().GetSummary(), &summary))
			assert.Equal(t, "DAG "+id+" node test on agent "+agents["test"]+", attempt 1", summary)
			recordHistory(t, sys.app.Temporal(), failed, "task_failed_dag_node_"+kind)

			_, err = wc.ResumeWorkflow(ctx, &workflowpb.ResumeWorkflowRequest{WorkflowId: id, NodeId: "nope"})
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "an unknown node: %v", err)
			_, err = wc.ResumeWorkflow(ctx, &workflowpb.ResumeWorkflowRequest{WorkflowId: id, NodeId: "test"})
			require.NoError(t, err)
			st = waitRun(t, wc, id, workflows.DAGCompleted)
			for _, n := range []string{"build", "test", "lint", "package"} {
				assert.Equal(t, workflowpb.NodeStatus_COMPLETED, st.GetNodeStates()[n].GetStatus(), n)
			}
			assert.Equal(t, map[string]int{"build": 1, "test": 2, "lint": 1, "package": 1}, p.runs, "completed nodes ran exactly once")
			var data map[string]any
			require.NoError(t, json.Unmarshal([]byte(st.GetWorkflowData()), &data))
			assert.Equal(t, map[string]any{"version": "1.4.2"}, data["build"], "build's output mapped into workflow_data")
			assert.Equal(t, map[string]any{"tested": "test", "linted": "lint"}, data["package"], "package saw both branches' outputs")

			// A closed run can be resumed too: package runs again, nothing else.
			_, err = wc.ResumeWorkflow(ctx, &workflowpb.ResumeWorkflowRequest{WorkflowId: id, NodeId: "package"})
			require.NoError(t, err)
			require.Eventually(t, func() bool { return p.count("package") == 2 }, 30*time.Second, 100*time.Millisecond)
			waitRun(t, wc, id, workflows.DAGCompleted)
			assert.Equal(t, map[string]int{"build": 1, "test": 2, "lint": 1, "package": 2}, p.runs)
			// The picture of the run shows its node states (`sw4rm dag show`).
			out, err := runCLIArgs(t, sys, "", "dag", "show", id, "--server", sys.app.GRPCAddr())
			require.NoError(t, err, out)
			assert.Contains(t, out, "package<br/>agent: "+agents["package"]+"<br/>COMPLETED")
			recordHistory(t, sys.app.Temporal(), workflows.DAGWorkflowID(id), "dag_run_"+kind)
			// The same run as this code records it: readable payloads, summaries, a failed child.
			recordHistory(t, sys.app.Temporal(), workflows.DAGWorkflowID(id), "dag_run_readable_"+kind)
		})
	}
}

// TestDAGRunManualTrigger: a MANUAL node waits for its authenticated trigger
// (ResumeWorkflow with metadata action=trigger), then runs.
func TestDAGRunManualTrigger(t *testing.T) {
	sys := start(t, newConfig(t, "memory"))
	ctx := context.Background()
	id := uniq(t, "manual")
	p := &pipelineAgents{runs: map[string]int{}}
	ag := p.serve(t, sys, "worker", id)
	def := &workflowpb.WorkflowDefinition{WorkflowId: id, Nodes: map[string]*workflowpb.WorkflowNode{
		"prepare": {NodeId: "prepare", AgentId: ag, TriggerType: workflowpb.TriggerType_DEPENDENCY},
		"release": {NodeId: "release", AgentId: ag, Dependencies: []string{"prepare"}, TriggerType: workflowpb.TriggerType_MANUAL},
	}}
	wc := workflowpb.NewWorkflowServiceClient(dialBenchT(t, sys))
	_, err := wc.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: def})
	require.NoError(t, err)
	_, err = wc.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: id})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p.count("prepare") == 1 }, 30*time.Second, 100*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	assert.Zero(t, p.count("release"), "a MANUAL node waits for its trigger")
	_, err = wc.ResumeWorkflow(ctx, &workflowpb.ResumeWorkflowRequest{WorkflowId: id, NodeId: "prepare", Metadata: map[string]string{"action": "trigger"}})
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "only a MANUAL node is triggered: %v", err)
	_, err = wc.ResumeWorkflow(ctx, &workflowpb.ResumeWorkflowRequest{WorkflowId: id, NodeId: "release", Metadata: map[string]string{"action": "trigger"}})
	require.NoError(t, err)
	waitRun(t, wc, id, workflows.DAGCompleted)
	assert.Equal(t, 1, p.count("release"))
}

// dialBenchT is a plain connection to the system for tests.
func dialBenchT(t *testing.T, sys *system) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(sys.app.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestDAGRunEventByMessage: on both stores, an EVENT node waiting for "approved" is released
// by a message on the run's correlation (dag/<workflow_id>) carrying {"event": "approved"},
// sent by an agent to the node's agent like any message (§17.7). A message naming another
// event does not release it, and a malformed event is refused with validation_error. The
// releasing message is sent while sw4rm cannot reach Temporal: it is admitted, its event
// waits in the outbox, and the node runs once Temporal is back. A message for the run after
// it closed is admitted, releases nothing and is audited as workflow.event_unclaimed.
func TestDAGRunEventByMessage(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, proxy, _ := startAllBehindProxy(t, kind)
			ctx := context.Background()
			id := uniq(t, "approval")
			p := &pipelineAgents{runs: map[string]int{}}
			worker := p.serve(t, sys, "worker", id)
			approver := dialAgent(t, sys, "approver")
			def := &workflowpb.WorkflowDefinition{WorkflowId: id, Nodes: map[string]*workflowpb.WorkflowNode{
				"prepare": {NodeId: "prepare", AgentId: worker},
				"release": {NodeId: "release", AgentId: worker, Dependencies: []string{"prepare"}, TriggerType: workflowpb.TriggerType_EVENT,
					Metadata: map[string]string{"event": "approved"}, OutputMapping: map[string]string{"/node": "/released_by"}},
			}}
			wc := workflowpb.NewWorkflowServiceClient(dialBenchT(t, sys))
			_, err := wc.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: def})
			require.NoError(t, err)
			_, err = wc.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: id})
			require.NoError(t, err)
			require.Eventually(t, func() bool { return p.count("prepare") == 1 }, 30*time.Second, 100*time.Millisecond)

			send := func(payload string) (*commonpb.Envelope, error) {
				return approver.Send(ctx, sdk.Message{To: worker, CorrelationID: workflows.DAGWorkflowID(id), Payload: []byte(payload)})
			}
			_, err = send(`{"event":"rejected","reason":"not yet"}`)
			require.NoError(t, err, "a message naming another event is admitted")
			_, err = send(`{"event":5}`)
			var rej *sdk.RejectedError
			require.ErrorAs(t, err, &rej, "a malformed event is refused")
			assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, rej.Code)
			time.Sleep(time.Second)
			st := waitRun(t, wc, id, workflows.DAGRunning)
			assert.Equal(t, workflowpb.NodeStatus_READY, st.GetNodeStates()["release"].GetStatus(), "another event does not release the node: it stays READY")
			assert.Zero(t, p.count("release"))

			// Temporal goes away; the approval is admitted all the same and waits in the outbox.
			proxy.cut(unreachable)
			approval, err := send(`{"event":"approved","by":"release manager"}`)
			require.NoError(t, err, "the approval is admitted while Temporal is unreachable")
			pending, err := sys.app.Store().Outbox().Pending(ctx, 100)
			require.NoError(t, err)
			assert.True(t, slices.ContainsFunc(pending, func(h store.OutboxEntry) bool {
				return h.Kind == workflows.OutboxDAGEvent && strings.Contains(string(h.Payload), approval.GetMessageId())
			}), "the event is in the outbox while Temporal is away: %v", pending)
			time.Sleep(4 * time.Second)
			assert.Zero(t, p.count("release"))
			proxy.restore()

			st = waitRun(t, wc, id, workflows.DAGCompleted)
			assert.Equal(t, workflowpb.NodeStatus_COMPLETED, st.GetNodeStates()["release"].GetStatus())
			assert.JSONEq(t, `{"released_by":"release"}`, st.GetWorkflowData())
			assert.Equal(t, map[string]int{"prepare": 1, "release": 1}, p.runs)
			var evs []store.Event
			require.Eventually(t, func() bool {
				evs, err = sys.app.Store().Audit().List(ctx, store.AuditFilter{MessageID: approval.GetMessageId(), TypePrefix: "workflow.event_sent"})
				return err == nil && len(evs) == 1
			}, 10*time.Second, 100*time.Millisecond, "the event is audited on the run's correlation")
			assert.Equal(t, workflows.DAGWorkflowID(id), evs[0].CorrelationID)
			assert.Equal(t, approver.ID(), evs[0].Actor)

			// The run has closed: another approval is admitted and releases nothing.
			late, err := send(`{"event":"approved"}`)
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				evs, err := sys.app.Store().Audit().List(ctx, store.AuditFilter{MessageID: late.GetMessageId(), TypePrefix: "workflow.event_unclaimed"})
				return err == nil && len(evs) == 1
			}, 30*time.Second, 100*time.Millisecond, "an event for a closed run is audited as unclaimed")
			assert.Equal(t, map[string]int{"prepare": 1, "release": 1}, p.runs)
		})
	}
}

// TestDAGFanOutRaisesNoHITL (#29 item 1): on both stores, twenty sibling nodes on twenty
// agents run in parallel with the default node scope and complete without a single HITL
// invocation — siblings of one run are independent, so admission must not score their scopes
// as a conflict (they once shared words of a free-text scope and each waited for an operator).
func TestDAGFanOutRaisesNoHITL(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			id := uniq(t, "fanout")
			p := &pipelineAgents{runs: map[string]int{}}
			nodes := map[string]*workflowpb.WorkflowNode{
				"root": {NodeId: "root", AgentId: p.serve(t, sys, "root", id), TriggerType: workflowpb.TriggerType_DEPENDENCY},
			}
			for i := range 20 {
				nid := fmt.Sprintf("leaf%02d", i)
				nodes[nid] = &workflowpb.WorkflowNode{NodeId: nid, AgentId: p.serve(t, sys, nid, id), Dependencies: []string{"root"},
					TriggerType: workflowpb.TriggerType_DEPENDENCY}
			}
			wc := workflowpb.NewWorkflowServiceClient(dialBenchT(t, sys))
			_, err := wc.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: &workflowpb.WorkflowDefinition{WorkflowId: id, Nodes: nodes}})
			require.NoError(t, err)
			_, err = wc.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: id})
			require.NoError(t, err)
			st := waitRun(t, wc, id, workflows.DAGCompleted)
			for nid := range nodes {
				assert.Equal(t, workflowpb.NodeStatus_COMPLETED, st.GetNodeStates()[nid].GetStatus(), nid)
				assert.Equal(t, 1, p.count(nid), nid)
			}
			hitl, err := sys.app.Store().HITL().ListInvocations(ctx, store.HITLFilter{})
			require.NoError(t, err)
			raised := make([]string, len(hitl))
			for i, h := range hitl {
				raised[i] = h.ReasonType + " for " + h.CorrelationID
			}
			assert.Empty(t, raised, "no sibling waited on a human")
		})
	}
}

// TestDAGSkippedDependencyIsNotRun: on both stores, a node runs only once every dependency is
// COMPLETED (§17.7). A node whose dependency was SKIPPED is SKIPPED in turn and never reaches
// its agent, unless its metadata after_skipped is "run"; the run completes. Every node
// transition, with why a node was skipped, is in the audit log on the run's correlation id
// (§19).
func TestDAGSkippedDependencyIsNotRun(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			ctx := context.Background()
			id := uniq(t, "skips")
			p := &pipelineAgents{runs: map[string]int{}}
			ag := p.serve(t, sys, "worker", id)
			node := func(nid string, deps ...string) *workflowpb.WorkflowNode {
				return &workflowpb.WorkflowNode{NodeId: nid, AgentId: ag, Dependencies: deps, TriggerType: workflowpb.TriggerType_DEPENDENCY,
					Metadata: map[string]string{}}
			}
			nodes := map[string]*workflowpb.WorkflowNode{
				"fetch": node("fetch"), "lint": node("lint", "fetch"), "fix": node("fix", "lint"),
				"report": node("report", "lint"), "build": node("build", "fetch"),
			}
			nodes["lint"].Metadata["skip_if"] = "/skip_lint"
			nodes["report"].Metadata["after_skipped"] = "run"
			wc := workflowpb.NewWorkflowServiceClient(dialBenchT(t, sys))
			_, err := wc.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: &workflowpb.WorkflowDefinition{WorkflowId: id, Nodes: nodes}})
			require.NoError(t, err)
			_, err = wc.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: id, WorkflowData: `{"skip_lint": true}`})
			require.NoError(t, err)
			st := waitRun(t, wc, id, workflows.DAGCompleted)
			want := map[string]workflowpb.NodeStatus{"fetch": workflowpb.NodeStatus_COMPLETED, "lint": workflowpb.NodeStatus_SKIPPED,
				"fix": workflowpb.NodeStatus_SKIPPED, "report": workflowpb.NodeStatus_COMPLETED, "build": workflowpb.NodeStatus_COMPLETED}
			for nid, s := range want {
				assert.Equal(t, s, st.GetNodeStates()[nid].GetStatus(), nid)
			}
			assert.Zero(t, p.count("fix"), "a node whose dependency was SKIPPED never runs")
			assert.Equal(t, 1, p.count("report"), "after_skipped run lets it run")

			var seen map[string][]string
			var fixReason string
			require.Eventually(t, func() bool { // audit rows are written asynchronously
				evs, err := sys.app.Store().Audit().List(ctx, store.AuditFilter{CorrelationID: "dag/" + id, TypePrefix: "dag.node."})
				if err != nil {
					return false
				}
				seen = map[string][]string{}
				for _, e := range evs {
					var d struct {
						NodeID string `json:"node_id"`
						Reason string `json:"reason"`
					}
					_ = json.Unmarshal(e.Details, &d)
					seen[d.NodeID] = append(seen[d.NodeID], strings.TrimPrefix(e.Type, "dag.node."))
					if d.NodeID == "fix" {
						fixReason = d.Reason
					}
				}
				return len(seen["report"]) == 3 && len(seen["build"]) == 3 && len(seen["fix"]) == 1
			}, 10*time.Second, 20*time.Millisecond, "transitions audited: %v", seen)
			assert.Equal(t, []string{"ready", "running", "completed"}, seen["fetch"])
			assert.Equal(t, []string{"skipped"}, seen["lint"])
			assert.Equal(t, []string{"skipped"}, seen["fix"])
			assert.Contains(t, fixReason, "dependency lint was SKIPPED")
		})
	}
}
