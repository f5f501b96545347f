package frontend

import (
	"context"
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/scheduling"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// maxActivityPoll caps the entries one PollActivityBuffer returns (the oldest first).
const maxActivityPoll = store.DefaultActivityListLimit

// maxWaitingOnHeader bounds the wire.ActivityWaitingOnHeader values of one answer, so that the
// header stays far below the metadata limits of every gRPC stack (8 KiB in some).
const maxWaitingOnHeader = 32

// schedulerService serves sw4rm.scheduler.SchedulerService: task submission and preemption
// (scheduler_service_tasks.go), and here shutdown and the activity buffer (§10). Entries are
// created and completed through the store's store.ActivityBuffer by admission and the task
// workflows, since the canonical service has no RPC for that.
type schedulerService struct {
	schedulerpb.UnimplementedSchedulerServiceServer
	s *Server
}

// PollActivityBuffer returns the agent's active entries, oldest first; an empty agent_id
// returns every agent's, at most maxActivityPoll in either case. The request metadata
// narrows the read to a repo, a worktree or a task, or turns it to the short history (see
// wire.ActivityRepoKey and the keys beside it); a waiting task's waiting_on comes back in
// the wire.ActivityWaitingOnHeader header. timestamp is the entry's creation time in RFC 3339
// (UTC, with fractional seconds), in the history too.
func (sc *schedulerService) PollActivityBuffer(ctx context.Context, req *schedulerpb.PollActivityBufferRequest) (*schedulerpb.PollActivityBufferResponse, error) {
	f, history, err := activityReadOf(ctx, req)
	if err != nil {
		return nil, err
	}
	es, err := sc.activity(ctx, f, history)
	if err != nil {
		return nil, err
	}
	out := &schedulerpb.PollActivityBufferResponse{Entries: make([]*schedulerpb.ActivityEntry, 0, len(es))}
	var waiting []string
	for _, e := range es {
		out.Entries = append(out.Entries, activityEntryPB(e))
		if e.WaitingOn != "" && !history && len(waiting) < maxWaitingOnHeader {
			waiting = append(waiting, e.TaskID+"="+e.WaitingOn)
		}
	}
	if len(waiting) > 0 {
		_ = grpc.SetHeader(ctx, metadata.Pairs(pairsOf(wire.ActivityWaitingOnHeader, waiting)...))
	}
	return out, nil
}

// activity reads the buffer's entries matching f: the active ones, or the short history.
func (sc *schedulerService) activity(ctx context.Context, f store.ActivityFilter, history bool) ([]store.ActivityEntry, error) {
	ab := sc.s.store.ActivityBuffer()
	var (
		es  []store.ActivityEntry
		err error
	)
	if history {
		es, err = ab.History(ctx, f)
	} else {
		es, err = ab.List(ctx, f)
	}
	if err != nil {
		return nil, activityError(err)
	}
	return es, nil
}

// pairsOf lists key with each value, for metadata.Pairs.
func pairsOf(key string, values []string) []string {
	kv := make([]string, 0, 2*len(values))
	for _, v := range values {
		kv = append(kv, key, v)
	}
	return kv
}

// activityReadOf reads PollActivityBuffer's filter from the request and its metadata.
func activityReadOf(ctx context.Context, req *schedulerpb.PollActivityBufferRequest) (store.ActivityFilter, bool, error) {
	f := store.ActivityFilter{AgentID: req.GetAgentId(), Limit: maxActivityPoll}
	md, _ := metadata.FromIncomingContext(ctx)
	one := func(key string) (string, error) {
		switch vs := md.Get(key); len(vs) {
		case 0:
			return "", nil
		case 1:
			return vs[0], nil
		default:
			return "", protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "metadata %s given %d times; give it once", key, len(vs))
		}
	}
	var err error
	for _, field := range []struct {
		key string
		dst *string
	}{{wire.ActivityRepoKey, &f.RepoID}, {wire.ActivityWorktreeKey, &f.WorktreeID}, {wire.ActivityTaskKey, &f.TaskID}} {
		if *field.dst, err = one(field.key); err != nil {
			return f, false, err
		}
	}
	h, err := one(wire.ActivityHistoryKey)
	if err != nil {
		return f, false, err
	}
	switch strings.ToLower(h) {
	case "", "false", "0":
		return f, false, nil
	case "true", "1":
		return f, true, nil
	}
	return f, false, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "metadata %s=%q must be true or false", wire.ActivityHistoryKey, h)
}

