package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowdefpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/dag"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// The Tasks and DAG runs pages. A DAG run is drawn server-side as inline SVG (the Content-
// Security-Policy allows no script to draw it): nodes in layers by their longest path from
// a root, each box coloured by its state through a CSS class, with the state also written in
// the box and in the table beside it. The picture refreshes over SSE when a node's state
// changes, so it changes colour as nodes finish.

// runsRoutes registers the Tasks and DAG runs pages.
func (c *Console) runsRoutes() {
	c.mux.Handle("GET "+Prefix+"tasks", c.signedIn(c.tasksPage))
	c.mux.Handle("GET "+Prefix+"dag", c.signedIn(c.dagRunsPage))
	c.mux.Handle("GET "+Prefix+"dag/{run}", c.signedIn(c.dagRunPage))
	c.mux.Handle("GET "+Prefix+"dag/{run}/graph", c.signedIn(c.dagRunGraph))
	c.mux.Handle("GET "+Prefix+"dag/{run}/events", c.signedIn(c.dagRunEvents))
	c.mux.Handle("POST "+Prefix+"dag/{run}/resume", c.signedIn(c.dagRunResume))
}

// tasksView is what the Tasks page shows.
type tasksView struct {
	Agent, State, Task string
	States             []string
	Tasks              []taskRow
}

// taskRow is one activity buffer entry.
type taskRow struct {
	Agent, ID, State, StateClass, Worktree, WaitingOn, Description string
	Created, Ended                                                 time.Time
	AgentURL, TemporalURL                                          string
}

// taskStates are ListTasks' state filter values.
var taskStates = []string{"active", "completed", "failed", "cancelled", "unknown"}

func taskStateClass(s string) string {
	switch s {
	case "active":
		return "info"
	case "completed":
		return "ok"
	case "failed":
		return "bad"
	case "cancelled":
		return "warn"
	}
	return "muted"
}

// runsWorktree is where a task works: repository, worktree and branch, those set.
func runsWorktree(e *directorypb.TaskEntry) string {
	var parts []string
	for _, p := range []string{e.GetRepoId(), e.GetWorktreeId(), e.GetBranch()} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "/")
}

