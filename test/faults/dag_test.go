package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"google.golang.org/grpc"

	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestWorkerKilledUnderDAGRun: one `sw4rm server` and two `sw4rm worker`s share PostgreSQL
// and Temporal; six SDK agents serve the nodes of a 30-node DAG — root → 14 wide → join → 13
// wide → sink — whose every node maps its output into workflow_data. Once a few nodes have
// finished, the worker that runs the DAG run's workflow tasks (named by the identity of the
// run's latest workflow task) is killed with SIGKILL. The run completes on the worker that
// is left, workflow_data holds every node's mapped output, and every node's handler ran
// exactly once (counted by the agents, by task id).
func TestWorkerKilledUnderDAGRun(t *testing.T) {
	dir := t.TempDir()
	d := startDeployment(t, dir, 2)
	ts, server, workers := d.ts, d.server, d.workers

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Agents run one task at a time: six of them let the wide stages run six nodes at once.
	var agents []*taskAgent
	var stops []func()
	for range 6 {
		a := dialAgent(t, server.addr, agentID("node"))
		register(t, a, "node")
		ta := newTaskAgent(a, nil, 100*time.Millisecond)
		agents = append(agents, ta)
		stops = append(stops, ta.serve(ctx))
	}
	conn, err := grpc.NewClient(server.addr, connOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	wc := workflowpb.NewWorkflowServiceClient(conn)

	const wfID = "fan-of-fans"
	def := fanOfFans(wfID, 14, 13, agents)
	if _, err := wc.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: def}); err != nil {
		t.Fatalf("CreateWorkflow: %v", err)
	}
	if _, err := wc.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: wfID}); err != nil {
		t.Fatalf("StartWorkflow: %v", err)
	}

	// Kill mid-run: the root and a few of the first fan's nodes have finished, the rest of
	// that fan is running or queued.
	if err := waitFor(time.Minute, 20*time.Millisecond, func() bool { return endedTasks(agents) >= 4 }); err != nil {
		t.Fatalf("only %d nodes ended before the kill", endedTasks(agents))
	}
	endedBeforeKill := endedTasks(agents)
	victim := dagRunWorker(ctx, t, ts, workflows.DAGWorkflowID(wfID), workers)
	victim.kill()
	killedAt := time.Now()

	f := figures{scenario: "worker-kill-dag"}
	var st *workflowpb.WorkflowState
	err = waitFor(2*time.Minute, 250*time.Millisecond, func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		res, err := wc.GetWorkflowState(cctx, &workflowpb.GetWorkflowStateRequest{WorkflowId: wfID})
		if err != nil {
			return false
		}
		st = res.GetState()
		return st.GetMetadata()["sw4rm.run_status"] != workflows.DAGRunning
	})
	recovery := time.Since(killedAt)
	cancel()
	for _, stop := range stops {
		stop()
	}

	runs := dagNodeRuns(agents, wfID)
	f.accepted = len(def.GetNodes())
	for id := range def.GetNodes() {
		switch n := runs[id]; {
		case n == 0:
			f.strandedTasks++
		case n > 1:
			f.duplicated++
		}
	}
	if err != nil {
		f.problem("the run did not finish within 2 minutes of the kill (last state: %v)", st.GetMetadata())
	} else if s := st.GetMetadata()["sw4rm.run_status"]; s != workflows.DAGCompleted {
		f.problem("the run ended %s, not COMPLETED", s)
	}
	for id, ns := range st.GetNodeStates() {
		if ns.GetStatus() != workflowpb.NodeStatus_COMPLETED {
			f.problem("node %s is %s: %s", id, ns.GetStatus(), ns.GetError())
		}
	}
	checkFanOfFansData(&f, wfID, def, st.GetWorkflowData())
	f.add("nodes=%d node_runs=%d ended_before_kill=%d killed=%s recovery_s=%.1f", len(def.GetNodes()), sumRuns(runs), endedBeforeKill, victim.name, recovery.Seconds())
	f.report(t)
}