// PurgeActivity deletes the agent's active entries for the task_ids (the Scheduler reconciling
// COMPLETED, FAILED or unknown tasks, §10) and returns how many it deleted; unknown task_ids
// count nothing. agent_id and at least one task_id are required. Every purge is recorded as
// activity.purged (§19).
func (sc *schedulerService) PurgeActivity(ctx context.Context, req *schedulerpb.PurgeActivityRequest) (*schedulerpb.PurgeActivityResponse, error) {
	if perr := scheduling.ValidatePurge(req); perr != nil {
		return nil, perr
	}
	agentID, taskIDs := req.GetAgentId(), req.GetTaskIds()
	n, err := sc.s.store.ActivityBuffer().Purge(ctx, agentID, taskIDs)
	if err != nil {
		return nil, activityError(err)
	}
	sc.s.sink.Record(ctx, audit.Event{Actor: "scheduler", Type: "activity.purged", AgentID: agentID, Details: map[string]any{
		"task_ids": taskIDs, "purged": n,
	}})
	return &schedulerpb.PurgeActivityResponse{Purged: uint32(n)}, nil
}

// activityEntryPB converts an entry to the wire form.
func activityEntryPB(e store.ActivityEntry) *schedulerpb.ActivityEntry {
	return &schedulerpb.ActivityEntry{
		TaskId: e.TaskID, RepoId: e.RepoID, WorktreeId: e.WorktreeID, Branch: e.Branch,
		Description: e.Description, Timestamp: e.CreatedAt.UTC().Format(time.RFC3339Nano),
	}
}

// activityError says an activity buffer call failed; the error table (errors.go) answers a
// full buffer ResourceExhausted with activity_buffer_full (§10.1), which the ErrorCode enum
// lacks, as the message's prefix.
func activityError(err error) error { return failed("activity buffer", err) }

// ShutdownAgent starts a graceful shutdown (§8.4): it signals the agent's lifecycle workflow,
// which moves the agent to SHUTTING_DOWN (recorded in the registry projection, so no new task
// is dispatched to it) if the §8 table allows it from the current state. If the agent
// deregisters within the grace period its lifecycle ends normally; otherwise it is marked
// FAILED with agent_shutdown_timeout. A zero grace_period means the default of 30 s.
func (sc *schedulerService) ShutdownAgent(ctx context.Context, req *schedulerpb.ShutdownAgentRequest) (*schedulerpb.ShutdownAgentResponse, error) {
	grace, perr := scheduling.ValidateShutdown(req, workflows.DefaultShutdownGrace)
	if perr != nil {
		return nil, perr
	}
	id := req.GetAgentId()
	if _, err := sc.s.store.Registry().GetAgent(ctx, id); errors.Is(err, store.ErrNotFound) {
		return nil, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "agent %q is not registered", id)
	} else if err != nil {
		return nil, failed("registry lookup", err)
	}
	err := sc.s.temporal.SignalWorkflow(ctx, workflows.AgentWorkflowID(id), "", workflows.AgentShutdownSignal,
		workflows.AgentShutdown{GracePeriod: grace, Reason: "ShutdownAgent"})
	switch {
	case classify(err) == temporalNotFound:
		return nil, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "agent %q has no running lifecycle", id)
	case err != nil:
		return nil, temporalUnavailable("signal the lifecycle workflow of "+id+"; retry ShutdownAgent", err)
	}
	sc.s.sink.Record(ctx, audit.Event{CorrelationID: workflows.AgentWorkflowID(id), Actor: protocol.SchedulerID, Type: "registry.shutdown_requested", AgentID: id,
		Details: map[string]any{"grace_period": grace.String()}})
	return &schedulerpb.ShutdownAgentResponse{Ok: true}, nil
}
