package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/scheduling"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

func newSchedulerTestService(t *testing.T) (*schedulerService, *memory.Store) {
	t.Helper()
	st := memory.New()
	t.Cleanup(st.Close)
	log := slog.New(slog.DiscardHandler)
	srv := New(st, nil, nil, nil, audit.New(log, st.Audit()), log, Config{})
	return &schedulerService{s: srv}, st
}

func putSchedulerActivity(t *testing.T, st *memory.Store, e store.ActivityEntry) {
	t.Helper()
	_, err := st.ActivityBuffer().Put(t.Context(), e, store.ActivityLimits{})
	require.NoError(t, err)
}

func requireSchedulerCode(t *testing.T, err error, code codes.Code, prefix string) {
	t.Helper()
	require.Error(t, err)
	st := toStatus(t.Context(), err) // as the error table's interceptor sends it
	require.Equal(t, code, st.Code(), "%v", err)
	require.True(t, strings.HasPrefix(st.Message(), prefix), "message %q starts with %q", st.Message(), prefix)
}

func TestPollActivityBuffer(t *testing.T) {
	sc, st := newSchedulerTestService(t)
	ctx := t.Context()
	at := time.Date(2025, 6, 1, 12, 0, 0, 123456000, time.FixedZone("UTC+2", 2*60*60))
	putSchedulerActivity(t, st, store.ActivityEntry{AgentID: "alice", TaskID: "t1", RepoID: "r1", WorktreeID: "w1", Branch: "main",
		Description: "fix the parser", CreatedAt: at})
	putSchedulerActivity(t, st, store.ActivityEntry{AgentID: "bob", TaskID: "t9", CreatedAt: at.Add(time.Second)})
	putSchedulerActivity(t, st, store.ActivityEntry{AgentID: "alice", TaskID: "t2", CreatedAt: at.Add(2 * time.Second)})

	resp, err := sc.PollActivityBuffer(ctx, &schedulerpb.PollActivityBufferRequest{AgentId: "alice"})
	require.NoError(t, err)
	require.Len(t, resp.GetEntries(), 2)
	e := resp.GetEntries()[0]
	require.Equal(t, "t1", e.GetTaskId())
	require.Equal(t, "r1", e.GetRepoId())
	require.Equal(t, "w1", e.GetWorktreeId())
	require.Equal(t, "main", e.GetBranch())
	require.Equal(t, "fix the parser", e.GetDescription())
	require.Equal(t, "2025-06-01T10:00:00.123456Z", e.GetTimestamp(), "RFC 3339 in UTC")
	ts, err := time.Parse(time.RFC3339, e.GetTimestamp())
	require.NoError(t, err)
	require.True(t, at.Equal(ts))
	require.Equal(t, "t2", resp.GetEntries()[1].GetTaskId())

	all, err := sc.PollActivityBuffer(ctx, &schedulerpb.PollActivityBufferRequest{})
	require.NoError(t, err)
	var tasks []string
	for _, e := range all.GetEntries() {
		tasks = append(tasks, e.GetTaskId())
	}
	require.Equal(t, []string{"t1", "t9", "t2"}, tasks, "every agent's, oldest first")

	none, err := sc.PollActivityBuffer(ctx, &schedulerpb.PollActivityBufferRequest{AgentId: "carol"})
	require.NoError(t, err)
	require.Empty(t, none.GetEntries())

	_, err = sc.PollActivityBuffer(ctx, &schedulerpb.PollActivityBufferRequest{AgentId: "bad\xff"})
	requireSchedulerCode(t, err, codes.InvalidArgument, "validation_error: ")

	// Completed entries are not polled.
	_, err = st.ActivityBuffer().Complete(ctx, "alice", "t1", store.ActivityCompleted)
	require.NoError(t, err)
	resp, err = sc.PollActivityBuffer(ctx, &schedulerpb.PollActivityBufferRequest{AgentId: "alice"})
	require.NoError(t, err)
	require.Len(t, resp.GetEntries(), 1)
}

