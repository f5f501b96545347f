package console

import (
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/worktreepb"
)

// agentsHeartbeatStale is how old an agent's last heartbeat may be before the page calls it
// stale: three of the default 30 s heartbeat intervals, the default number of misses after
// which the server marks an agent unavailable (SW4RM_HEARTBEAT_INTERVAL, _MISSES). The
// console does not know the server's settings; the age is shown beside the word.
const agentsHeartbeatStale = 90 * time.Second

// agentsMaxWorktreeLookups bounds the WorktreeService.Status calls one page makes, one per
// agent listed.
const agentsMaxWorktreeLookups = 200

// agentsRoutes registers the Agents page and its two actions, preemption and shutdown.
func (c *Console) agentsRoutes() {
	c.mux.Handle("GET "+Prefix+"agents", c.signedIn(c.agentsPage))
	c.mux.Handle("POST "+Prefix+"agents/{agent}/shutdown", c.signedIn(func(w http.ResponseWriter, r *http.Request, s *session) {
		c.agentsAction(w, r, s, "shutdown")
	}))
	c.mux.Handle("POST "+Prefix+"agents/{agent}/preempt", c.signedIn(func(w http.ResponseWriter, r *http.Request, s *session) {
		c.agentsAction(w, r, s, "preempt")
	}))
}

// agentsView is what the Agents page shows.
type agentsView struct {
	State, Capability string
	States            []string
	Agents            []agentRow
}

// agentRow is one agent of the page.
type agentRow struct {
	ID, Name, State, StateClass string
	Capabilities                string
	Registered                  time.Time
	Heartbeat                   time.Time
	HeartbeatWord, HeartbeatCls string
	Health                      []agentKV
	Tasks                       []agentTask
	Worktree, WorktreeState     string
	TemporalURL                 string
	// Dispatch is what the agent's scheduler holds; nil when its workflow did not answer.
	Dispatch *agentDispatch
	// Depth and Capacity are the inbound buffer's unconfirmed data rows and the router's
	// limit on them (§13); BufferWord and BufferCls say how full it is.
	Depth, Capacity       int64
	BufferWord, BufferCls string
}

// agentDispatch is an agent's scheduler state (§7): the running task and the queue in
// dispatch order, which is priority order (§7.1).
type agentDispatch struct {
	Running                        string
	RunningPriority                int32
	PreemptPending, NonPreemptible bool
	Queued                         []agentQueued
}

// agentQueued is one waiting task with its priority.
type agentQueued struct {
	ID       string
	Priority int32
}

// agentsBufferState is the word and colour class of an inbound buffer's fill: "full" at
// capacity (a further message is refused with buffer_full, §13), "filling" from three
// quarters, "ok" below. Without a capacity the depth alone is shown.
func agentsBufferState(depth, capacity int64) (word, class string) {
	switch {
	case capacity <= 0:
		return "", "muted"
	case depth >= capacity:
		return "full", "bad"
	case depth*4 >= capacity*3:
		return "filling", "warn"
	}
	return "ok", "ok"
}

// agentKV is one entry of an agent's heartbeat health map.
type agentKV struct{ Key, Value string }

// agentTask is one of an agent's active tasks.
type agentTask struct {
	ID, Worktree, WaitingOn, Description, TasksURL, TemporalURL string
	Created                                                     time.Time
}

// agentStates are the lifecycle states of sw4rm.common.AgentState the filter offers (§8).
var agentStates = []string{"INITIALIZING", "RUNNABLE", "SCHEDULED", "RUNNING", "WAITING", "WAITING_RESOURCES",
	"SUSPENDED", "RESUMED", "COMPLETED", "FAILED_STATE", "SHUTTING_DOWN", "RECOVERING"}