// fanOfFans is root → wide1 nodes → join → wide2 nodes → sink, the nodes spread over the
// agents round robin. Every node writes the task id it ran as (its output's "done") to its
// own place in workflow_data: /root, /fan1/<node>, /join, /fan2/<node>, /sink; the join and
// the sink read the whole fan before them.
func fanOfFans(id string, wide1, wide2 int, agents []*taskAgent) *workflowpb.WorkflowDefinition {
	nodes := map[string]*workflowpb.WorkflowNode{}
	i := 0
	add := func(nid, target string, deps []string, in map[string]string) {
		nodes[nid] = &workflowpb.WorkflowNode{NodeId: nid, AgentId: agents[i%len(agents)].agent.ID(), Dependencies: deps,
			InputMapping: in, OutputMapping: map[string]string{"/done": target}}
		i++
	}
	add("root", "/root", nil, nil)
	var fan1, fan2 []string
	for n := range wide1 {
		nid := "a" + strconv.Itoa(n)
		fan1 = append(fan1, nid)
		add(nid, "/fan1/"+nid, []string{"root"}, map[string]string{"root": "/root"})
	}
	add("join", "/join", fan1, map[string]string{"fan1": "/fan1"})
	for n := range wide2 {
		nid := "b" + strconv.Itoa(n)
		fan2 = append(fan2, nid)
		add(nid, "/fan2/"+nid, []string{"join"}, map[string]string{"join": "/join"})
	}
	add("sink", "/sink", fan2, map[string]string{"fan2": "/fan2"})
	return &workflowpb.WorkflowDefinition{WorkflowId: id, Nodes: nodes}
}

// checkFanOfFansData records a problem for every node whose mapped output is not in
// workflow_data: the task id of its first attempt at the place its output_mapping names.
func checkFanOfFansData(f *figures, wfID string, def *workflowpb.WorkflowDefinition, data string) {
	var doc map[string]any
	if err := json.Unmarshal([]byte(data), &doc); err != nil {
		f.problem("workflow_data is not a JSON object: %v", err)
		return
	}
	missing := 0
	for id, node := range def.GetNodes() {
		want := workflows.DAGTaskID(wfID, id, 1)
		var got any = doc
		for _, tok := range strings.Split(strings.TrimPrefix(node.GetOutputMapping()["/done"], "/"), "/") {
			m, _ := got.(map[string]any)
			got = m[tok]
		}
		if got != want {
			missing++
			if missing <= 5 {
				f.problem("workflow_data%s is %v, want %q", node.GetOutputMapping()["/done"], got, want)
			}
		}
	}
	f.add("outputs_missing=%d", missing)
}

// dagNodeRuns counts the handler runs of each node of workflow wfID across the agents: a
// node's task ids are "dag-<workflow_id>-<node_id>-<attempt>".
func dagNodeRuns(agents []*taskAgent, wfID string) map[string]int {
	runs := map[string]int{}
	for _, ta := range agents {
		ta.mu.Lock()
		for taskID, n := range ta.starts {
			node := strings.TrimPrefix(taskID, "dag-"+wfID+"-")
			if i := strings.LastIndex(node, "-"); i >= 0 {
				node = node[:i]
			}
			runs[node] += n
		}
		ta.mu.Unlock()
	}
	return runs
}

func sumRuns(runs map[string]int) int {
	n := 0
	for _, r := range runs {
		n += r
	}
	return n
}

// dagRunWorker returns the worker that ran the latest workflow task of workflowID: the SDK's
// default worker identity is "<pid>@<host>@", and each worker is its own process group
// leader. Killing that worker takes the run's cached state and its sticky queue with it, so
// the other worker must rebuild the run from history.
func dagRunWorker(ctx context.Context, t *testing.T, ts *temporalServer, workflowID string, workers []*sw4rmProc) *sw4rmProc {
	t.Helper()
	identity := ""
	it := ts.client.GetWorkflowHistory(ctx, workflowID, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", workflowID, err)
		}
		if a := ev.GetWorkflowTaskStartedEventAttributes(); a != nil {
			identity = a.GetIdentity()
		}
	}
	pid, _, _ := strings.Cut(identity, "@")
	for _, w := range workers {
		if strconv.Itoa(w.proc.cmd.Process.Pid) == pid {
			return w
		}
	}
	t.Fatalf("no worker has the identity %q of %s's latest workflow task (workers: %s)", identity, workflowID, workerPIDs(workers))
	return nil
}

func workerPIDs(workers []*sw4rmProc) string {
	var s []string
	for _, w := range workers {
		s = append(s, fmt.Sprintf("%s=%d", w.name, w.proc.cmd.Process.Pid))
	}
	return strings.Join(s, " ")
}
