package frontend

import (
	"context"
	"sync"
	"time"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// agentDispatchQueries bounds the scheduler queries one ListAgents runs at once, and
// agentDispatchTimeout each one's wait.
const (
	agentDispatchQueries = 8
	agentDispatchTimeout = 2 * time.Second
)

// seesAgentLoad reports whether the caller may read agent's inbound depth and scheduler
// state: as with its tasks (ownWork), an operator, an anonymous caller that authentication
// off or optional lets through, and the agent itself. The registry record is discovery data
// for anyone; what an agent holds is its own work.
func seesAgentLoad(p auth.Principal, agent string) bool {
	return p.Operator != "" || p.Agent == "" || p.Agent == agent
}

// addAgentLoad sets on each entry the router's buffer capacity and, where the caller may read
// them (seesAgentLoad), the inbound buffer's depth and the scheduler's state. The agents'
// reads run side by side, at most agentDispatchQueries at once and each for at most
// agentDispatchTimeout: a query waits for a worker, and an agent whose workflow is not
// running or whose worker is away is listed without its dispatch rather than holding up or
// failing the listing. A depth the store cannot read is left zero for the same reason.
func (d *directoryService) addAgentLoad(ctx context.Context, entries []*directorypb.AgentEntry) {
	var capacity int64
	if d.s.router != nil {
		capacity = int64(d.s.router.Config().BufferCapacity)
	}
	p := auth.FromContext(ctx)
	var wg sync.WaitGroup
	sem := make(chan struct{}, agentDispatchQueries)
	for _, e := range entries {
		e.BufferCapacity = capacity
		id := e.GetAgent().GetAgentId()
		if !seesAgentLoad(p, id) {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if n, err := d.s.store.Messages().DataDepth(ctx, id); err == nil {
				e.InboundDepth = int64(n)
			} else if d.s.log != nil {
				d.s.log.Warn("inbound depth not read", "agent_id", id, "error", err)
			}
			if d.s.temporal != nil {
				e.Dispatch = d.agentDispatch(ctx, id)
			}
		}()
	}
	wg.Wait()
}

// agentDispatch asks the agent's lifecycle workflow what its scheduler holds; nil when it
// does not answer within agentDispatchTimeout.
func (d *directoryService) agentDispatch(ctx context.Context, agent string) *directorypb.AgentDispatch {
	qctx, cancel := context.WithTimeout(ctx, agentDispatchTimeout)
	defer cancel()
	v, err := d.s.temporal.QueryWorkflow(qctx, workflows.AgentWorkflowID(agent), "", workflows.AgentTasksQuery)
	if err != nil {
		return nil
	}
	var st workflows.DispatchStatus
	if v.Get(&st) != nil {
		return nil
	}
	out := &directorypb.AgentDispatch{RunningTask: st.Running, RunningPriority: st.RunningPriority,
		PreemptPending: st.PreemptPending, NonPreemptible: st.NonPreemptible}
	for i, id := range st.Queue {
		q := &directorypb.QueuedTask{TaskId: id}
		// An answer of a worker that predates QueuePriorities has the order without them.
		if i < len(st.QueuePriorities) {
			q.Priority = st.QueuePriorities[i]
		}
		out.Queued = append(out.Queued, q)
	}
	return out
}