// agentStateClass is the colour class of a lifecycle state; the state's name is always
// written beside it.
func agentStateClass(s string) string {
	switch s {
	case "RUNNABLE", "RUNNING", "SCHEDULED", "RESUMED":
		return "ok"
	case "WAITING", "WAITING_RESOURCES", "SUSPENDED", "RECOVERING", "INITIALIZING":
		return "warn"
	case "FAILED_STATE":
		return "bad"
	}
	return "muted"
}

// agentsPage lists the registered agents (DirectoryService.ListAgents, with each one's
// scheduler state and inbound buffer fill) with their active tasks (ListTasks) and worktree
// binding (WorktreeService.Status).
func (c *Console) agentsPage(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	v := agentsView{State: strings.ToUpper(strings.TrimSpace(q.Get("state"))), Capability: strings.TrimSpace(q.Get("capability")), States: agentStates}
	d := pageData{Title: "Agents", Nav: "agents", Flash: q.Get("flash"), Data: &v}
	ctx := outgoing(r.Context(), s)
	dir := directorypb.NewDirectoryServiceClient(c.cfg.Conn)
	resp, err := dir.ListAgents(ctx, &directorypb.ListAgentsRequest{State: v.State, Capability: v.Capability})
	if err != nil {
		d.Error = callError(err)
		w.WriteHeader(httpStatusOf(err))
		c.render(w, r, s, "agents", d)
		return
	}
	// One listing of every active task, grouped by agent: the page's agents are usually most
	// of those with work.
	active := map[string][]agentTask{}
	if tasks, err := dir.ListTasks(ctx, &directorypb.ListTasksRequest{State: "active", Limit: 1000}); err == nil {
		for _, t := range tasks.GetTasks() {
			active[t.GetAgentId()] = append(active[t.GetAgentId()], agentTask{ID: t.GetTaskId(), Worktree: runsWorktree(t),
				WaitingOn: t.GetWaitingOn(), Description: t.GetDescription(), Created: t.GetCreatedAt().AsTime(),
				TasksURL: Prefix + "tasks?task=" + url.QueryEscape(t.GetTaskId()), TemporalURL: c.TemporalRunURL("task/" + t.GetTaskId())})
		}
	} else {
		d.Error = "Active tasks could not be listed: " + callError(err)
	}
	wt := worktreepb.NewWorktreeServiceClient(c.cfg.Conn)
	now := c.cfg.Now()
	for i, a := range resp.GetAgents() {
		desc := a.GetAgent()
		row := agentRow{ID: desc.GetAgentId(), Name: desc.GetName(), State: a.GetState(), StateClass: agentStateClass(a.GetState()),
			Capabilities: strings.Join(desc.GetCapabilities(), ", "), Tasks: active[desc.GetAgentId()],
			TemporalURL: c.TemporalRunURL("agent/" + desc.GetAgentId())}
		row.Depth, row.Capacity = a.GetInboundDepth(), a.GetBufferCapacity()
		row.BufferWord, row.BufferCls = agentsBufferState(row.Depth, row.Capacity)
		if dp := a.GetDispatch(); dp != nil {
			row.Dispatch = &agentDispatch{Running: dp.GetRunningTask(), RunningPriority: dp.GetRunningPriority(),
				PreemptPending: dp.GetPreemptPending(), NonPreemptible: dp.GetNonPreemptible()}
			for _, q := range dp.GetQueued() {
				row.Dispatch.Queued = append(row.Dispatch.Queued, agentQueued{ID: q.GetTaskId(), Priority: q.GetPriority()})
			}
		}
		if a.GetRegisteredAt() != nil {
			row.Registered = a.GetRegisteredAt().AsTime()
		}
		switch hb := a.GetLastHeartbeat(); {
		case hb == nil:
			row.HeartbeatWord, row.HeartbeatCls = "none yet", "muted"
		case now.Sub(hb.AsTime()) > agentsHeartbeatStale:
			row.Heartbeat, row.HeartbeatWord, row.HeartbeatCls = hb.AsTime(), "stale", "warn"
		default:
			row.Heartbeat, row.HeartbeatWord, row.HeartbeatCls = hb.AsTime(), "healthy", "ok"
		}
		for k, val := range a.GetHealth() {
			row.Health = append(row.Health, agentKV{k, val})
		}
		sort.Slice(row.Health, func(i, j int) bool { return row.Health[i].Key < row.Health[j].Key })
		if i < agentsMaxWorktreeLookups {
			if st, err := wt.Status(ctx, &worktreepb.StatusRequest{AgentId: row.ID}); err == nil {
				row.WorktreeState = st.GetState()
				row.Worktree = strings.Trim(st.GetRepoId()+"/"+st.GetWorktreeId(), "/")
			}
		}
		v.Agents = append(v.Agents, row)
	}
	c.render(w, r, s, "agents", d)
}

