package test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"

	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// thousandNodes is root → 500-wide fan-out → join → a chain of 498: 1,000 nodes. The fan's
// nodes write /fan/<node>, the chain's each overwrite /chain (each after the one before,
// so the writes are ordered) and read the previous one's value: workflow_data and every
// node's input stay small, as a real pipeline's would.
func thousandNodes(id string, agents []string) *workflowpb.WorkflowDefinition {
	nodes := map[string]*workflowpb.WorkflowNode{}
	i := 0
	add := func(nid string, deps []string, in map[string]string, target string) {
		nodes[nid] = &workflowpb.WorkflowNode{NodeId: nid, AgentId: agents[i%len(agents)], Dependencies: deps,
			InputMapping: in, OutputMapping: map[string]string{"/node": target}}
		i++
	}
	add("root", nil, map[string]string{}, "/root")
	fan := make([]string, 0, 500)
	for n := range 500 {
		nid := fmt.Sprintf("fan-%03d", n)
		fan = append(fan, nid)
		add(nid, []string{"root"}, map[string]string{"root": "/root"}, "/fan/"+nid)
	}
	add("join", fan, map[string]string{"root": "/root"}, "/chain")
	prev := "join"
	for n := range 498 {
		nid := fmt.Sprintf("chain-%03d", n)
		add(nid, []string{prev}, map[string]string{"prev": "/chain"}, "/chain")
		prev = nid
	}
	return &workflowpb.WorkflowDefinition{WorkflowId: id, Nodes: nodes}
}

// TestDAGRunThousandNodes: a 1,000-node DAG with a 500-wide fan-out runs to completion over
// gRPC with SDK agents — every node COMPLETED, each run exactly once (counted by the agents),
// every output mapped — and continues as new on the way (its history passes the length at
// which Temporal suggests it), which the final execution's first history event proves.
//
// PostgreSQL only: nodes run as whole tasks, 11–25 a second on a 2-core machine, so the
// run takes 45–90 s (docs/dag.md, "Scale"); the memory store's runs are covered by the
// smaller tests, and PostgreSQL is the production store. Not under the race detector, which
// makes the sw4rm this test runs in-process several times slower: `make test` runs it once
// more without it (`make test-scale`), and the race-prone paths are those of the smaller DAG
// tests, which run under it.
func TestDAGRunThousandNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("a 1,000-node run takes minutes")
	}
	if raceEnabled {
		t.Skip("a 1,000-node run under the race detector takes too long; make test-scale runs it without")
	}
	sys := start(t, newConfig(t, "postgres"))
	ctx := context.Background()
	id := uniq(t, "thousand")
	p := &pipelineAgents{runs: map[string]int{}}
	// An agent runs one task at a time: twenty agents keep the 500-wide fan-out from waiting on
	// the agents rather than on the system.
	agents := make([]string, 20)
	for n := range agents {
		agents[n] = p.serve(t, sys, fmt.Sprintf("node-%02d", n), id)
	}
	def := thousandNodes(id, agents)
	require.Len(t, def.GetNodes(), 1000)
	wc := workflowpb.NewWorkflowServiceClient(dialBenchT(t, sys))
	_, err := wc.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: def})
	require.NoError(t, err)

	began := time.Now()
	_, err = wc.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: id})
	require.NoError(t, err)
	var st *workflowpb.WorkflowState
	for deadline := began.Add(6 * time.Minute); ; time.Sleep(time.Second) {
		resp, err := wc.GetWorkflowState(ctx, &workflowpb.GetWorkflowStateRequest{WorkflowId: id})
		if err == nil {
			st = resp.GetState()
			if st.GetMetadata()["sw4rm.run_status"] != workflows.DAGRunning {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run did not finish within 6 minutes: %d nodes COMPLETED (last error: %v)", countNodes(st, workflowpb.NodeStatus_COMPLETED), err)
		}
	}
	t.Logf("1,000-node run: %s from StartWorkflow to COMPLETED; root and fan-out %s, join %s, chain of 498 %s",
		time.Since(began).Round(100*time.Millisecond),
		phase(st, "root", "join", true), phase(st, "join", "join", false), phase(st, "chain-000", "chain-497", false))

	require.Equal(t, workflows.DAGCompleted, st.GetMetadata()["sw4rm.run_status"])
	assert.Equal(t, 1000, countNodes(st, workflowpb.NodeStatus_COMPLETED), "every node COMPLETED")
	p.mu.Lock()
	ranTwice, ran := 0, len(p.runs)
	for _, n := range p.runs {
		if n != 1 {
			ranTwice++
		}
	}
	p.mu.Unlock()
	assert.Equal(t, 1000, ran, "every node ran")
	assert.Zero(t, ranTwice, "no node ran twice")
	var data struct {
		Root  string            `json:"root"`
		Fan   map[string]string `json:"fan"`
		Chain string            `json:"chain"`
	}
	require.NoError(t, json.Unmarshal([]byte(st.GetWorkflowData()), &data))
	assert.Equal(t, "root", data.Root)
	assert.Len(t, data.Fan, 500, "every fan-out node's output mapped")
	assert.Equal(t, "fan-499", data.Fan["fan-499"])
	assert.Equal(t, "chain-497", data.Chain, "the chain's last output is the last written")

	// Continue-as-new happened: the execution that completed was started by one that
	// continued as new, and its state counts more than one execution.
	tc := sys.app.Temporal()
	it := tc.GetWorkflowHistory(ctx, workflows.DAGWorkflowID(id), "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	require.True(t, it.HasNext())
	first, err := it.Next()
	require.NoError(t, err)
	started := first.GetWorkflowExecutionStartedEventAttributes()
	require.NotNil(t, started)
	assert.Equal(t, enums.CONTINUE_AS_NEW_INITIATOR_WORKFLOW, started.GetInitiator(), "the last execution was continued as new")
	assert.NotEmpty(t, started.GetContinuedExecutionRunId())
	var result workflows.DAGRunState
	require.NoError(t, tc.GetWorkflow(ctx, workflows.DAGWorkflowID(id), "").Get(ctx, &result))
	assert.GreaterOrEqual(t, result.Runs, 2, "the run's executions")
	t.Logf("executions: %d", result.Runs)
}

// countNodes counts the nodes of st in status s.
func countNodes(st *workflowpb.WorkflowState, s workflowpb.NodeStatus) int {
	n := 0
	for _, ns := range st.GetNodeStates() {
		if ns.GetStatus() == s {
			n++
		}
	}
	return n
}

// phase is the time from node from's start to node to's completion (to's start when
// untilStart), as the run's state recorded them.
func phase(st *workflowpb.WorkflowState, from, to string, untilStart bool) time.Duration {
	end := st.GetNodeStates()[to].GetCompletedAt()
	if untilStart {
		end = st.GetNodeStates()[to].GetStartedAt()
	}
	return end.AsTime().Sub(st.GetNodeStates()[from].GetStartedAt().AsTime()).Round(100 * time.Millisecond)
}
