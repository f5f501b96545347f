package frontend

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/observe"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// maxActivityPoll caps the entries one PollActivityBuffer returns (the oldest first).
const maxActivityPoll = store.DefaultActivityListLimit

// maxPurgeTaskIDs bounds the task_ids of one PurgeActivity call.
const maxPurgeTaskIDs = 1000

// schedulerService serves sw4rm.scheduler.SchedulerService. Only the activity buffer (§10) is
// built: PollActivityBuffer and PurgeActivity. SubmitTask, RequestPreemption and ShutdownAgent
// fall through to the embedded Unimplemented server (and the capability gate answers them
// first, with the missing capability). Entries are created and completed through the store's
// store.ActivityBuffer by the task workflows, since the canonical service has no RPC for that.
type schedulerService struct {
	schedulerpb.UnimplementedSchedulerServiceServer
	s *Server
}

// PollActivityBuffer returns the agent's active entries, oldest first; an empty agent_id
// returns every agent's, at most maxActivityPoll in either case. timestamp is the entry's
// creation time in RFC 3339 (UTC, with fractional seconds).
func (sc *schedulerService) PollActivityBuffer(ctx context.Context, req *schedulerpb.PollActivityBufferRequest) (*schedulerpb.PollActivityBufferResponse, error) {
	es, err := sc.s.store.ActivityBuffer().List(ctx, store.ActivityFilter{AgentID: req.GetAgentId(), Limit: maxActivityPoll})
	if err != nil {
		return nil, activityError(err)
	}
	out := &schedulerpb.PollActivityBufferResponse{Entries: make([]*schedulerpb.ActivityEntry, 0, len(es))}
	for _, e := range es {
		out.Entries = append(out.Entries, activityEntryPB(e))
	}
	return out, nil
}

// PurgeActivity deletes the agent's active entries for the task_ids (the Scheduler reconciling
// COMPLETED, FAILED or unknown tasks, §10) and returns how many it deleted; unknown task_ids
// count nothing. agent_id and at least one task_id are required. Every purge is recorded as
// activity.purged (§19).
func (sc *schedulerService) PurgeActivity(ctx context.Context, req *schedulerpb.PurgeActivityRequest) (*schedulerpb.PurgeActivityResponse, error) {
	agentID, taskIDs := req.GetAgentId(), req.GetTaskIds()
	switch {
	case agentID == "":
		return nil, status.Error(codes.InvalidArgument, "validation_error: agent_id is required")
	case len(taskIDs) == 0:
		return nil, status.Error(codes.InvalidArgument, "validation_error: name at least one task_id to purge")
	case len(taskIDs) > maxPurgeTaskIDs:
		return nil, status.Errorf(codes.InvalidArgument, "validation_error: at most %d task_ids per call, got %d", maxPurgeTaskIDs, len(taskIDs))
	}
	n, err := sc.s.store.ActivityBuffer().Purge(ctx, agentID, taskIDs)
	if err != nil {
		return nil, activityError(err)
	}
	sc.s.sink.Record(ctx, observe.Event{Actor: "scheduler", Type: "activity.purged", AgentID: agentID, Details: map[string]any{
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

// activityError maps an activity buffer error to a gRPC status. A full buffer answers
// ResourceExhausted with error_code activity_buffer_full (§10.1), which the ErrorCode enum
// lacks, as the message's prefix.
func activityError(err error) error {
	switch {
	case errors.Is(err, store.ErrActivityBufferFull):
		return status.Errorf(codes.ResourceExhausted, "activity_buffer_full: %v", err)
	case errors.Is(err, store.ErrInvalidActivity):
		return status.Errorf(codes.InvalidArgument, "validation_error: %v", err)
	case errors.Is(err, store.ErrNotFound):
		return status.Errorf(codes.NotFound, "unknown activity entry: %v", err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	default:
		return status.Errorf(codes.Unavailable, "internal_error: activity buffer: %v", err)
	}
}