// agentsConfirmView is the confirmation step of an action, for a browser without script.
type agentsConfirmView struct {
	Agent, Action, Verb, TaskID, Reason, Grace string
}

// agentsAction requests a shutdown (SchedulerService.ShutdownAgent, §8.4) or a preemption
// (RequestPreemption, §7.2) of the agent. It acts only on a form that says confirm=yes: the
// list's forms carry it after a <noscript> field confirm=ask, so a browser with script
// (which asked with data-confirm) sends yes, and one without sends ask first and gets a
// confirmation page whose form sends yes.
func (c *Console) agentsAction(w http.ResponseWriter, r *http.Request, s *session, action string) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "validation_error: the form could not be read", http.StatusBadRequest)
		return
	}
	id := r.PathValue("agent")
	v := agentsConfirmView{Agent: id, Action: action, TaskID: strings.TrimSpace(r.PostForm.Get("task_id")),
		Reason: strings.TrimSpace(r.PostForm.Get("reason")), Grace: strings.TrimSpace(r.PostForm.Get("grace_seconds"))}
	v.Verb = "Shut down"
	if action == "preempt" {
		v.Verb = "Preempt"
	}
	if confirm := r.PostForm["confirm"]; len(confirm) == 0 || confirm[0] != "yes" {
		c.render(w, r, s, "agents_confirm", pageData{Title: v.Verb + " " + id + "?", Nav: "agents", Data: v})
		return
	}
	ctx := outgoing(r.Context(), s)
	sc := schedulerpb.NewSchedulerServiceClient(c.cfg.Conn)
	var flash string
	var err error
	switch action {
	case "shutdown":
		req := &schedulerpb.ShutdownAgentRequest{AgentId: id}
		if v.Grace != "" {
			secs, perr := strconv.ParseFloat(v.Grace, 64)
			if perr != nil {
				http.Error(w, "validation_error: grace period: a number of seconds, not "+strconv.Quote(v.Grace), http.StatusBadRequest)
				return
			}
			// The server, not the console, judges the value (a negative one is its
			// validation_error), so every door refuses the same things.
			req.GracePeriod = durationpb.New(time.Duration(secs * float64(time.Second)))
		}
		_, err = sc.ShutdownAgent(ctx, req)
		flash = "Shutdown of " + id + " requested."
	default:
		reason := v.Reason
		if reason == "" {
			reason = "requested by operator " + s.operator + " in the console"
		}
		var resp *schedulerpb.PreemptResponse
		resp, err = sc.RequestPreemption(ctx, &schedulerpb.PreemptRequest{AgentId: id, TaskId: v.TaskID, Reason: reason})
		flash = "Preemption of " + id + " requested."
		if err == nil && !resp.GetEnqueued() {
			flash = "The preemption of " + id + " was not enqueued."
		}
	}
	if err != nil {
		w.WriteHeader(httpStatusOf(err))
		c.render(w, r, s, "agents_confirm", pageData{Title: v.Verb + " " + id + "?", Nav: "agents", Error: callError(err), Data: v})
		return
	}
	http.Redirect(w, r, Prefix+"agents?flash="+url.QueryEscape(flash), http.StatusSeeOther)
}