// runsTime is a timestamp as a time, zero when unset.
func runsTime(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

// tasksPage lists the activity buffer (DirectoryService.ListTasks), filtered.
func (c *Console) tasksPage(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	v := tasksView{Agent: strings.TrimSpace(q.Get("agent")), State: strings.ToLower(strings.TrimSpace(q.Get("state"))),
		Task: strings.TrimSpace(q.Get("task")), States: taskStates}
	d := pageData{Title: "Tasks", Nav: "tasks", Flash: q.Get("flash"), Data: &v}
	resp, err := directorypb.NewDirectoryServiceClient(c.cfg.Conn).ListTasks(outgoing(r.Context(), s),
		&directorypb.ListTasksRequest{AgentId: v.Agent, State: v.State, TaskId: v.Task, Limit: 200})
	if err != nil {
		d.Error = callError(err)
		w.WriteHeader(httpStatusOf(err))
		c.render(w, r, s, "tasks", d)
		return
	}
	for _, t := range resp.GetTasks() {
		v.Tasks = append(v.Tasks, taskRow{Agent: t.GetAgentId(), ID: t.GetTaskId(), State: t.GetState(), StateClass: taskStateClass(t.GetState()),
			Worktree: runsWorktree(t), WaitingOn: t.GetWaitingOn(), Description: t.GetDescription(),
			Created: runsTime(t.GetCreatedAt()), Ended: runsTime(t.GetCompletedAt()),
			AgentURL: Prefix + "tasks?agent=" + url.QueryEscape(t.GetAgentId()), TemporalURL: c.TemporalRunURL("task/" + t.GetTaskId())})
	}
	c.render(w, r, s, "tasks", d)
}

// dagRunsView is what the DAG runs page shows.
type dagRunsView struct {
	Prefix, State string
	States        []string
	Runs          []dagRunRow
}

// dagRunRow is one run of the listing.
type dagRunRow struct {
	WorkflowID, RunID, State, StateClass, Status string
	Started, Closed                              time.Time
	URL, TemporalURL                             string
}

// dagRunStates are ListDAGRuns' state filter values.
var dagRunStates = []string{"RUNNING", "WAITING", "COMPLETED", "FAILED"}

func dagRunStateClass(s string) string {
	switch s {
	case "RUNNING":
		return "info"
	case "WAITING":
		return "warn"
	case "COMPLETED":
		return "ok"
	case "FAILED":
		return "bad"
	}
	return "muted"
}

// dagRunsPage lists DAG runs (DirectoryService.ListDAGRuns), filtered.
func (c *Console) dagRunsPage(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	v := dagRunsView{Prefix: strings.TrimPrefix(strings.TrimSpace(q.Get("prefix")), "dag/"), State: strings.ToUpper(strings.TrimSpace(q.Get("state"))),
		States: dagRunStates}
	d := pageData{Title: "DAG runs", Nav: "dag", Flash: q.Get("flash"), Data: &v}
	resp, err := directorypb.NewDirectoryServiceClient(c.cfg.Conn).ListDAGRuns(outgoing(r.Context(), s),
		&directorypb.ListDAGRunsRequest{WorkflowIdPrefix: v.Prefix, State: v.State, Limit: 200})
	if err != nil {
		d.Error = callError(err)
		w.WriteHeader(httpStatusOf(err))
		c.render(w, r, s, "dag", d)
		return
	}
	for _, run := range resp.GetRuns() {
		v.Runs = append(v.Runs, dagRunRow{WorkflowID: run.GetWorkflowId(), RunID: run.GetRunId(), State: run.GetState(),
			StateClass: dagRunStateClass(run.GetState()), Status: run.GetExecutionStatus(),
			Started: runsTime(run.GetStartedAt()), Closed: runsTime(run.GetClosedAt()),
			URL: Prefix + "dag/" + url.PathEscape(run.GetWorkflowId()), TemporalURL: c.TemporalRunURL("dag/" + run.GetWorkflowId())})
	}
	c.render(w, r, s, "dag", d)
}

// dagRunView is one run: its picture and its nodes.
type dagRunView struct {
	WorkflowID, Version, State, StateClass string
	HasRun                                 bool
	URL, TemporalURL                       string
	// Fingerprint is dagFingerprint of the state shown, which the page's event stream
	// starts from, so a change between the page's answer and the stream's start is sent.
	Fingerprint string
	Graph       dagGraph
	Nodes       []dagNodeRow
}

// dagNodeRow is one node of a run, in the table beside the picture.
type dagNodeRow struct {
	ID, Agent, Deps, State, StateClass, Error string
	// Fill and Stroke are the node's colours in the picture (dagNodeStyle).
	Fill, Stroke                 string
	Started, Completed           time.Time
	TaskID, TaskURL, TemporalURL string
	Resumable                    bool
}

// dagRunID is the run named in the path, without the dag/ of its Temporal workflow ID.
func dagRunID(r *http.Request) string { return strings.TrimPrefix(r.PathValue("run"), "dag/") }

// dagRunLoad reads a run's definition (DefinitionService.GetDefinition, the latest version)
// and state (WorkflowService.GetWorkflowState; a workflow never started has none) and builds
// its view; withTasks also finds each node's task (ListTasks of the node's agent).
func (c *Console) dagRunLoad(ctx context.Context, id string, withTasks bool) (*dagRunView, error) {
	def, err := workflowdefpb.NewDefinitionServiceClient(c.cfg.Conn).GetDefinition(ctx, &workflowdefpb.GetDefinitionRequest{WorkflowId: id})
	if err != nil {
		return nil, err
	}
	v := &dagRunView{WorkflowID: id, Version: strconv.Itoa(int(def.GetVersion())), URL: Prefix + "dag/" + url.PathEscape(id),
		TemporalURL: c.TemporalRunURL("dag/" + id), State: "NOT STARTED", StateClass: "muted", Fingerprint: dagNoRun}
	states := map[string]*workflowpb.NodeState{}
	st, err := workflowpb.NewWorkflowServiceClient(c.cfg.Conn).GetWorkflowState(ctx, &workflowpb.GetWorkflowStateRequest{WorkflowId: id})
	switch {
	case err == nil:
		v.HasRun = true
		v.State = st.GetState().GetMetadata()[wire.RunStatusKey]
		v.StateClass = dagRunStateClass(v.State)
		states = st.GetState().GetNodeStates()
		v.Fingerprint = dagFingerprint(st.GetState())
	case status.Code(err) != codes.NotFound:
		return nil, err
	}
	nodes := def.GetDefinition().GetNodes()
	ids := make([]string, 0, len(nodes))
	for k, n := range nodes {
		if n != nil {
			ids = append(ids, k)
		}
	}
	sort.Strings(ids)
	tasks := map[string]string{}
	if withTasks && v.HasRun {
		tasks = c.dagNodeTasks(ctx, id, nodes)
	}
	for _, nid := range ids {
		n, ns := nodes[nid], states[nid]
		word := "NOT STARTED"
		if ns != nil && ns.GetStatus() != workflowpb.NodeStatus_NODE_STATUS_UNSPECIFIED {
			word = ns.GetStatus().String()
		}
		deps := append([]string(nil), n.GetDependencies()...)
		sort.Strings(deps)
		style := dagNodeStyle(ns.GetStatus())
		row := dagNodeRow{ID: nid, Agent: n.GetAgentId(), Deps: strings.Join(deps, ", "), State: word, StateClass: style.Class, Fill: style.Fill, Stroke: style.Stroke,
			Error: ns.GetError(), Started: runsTime(ns.GetStartedAt()), Completed: runsTime(ns.GetCompletedAt()),
			Resumable: v.HasRun && ns.GetStatus() == workflowpb.NodeStatus_FAILED}
		if t := tasks[nid]; t != "" {
			row.TaskID, row.TaskURL, row.TemporalURL = t, Prefix+"tasks?task="+url.QueryEscape(t), c.TemporalRunURL("task/"+t)
		}
		v.Nodes = append(v.Nodes, row)
	}
	v.Graph = dagLayout(v.Nodes, nodes)
	return v, nil
}

// dagNodeStyle is how a node of status s is drawn: protocol/dag's style, which `sw4rm dag
// show` draws with too, so the console and the CLI colour alike; a node not started yet is
// "unstarted", white with a grey dashed border.
func dagNodeStyle(s workflowpb.NodeStatus) dag.NodeStyle {
	if st, ok := dag.StyleOf(s); ok {
		return st
	}
	return dag.NodeStyle{Class: "unstarted", Fill: "#ffffff", Stroke: "#a1a1aa"}
}

// dagNodeTasks finds each node's latest task. A node's task id is
// "dag-<workflow_id>-<node_id>-<attempt>" (docs/dag.md); the state has no field for it, so
// the activity buffer of each of the run's agents is searched for ids of that shape, the
// highest attempt winning. A node whose id was shortened (an over-long one) is not found and
// shows no link.
func (c *Console) dagNodeTasks(ctx context.Context, workflowID string, nodes map[string]*workflowpb.WorkflowNode) map[string]string {
	agents := map[string]bool{}
	for _, n := range nodes {
		if n != nil && n.GetAgentId() != "" {
			agents[n.GetAgentId()] = true
		}
	}
	best := map[string]int{}
	out := map[string]string{}
	dir := directorypb.NewDirectoryServiceClient(c.cfg.Conn)
	for a := range agents {
		resp, err := dir.ListTasks(ctx, &directorypb.ListTasksRequest{AgentId: a, Limit: 1000})
		if err != nil {
			continue
		}
		for _, t := range resp.GetTasks() {
			for nid, n := range nodes {
				if n == nil || n.GetAgentId() != a {
					continue
				}
				rest, ok := strings.CutPrefix(t.GetTaskId(), "dag-"+workflowID+"-"+nid+"-")
				if !ok {
					continue
				}
				// "dag-wf-a-b-1" has the prefix of node "a" too; only digits after it make it a's.
				attempt, err := strconv.Atoi(rest)
				if err != nil || attempt < best[nid] {
					continue
				}
				best[nid], out[nid] = attempt, t.GetTaskId()
			}
		}
	}
	return out
}

// dagGraph is the laid-out picture of a run.
type dagGraph struct {
	Width, Height int
	Nodes         []dagBox
	Edges         []dagEdge
}

// dagBox is one node's box; X, Y is its top-left corner.
type dagBox struct {
	X, Y, TextX, Line1, Line2, Line3 int
	ID, Agent, State, Class          string
	// Fill and Stroke are its colours, as SVG presentation attributes: not inline styles,
	// which the Content-Security-Policy forbids.
	Fill, Stroke string
	// ShortID and ShortAgent fit the box; the box's <title> has them whole.
	ShortID, ShortAgent string
	Href                string
}

// dagEdge is an arrow from a dependency's box to its dependent's.
type dagEdge struct{ X1, Y1, X2, Y2 int }

// The picture's geometry, in SVG user units.
const (
	dagBoxW, dagBoxH = 190, 64
	dagGapX, dagGapY = 30, 56
	dagMargin        = 12
)

// dagLayout lays the nodes out in layers: a node's layer is one more than its deepest
// dependency's (roots on top), nodes within a layer in node_id order, each layer centred.
// Dependencies the definition does not have are left out, and a cycle (which CreateWorkflow
// refuses) cannot loop: a node is given a layer once.
func dagLayout(rows []dagNodeRow, nodes map[string]*workflowpb.WorkflowNode) dagGraph {
	layer := map[string]int{}
	visiting := map[string]bool{}
	var depth func(id string) int
	depth = func(id string) int {
		if l, ok := layer[id]; ok {
			return l
		}
		if visiting[id] {
			return 0
		}
		visiting[id] = true
		l := 0
		for _, d := range nodes[id].GetDependencies() {
			if _, ok := nodes[d]; ok && nodes[d] != nil {
				l = max(l, depth(d)+1)
			}
		}
		layer[id] = l
		return l
	}
	var layers [][]int // row indexes per layer
	for i, r := range rows {
		l := depth(r.ID)
		for len(layers) <= l {
			layers = append(layers, nil)
		}
		layers[l] = append(layers[l], i)
	}
	widest := 0
	for _, l := range layers {
		widest = max(widest, len(l))
	}
	g := dagGraph{Width: 2*dagMargin + max(widest, 1)*dagBoxW + max(widest-1, 0)*dagGapX,
		Height: 2*dagMargin + max(len(layers), 1)*dagBoxH + max(len(layers)-1, 0)*dagGapY}
	at := map[string]dagBox{}
	for li, l := range layers {
		span := len(l)*dagBoxW + (len(l)-1)*dagGapX
		x0 := (g.Width - span) / 2
		for k, i := range l {
			r := rows[i]
			b := dagBox{X: x0 + k*(dagBoxW+dagGapX), Y: dagMargin + li*(dagBoxH+dagGapY), ID: r.ID, Agent: r.Agent,
				State: r.State, Class: r.StateClass, Fill: r.Fill, Stroke: r.Stroke, Href: "#node-" + r.ID}
			if r.TaskURL != "" {
				b.Href = r.TaskURL
			}
			b.TextX, b.Line1, b.Line2, b.Line3 = b.X+dagBoxW/2, b.Y+20, b.Y+37, b.Y+55
			b.ShortID, b.ShortAgent = dagClip(r.ID, 22), dagClip("agent: "+r.Agent, 26)
			at[r.ID] = b
			g.Nodes = append(g.Nodes, b)
		}
	}
	for _, r := range rows {
		to := at[r.ID]
		for _, d := range nodes[r.ID].GetDependencies() {
			from, ok := at[d]
			if !ok {
				continue
			}
			g.Edges = append(g.Edges, dagEdge{X1: from.X + dagBoxW/2, Y1: from.Y + dagBoxH, X2: to.X + dagBoxW/2, Y2: to.Y - 2})
		}
	}
	return g
}

// dagClip keeps a label to n runes, marking a cut with "…".
func dagClip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// dagRunPage shows one run: its picture, live, and its nodes with their tasks and a resume
// button on a failed node.
func (c *Console) dagRunPage(w http.ResponseWriter, r *http.Request, s *session) {
	id := dagRunID(r)
	d := pageData{Title: "DAG run " + id, Nav: "dag", Flash: r.URL.Query().Get("flash")}
	v, err := c.dagRunLoad(outgoing(r.Context(), s), id, true)
	if err != nil {
		d.Error = callError(err)
		w.WriteHeader(httpStatusOf(err))
		d.Data = &dagRunView{WorkflowID: id}
		c.render(w, r, s, "dagrun", d)
		return
	}
	d.Data = v
	c.render(w, r, s, "dagrun", d)
}

// dagRunGraph is the run's live part alone (picture, state and node table), for htmx.
func (c *Console) dagRunGraph(w http.ResponseWriter, r *http.Request, s *session) {
	v, err := c.dagRunLoad(outgoing(r.Context(), s), dagRunID(r), true)
	if err != nil {
		http.Error(w, callError(err), httpStatusOf(err))
		return
	}
	c.renderFragment(w, "dagrun", "live", pageData{Data: v})
}

// dagNoRun is the fingerprint of a workflow that has no run.
const dagNoRun = "no run"

// dagRunEvents sends "changed" whenever the run's state or a node's state changes. The page
// names the fingerprint of what it shows (fp): the stream starts from it, not from what it
// first reads, so a node that finished while the page loaded still changes the picture.
func (c *Console) dagRunEvents(w http.ResponseWriter, r *http.Request, s *session) {
	id := dagRunID(r)
	serveChanges(w, r, "changed", func(ctx context.Context) (string, error) {
		st, err := workflowpb.NewWorkflowServiceClient(c.cfg.Conn).GetWorkflowState(outgoing(ctx, s), &workflowpb.GetWorkflowStateRequest{WorkflowId: id})
		if status.Code(err) == codes.NotFound {
			return dagNoRun, nil
		}
		if err != nil {
			return "", err
		}
		return dagFingerprint(st.GetState()), nil
	})
}

// dagFingerprint is a hash of what the picture shows of a state: the run's status and start,
// and each node's status and attempt times.
func dagFingerprint(st *workflowpb.WorkflowState) string {
	var b strings.Builder
	b.WriteString(st.GetMetadata()[wire.RunStatusKey])
	b.WriteString("|" + runsTime(st.GetStartedAt()).String())
	ids := make([]string, 0, len(st.GetNodeStates()))
	for k := range st.GetNodeStates() {
		ids = append(ids, k)
	}
	sort.Strings(ids)
	for _, k := range ids {
		n := st.GetNodeStates()[k]
		b.WriteString("|" + k + "=" + n.GetStatus().String() + "@" + runsTime(n.GetStartedAt()).String())
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:12])
}

// dagRunResume resumes the run from a node (WorkflowService.ResumeWorkflow, §17.7).
func (c *Console) dagRunResume(w http.ResponseWriter, r *http.Request, s *session) {
	id := dagRunID(r)
	node := strings.TrimSpace(r.PostFormValue("node_id"))
	back := Prefix + "dag/" + url.PathEscape(id)
	if node == "" {
		http.Error(w, "validation_error: node_id is required", http.StatusBadRequest)
		return
	}
	_, err := workflowpb.NewWorkflowServiceClient(c.cfg.Conn).ResumeWorkflow(outgoing(r.Context(), s),
		&workflowpb.ResumeWorkflowRequest{WorkflowId: id, NodeId: node})
	if err != nil {
		http.Error(w, callError(err), httpStatusOf(err))
		return
	}
	http.Redirect(w, r, back+"?flash="+url.QueryEscape("Resumed "+id+" from node "+node+"."), http.StatusSeeOther)
}
