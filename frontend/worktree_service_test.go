package frontend

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/worktreepb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// newWorktreeService is the service over a memory store (agent "coder" registered) and a
// mocked Temporal client.
func newWorktreeService(t *testing.T) (*worktreeService, *mocks.Client, store.Store) {
	t.Helper()
	st := memory.New()
	t.Cleanup(st.Close)
	require.NoError(t, st.Registry().PutAgent(t.Context(), store.AgentRecord{
		Descriptor: &registrypb.AgentDescriptor{AgentId: "coder", Name: "coder"}, State: commonpb.AgentState_RUNNABLE}))
	tc := &mocks.Client{}
	log := slog.New(slog.DiscardHandler)
	sink := audit.New(log, st.Audit())
	r := router.New(st, router.Config{}, sink)
	return &worktreeService{s: &Server{store: st, router: r, temporal: tc, sink: sink, log: log, cfg: Config{TaskQueue: "q"}}}, tc, st
}

// TestWorktreeBadInput: names that are not git's, an unregistered agent and a TTL past the
// limit are refused before Temporal is called (the mock has no expectation: a call would
// panic).
func TestWorktreeBadInput(t *testing.T) {
	svc, _, _ := newWorktreeService(t)
	ctx, _ := callCtx(t, auth.Principal{})
	for name, tc := range map[string]struct {
		call func() error
		code codes.Code
		msg  string
	}{
		"bad agent": {func() error {
			_, err := svc.Bind(ctx, &worktreepb.BindRequest{AgentId: "a b", RepoId: "app", WorktreeId: "w"})
			return err
		}, codes.InvalidArgument, "validation_error"},
		"bad repo": {func() error {
			_, err := svc.Bind(ctx, &worktreepb.BindRequest{AgentId: "coder", RepoId: "../etc", WorktreeId: "w"})
			return err
		}, codes.InvalidArgument, "repo_id"},
		"bad worktree": {func() error {
			_, err := svc.Bind(ctx, &worktreepb.BindRequest{AgentId: "coder", RepoId: "app", WorktreeId: "w/x"})
			return err
		}, codes.InvalidArgument, `must not contain "/"`},
		"missing worktree": {func() error {
			_, err := svc.Bind(ctx, &worktreepb.BindRequest{AgentId: "coder", RepoId: "app"})
			return err
		}, codes.InvalidArgument, "worktree_id is required"},
		"unregistered": {func() error {
			_, err := svc.Bind(ctx, &worktreepb.BindRequest{AgentId: "ghost", RepoId: "app", WorktreeId: "w"})
			return err
		}, codes.NotFound, "no_route: agent \"ghost\" is not registered"},
		"bad target": {func() error {
			_, err := svc.RequestSwitch(ctx, &worktreepb.SwitchRequest{AgentId: "coder", TargetWorktreeId: "x.lock"})
			return err
		}, codes.InvalidArgument, "target_worktree_id"},
		"ttl too long": {func() error {
			_, err := svc.ApproveSwitch(ctx, &worktreepb.SwitchApprove{AgentId: "coder", TtlMs: uint64(25 * time.Hour / time.Millisecond)})
			return err
		}, codes.InvalidArgument, "ttl_ms"},
		"reason too long": {func() error {
			_, err := svc.RejectSwitch(ctx, &worktreepb.SwitchReject{AgentId: "coder", Reason: strings.Repeat("x", 2000)})
			return err
		}, codes.InvalidArgument, "reason"},
		"status of nobody": {func() error {
			_, err := svc.Status(ctx, &worktreepb.StatusRequest{})
			return err
		}, codes.InvalidArgument, "agent_id"},
	} {
		t.Run(name, func(t *testing.T) {
			st := toStatus(ctx, tc.call())
			assert.Equal(t, tc.code, st.Code(), st.Message())
			assert.Contains(t, st.Message(), tc.msg)
		})
	}
}

// TestWorktreeWithoutRun: with no running binding, Unbind answers ok, Status answers the
// store's projection (UNBOUND when there is none), and a switch call is FailedPrecondition.
func TestWorktreeWithoutRun(t *testing.T) {
	svc, tc, st := newWorktreeService(t)
	nf := serviceerror.NewNotFound("workflow not found")
	tc.On("UpdateWorkflow", mock.Anything, mock.Anything).Return(nil, nf)
	tc.On("QueryWorkflowWithOptions", mock.Anything, mock.Anything).Return(nil, nf)

	ctx, hs := callCtx(t, auth.Principal{Agent: "coder"})
	res, err := svc.Unbind(ctx, &worktreepb.UnbindRequest{AgentId: "coder"})
	require.NoError(t, err)
	assert.True(t, res.GetOk())
	assert.Equal(t, []string{"UNBOUND"}, hs.md.Get(wire.WorktreeStateHeader))

	ctx, _ = callCtx(t, auth.Principal{Agent: "coder"})
	s, err := svc.Status(ctx, &worktreepb.StatusRequest{AgentId: "coder"})
	require.NoError(t, err)
	assert.Equal(t, "UNBOUND", s.GetState())
	assert.Empty(t, s.GetRepoId())

	require.NoError(t, st.Worktrees().PutBinding(t.Context(), store.WorktreeBinding{AgentID: "coder", State: "BIND_FAILED", RepoID: "app",
		HomeWorktreeID: "w1", Reason: "worktree_not_found", Note: "repository app is gone (§16.3)", UpdatedAt: time.Now()}))
	ctx, hs = callCtx(t, auth.Principal{Agent: "coder"})
	s, err = svc.Status(ctx, &worktreepb.StatusRequest{AgentId: "coder"})
	require.NoError(t, err)
	assert.Equal(t, "BIND_FAILED", s.GetState())
	assert.Equal(t, "app", s.GetRepoId())
	assert.Equal(t, []string{"worktree_not_found"}, hs.md.Get(wire.WorktreeReasonHeader))
	assert.Equal(t, []string{`repository app is gone (\u00a716.3)`}, hs.md.Get(wire.WorktreeNoteHeader), "escaped to ASCII")
	note, err := strconv.Unquote(`"` + hs.md.Get(wire.WorktreeNoteHeader)[0] + `"`)
	require.NoError(t, err)
	assert.Equal(t, "repository app is gone (§16.3)", note)

	ctx, _ = callCtx(t, auth.Principal{Agent: "coder"})
	_, err = svc.RequestSwitch(ctx, &worktreepb.SwitchRequest{AgentId: "coder", TargetWorktreeId: "w2"})
	stt := toStatus(ctx, err)
	assert.Equal(t, codes.FailedPrecondition, stt.Code())
	assert.Contains(t, stt.Message(), "coder is BIND_FAILED")
}