// The filtered reads and the short history of §10 ride on PollActivityBuffer's metadata,
// since the canonical request names only the agent.
func TestPollActivityBufferFilters(t *testing.T) {
	sc, st := newSchedulerTestService(t)
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for i, e := range []store.ActivityEntry{
		{AgentID: "alice", TaskID: "t1", RepoID: "shop", WorktreeID: "wt-a"},
		{AgentID: "alice", TaskID: "t2", RepoID: "docs", WorktreeID: "wt-b"},
		{AgentID: "bob", TaskID: "t3", RepoID: "shop", WorktreeID: "wt-b"},
		{AgentID: "bob", TaskID: "t4", RepoID: "shop", WorktreeID: "wt-a"},
	} {
		e.CreatedAt = at.Add(time.Duration(i) * time.Second)
		putSchedulerActivity(t, st, e)
	}
	_, err := st.ActivityBuffer().Complete(t.Context(), "bob", "t4", store.ActivityFailed)
	require.NoError(t, err)
	poll := func(agent string, kv ...string) ([]string, error) {
		ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(kv...))
		resp, err := sc.PollActivityBuffer(ctx, &schedulerpb.PollActivityBufferRequest{AgentId: agent})
		var tasks []string
		for _, e := range resp.GetEntries() {
			tasks = append(tasks, e.GetTaskId())
		}
		return tasks, err
	}
	for _, tc := range []struct {
		name  string
		agent string
		kv    []string
		want  []string
	}{
		{"Repo", "", []string{wire.ActivityRepoKey, "shop"}, []string{"t1", "t3"}},
		{"Worktree", "", []string{wire.ActivityWorktreeKey, "wt-b"}, []string{"t2", "t3"}},
		{"Task", "", []string{wire.ActivityTaskKey, "t2"}, []string{"t2"}},
		{"AgentAndRepo", "alice", []string{wire.ActivityRepoKey, "shop"}, []string{"t1"}},
		{"History", "", []string{wire.ActivityHistoryKey, "true"}, []string{"t4"}},
		{"HistoryFiltered", "", []string{wire.ActivityHistoryKey, "1", wire.ActivityWorktreeKey, "wt-b"}, nil},
		{"NotHistory", "bob", []string{wire.ActivityHistoryKey, "false"}, []string{"t3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := poll(tc.agent, tc.kv...)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	_, err = poll("", wire.ActivityHistoryKey, "maybe")
	requireSchedulerCode(t, err, codes.InvalidArgument, "validation_error: metadata sw4rm-activity-history")
	_, err = poll("", wire.ActivityRepoKey, "shop", wire.ActivityRepoKey, "docs")
	requireSchedulerCode(t, err, codes.InvalidArgument, "validation_error: metadata sw4rm-activity-repo given 2 times")
}

func TestPollActivityBufferCapped(t *testing.T) {
	sc, st := newSchedulerTestService(t)
	n := maxActivityPoll + 5
	for i := range n {
		putSchedulerActivity(t, st, store.ActivityEntry{AgentID: fmt.Sprint("agent", i/store.DefaultActivityMaxPerAgent), TaskID: fmt.Sprint("t", i)})
	}
	resp, err := sc.PollActivityBuffer(t.Context(), &schedulerpb.PollActivityBufferRequest{})
	require.NoError(t, err)
	require.Len(t, resp.GetEntries(), maxActivityPoll)
	require.Equal(t, "t0", resp.GetEntries()[0].GetTaskId())
}

func TestPurgeActivity(t *testing.T) {
	sc, st := newSchedulerTestService(t)
	ctx := t.Context()
	for _, task := range []string{"t1", "t2", "t3"} {
		putSchedulerActivity(t, st, store.ActivityEntry{AgentID: "alice", TaskID: task})
	}
	putSchedulerActivity(t, st, store.ActivityEntry{AgentID: "bob", TaskID: "t1"})

	resp, err := sc.PurgeActivity(ctx, &schedulerpb.PurgeActivityRequest{AgentId: "alice", TaskIds: []string{"t1", "t3", "gone", "t1"}})
	require.NoError(t, err)
	require.Equal(t, uint32(2), resp.GetPurged())
	left, err := st.ActivityBuffer().List(ctx, store.ActivityFilter{})
	require.NoError(t, err)
	require.Len(t, left, 2)

	resp, err = sc.PurgeActivity(ctx, &schedulerpb.PurgeActivityRequest{AgentId: "alice", TaskIds: []string{"t1"}})
	require.NoError(t, err)
	require.Zero(t, resp.GetPurged(), "purging again purges nothing")

	evs, err := st.Audit().List(ctx, store.AuditFilter{TypePrefix: "activity.purged"})
	require.NoError(t, err)
	require.Len(t, evs, 2)
	require.Equal(t, "alice", evs[0].AgentID)
	require.Equal(t, "scheduler", evs[0].Actor)
	var details struct {
		TaskIDs []string `json:"task_ids"`
		Purged  int      `json:"purged"`
	}
	require.NoError(t, json.Unmarshal(evs[0].Details, &details))
	require.Equal(t, 2, details.Purged)
	require.Equal(t, []string{"t1", "t3", "gone", "t1"}, details.TaskIDs)

	_, err = sc.PurgeActivity(ctx, &schedulerpb.PurgeActivityRequest{TaskIds: []string{"t1"}})
	requireSchedulerCode(t, err, codes.InvalidArgument, "validation_error: ")
	_, err = sc.PurgeActivity(ctx, &schedulerpb.PurgeActivityRequest{AgentId: "alice"})
	requireSchedulerCode(t, err, codes.InvalidArgument, "validation_error: ")
	_, err = sc.PurgeActivity(ctx, &schedulerpb.PurgeActivityRequest{AgentId: "alice", TaskIds: make([]string, scheduling.MaxPurgeTaskIDs+1)})
	requireSchedulerCode(t, err, codes.InvalidArgument, "validation_error: ")
	_, err = sc.PurgeActivity(ctx, &schedulerpb.PurgeActivityRequest{AgentId: "alice", TaskIds: []string{"t\x00"}})
	requireSchedulerCode(t, err, codes.InvalidArgument, "validation_error: ")
}

func TestSchedulerRPCsValidate(t *testing.T) {
	sc, _ := newSchedulerTestService(t)
	ok := &schedulerpb.SubmitTaskRequest{AgentId: "coder", TaskId: "t1", Scope: "repo:app path:src/**"}
	for name, tc := range map[string]struct {
		mutate func(*schedulerpb.SubmitTaskRequest)
		want   string
	}{
		"no agent":          {func(r *schedulerpb.SubmitTaskRequest) { r.AgentId = "" }, "validation_error: agent_id"},
		"no task_id":        {func(r *schedulerpb.SubmitTaskRequest) { r.TaskId = "" }, "validation_error: task_id is required"},
		"task_id spaces":    {func(r *schedulerpb.SubmitTaskRequest) { r.TaskId = "a b" }, "validation_error: task_id must be"},
		"priority too high": {func(r *schedulerpb.SubmitTaskRequest) { r.Priority = -20 }, "validation_error: priority -20 is outside -19"},
		"priority too low":  {func(r *schedulerpb.SubmitTaskRequest) { r.Priority = 21 }, "validation_error: priority 21 is outside"},
		"no scope":          {func(r *schedulerpb.SubmitTaskRequest) { r.Scope = "  " }, "validation_error: scope is required"},
	} {
		t.Run(name, func(t *testing.T) {
			req := proto.Clone(ok).(*schedulerpb.SubmitTaskRequest)
			tc.mutate(req)
			_, err := sc.SubmitTask(t.Context(), req)
			requireSchedulerCode(t, err, codes.InvalidArgument, tc.want)
		})
	}
	_, err := sc.RequestPreemption(t.Context(), &schedulerpb.PreemptRequest{})
	requireSchedulerCode(t, err, codes.InvalidArgument, "validation_error: agent_id")
	// ShutdownAgent is built (frontend/scheduler_service.go): an empty agent_id is a validation error.
	_, err = sc.ShutdownAgent(t.Context(), &schedulerpb.ShutdownAgentRequest{})
	requireSchedulerCode(t, err, codes.InvalidArgument, "validation_error: agent_id")
}

func TestActivityErrorMapping(t *testing.T) {
	full := fmt.Errorf("memory: put: %w", &store.ActivityFullError{AgentID: "a", PerAgent: true, Limit: 100})
	requireSchedulerCode(t, activityError(full), codes.ResourceExhausted, "activity_buffer_full: ")
	requireSchedulerCode(t, activityError(fmt.Errorf("x: %w", store.ErrInvalidActivity)), codes.InvalidArgument, "validation_error: ")
	requireSchedulerCode(t, activityError(fmt.Errorf("x: %w", store.ErrNotFound)), codes.NotFound, "no_route: activity buffer")
	require.Equal(t, codes.DeadlineExceeded, toStatus(t.Context(), activityError(fmt.Errorf("x: %w", context.DeadlineExceeded))).Code())
	require.Equal(t, codes.Canceled, toStatus(t.Context(), activityError(fmt.Errorf("x: %w", context.Canceled))).Code())
	requireSchedulerCode(t, activityError(fmt.Errorf("boom")), codes.Unavailable, "internal_error: ")
}