// TestWorktreeUpdateErrors: a refusal by the workflow is FailedPrecondition validation_error;
// an approval whose target could not be made carries its §16.3 reason, permission_denied as
// PermissionDenied; a successful call answers the binding with its headers.
func TestWorktreeUpdateErrors(t *testing.T) {
	svc, tc, _ := newWorktreeService(t)
	tc.On("QueryWorkflowWithOptions", mock.Anything, mock.Anything).Return(nil, serviceerror.NewNotFound("gone"))
	tc.On("UpdateWorkflow", mock.Anything, mock.MatchedBy(func(o client.UpdateWorkflowOptions) bool {
		return o.UpdateName == workflows.WorktreeSwitchRequestUpdate
	})).Return(nil, temporal.NewApplicationError("worktree: switch_request is not allowed in state UNBOUND (§16.2)", workflows.WorktreeUpdateRefused)).Once()
	ctx, _ := callCtx(t, auth.Principal{Agent: "coder"})
	_, err := svc.RequestSwitch(ctx, &worktreepb.SwitchRequest{AgentId: "coder", TargetWorktreeId: "w2"})
	stt := toStatus(ctx, err)
	assert.Equal(t, codes.FailedPrecondition, stt.Code())
	assert.Equal(t, "validation_error: worktree: switch_request is not allowed in state UNBOUND (§16.2)", stt.Message())

	for reason, code := range map[worktree.Reason]codes.Code{worktree.ReasonPermissionDenied: codes.PermissionDenied, worktree.ReasonWorktreeLocked: codes.FailedPrecondition} {
		tc.On("UpdateWorkflow", mock.Anything, mock.MatchedBy(func(o client.UpdateWorkflowOptions) bool {
			return o.UpdateName == workflows.WorktreeSwitchApproveUpdate
		})).Return(nil, temporal.NewApplicationError(string(reason)+": worktree w2 could not be bound: x", string(reason))).Once()
		ctx, hs := callCtx(t, auth.Principal{Operator: "ops"})
		_, err = svc.ApproveSwitch(ctx, &worktreepb.SwitchApprove{AgentId: "coder", TtlMs: 1000})
		stt = toStatus(ctx, err)
		assert.Equal(t, code, stt.Code(), "%s", reason)
		assert.Contains(t, stt.Message(), string(reason)+": worktree w2 could not be bound")
		assert.Equal(t, []string{string(reason)}, hs.md.Get(wire.WorktreeReasonHeader))
	}

	expires := time.Now().Add(time.Minute)
	handle := &mocks.WorkflowUpdateHandle{}
	handle.On("Get", mock.Anything, mock.Anything).Return(func(_ context.Context, out any) error {
		*out.(*workflows.WorktreeState) = workflows.WorktreeState{AgentID: "coder", State: worktree.StateBoundNonHome, RepoID: "app", HomeWorktreeID: "w1",
			WorktreeID: "w2", Branch: "sw4rm/w2", Path: "/srv/app/.sw4rm-worktrees/w2", TargetWorktreeID: "w2", ExpiresAt: expires}
		return nil
	})
	tc.On("UpdateWorkflow", mock.Anything, mock.MatchedBy(func(o client.UpdateWorkflowOptions) bool {
		return o.UpdateName == workflows.WorktreeSwitchApproveUpdate && o.WorkflowID == "worktree/coder" &&
			o.Args[0].(workflows.WorktreeSwitchApproval) == workflows.WorktreeSwitchApproval{TTL: time.Minute, By: "operator:ops"}
	})).Return(handle, nil).Once()
	ctx, hs := callCtx(t, auth.Principal{Operator: "ops"})
	resp, err := svc.ApproveSwitch(ctx, &worktreepb.SwitchApprove{AgentId: "coder", TtlMs: 60000})
	require.NoError(t, err)
	assert.Equal(t, &worktreepb.StatusResponse{RepoId: "app", WorktreeId: "w2", State: "BOUND_NON_HOME"}, resp)
	assert.Equal(t, []string{"sw4rm/w2"}, hs.md.Get(wire.WorktreeBranchHeader))
	assert.Equal(t, []string{"/srv/app/.sw4rm-worktrees/w2"}, hs.md.Get(wire.WorktreePathHeader))
	assert.Equal(t, []string{"w1"}, hs.md.Get(wire.WorktreeHomeHeader))
	ms, err := strconv.Atoi(hs.md.Get(wire.WorktreeTTLRemainingHeader)[0])
	require.NoError(t, err)
	assert.InDelta(t, 60000, ms, 5000)
}
