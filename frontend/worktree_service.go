package frontend

import (
	"context"
	"errors"
	"strconv"
	"time"

	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/worktreepb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// worktreeService serves sw4rm.worktree.WorktreeService (§16): each agent's binding is the
// workflow worktree/<agent_id>, which Bind starts; the store keeps its projection for Status
// after an unbind ended the run.
type worktreeService struct {
	worktreepb.UnimplementedWorktreeServiceServer
	s *Server
}

// by is the proven caller as the workflow records it; "" when anonymous.
func by(ctx context.Context) string {
	if p := auth.FromContext(ctx); !p.Anonymous() {
		return p.String()
	}
	return ""
}

// Bind binds the agent to its home worktree (repo_id, worktree_id), starting its binding
// workflow (§16). ok is true when it is bound (or was already); a failed bind answers
// ok=false with "<§16.3 reason>: <message>" and the binding stays BIND_FAILED while its
// automatic retries run (Status follows them). Binding another worktree while bound is
// refused with FailedPrecondition. With an ACL file the agent needs its grant of the
// repository and the worktree (decideWorktree), else PermissionDenied.
func (w *worktreeService) Bind(ctx context.Context, req *worktreepb.BindRequest) (*worktreepb.BindResponse, error) {
	if perr := worktree.ValidateBind(req); perr != nil {
		return nil, perr
	}
	agent := req.GetAgentId()
	if err := w.s.registered(ctx, agent, "agent %q is not registered; register it before binding a worktree"); err != nil {
		return nil, err
	}
	if err := w.s.decideWorktree(ctx, agent, req.GetRepoId(), req.GetWorktreeId(), "bind"); err != nil {
		return nil, err
	}
	res, err := w.bind(ctx, agent, workflows.WorktreeBind{RepoID: req.GetRepoId(), WorktreeID: req.GetWorktreeId(), By: by(ctx)})
	if err != nil {
		return nil, w.updateError(ctx, agent, err)
	}
	setWorktreeHeaders(ctx, res.State)
	return &worktreepb.BindResponse{Ok: res.OK, Reason: res.Reason}, nil
}

// bind sends Bind's update to the agent's binding, starting its workflow unless it runs.
func (w *worktreeService) bind(ctx context.Context, agent string, b workflows.WorktreeBind) (workflows.WorktreeBindResult, error) {
	var res workflows.WorktreeBindResult
	// An update aborted because the run it reached was closing comes back NotFound: the next
	// attempt starts, or reaches, the next run.
	err := w.retryClosing(ctx, func(err error) bool { return closingError(err) || classify(err) == temporalNotFound }, func() (err error) {
		res, err = updateWithStart[workflows.WorktreeBindResult](ctx, w.s.temporal, workflows.WorktreeStartOptions(agent, w.s.cfg.TaskQueue),
			workflows.WorktreeWorkflow, workflows.WorktreeInput{AgentID: agent},
			client.UpdateWorkflowOptions{UpdateName: workflows.WorktreeBindUpdate, Args: []any{b}})
		return err
	})
	return res, err
}

// Unbind ends the agent's binding: its home worktree is unlocked (directory and branch stay)
// and its workflow ends. An agent that is not bound is answered ok. While a switch is pending
// it is refused (§16.2): the switch is rejected first.
func (w *worktreeService) Unbind(ctx context.Context, req *worktreepb.UnbindRequest) (*worktreepb.UnbindResponse, error) {
	agent := req.GetAgentId()
	if perr := protocol.ValidateAgentID(agent); perr != nil {
		return nil, perr
	}
	st, err := w.update(ctx, agent, workflows.WorktreeUnbindUpdate, workflows.WorktreeUnbind{By: by(ctx)})
	switch {
	case errors.Is(err, errNoBinding), errors.Is(err, errClosing):
		st, err = w.stored(ctx, agent) // nothing running: nothing to unbind
	}
	if err != nil {
		return nil, err
	}
	setWorktreeHeaders(ctx, st)
	return &worktreepb.UnbindResponse{Ok: true}, nil
}

// RequestSwitch asks to move the agent to target_worktree_id, another worktree of its home
// repository (§16.2 SWITCH_REQUEST): the binding waits in SWITCH_PENDING for an operator's
// ApproveSwitch or RejectSwitch, or, with requires_hitl, for a HITL invocation with reason
// WORKTREE_OVERRIDE (whose id is the sw4rm-worktree-hitl header). With an ACL file the
// target needs the agent's grant like a bind (decideWorktree), else PermissionDenied.
func (w *worktreeService) RequestSwitch(ctx context.Context, req *worktreepb.SwitchRequest) (*worktreepb.StatusResponse, error) {
	if perr := worktree.ValidateSwitchRequest(req); perr != nil {
		return nil, perr
	}
	if w.s.cfg.ACL != nil {
		// The target is another worktree of the binding's repository: the ACL decides it
		// like a bind (decideWorktree). An agent that is not bound has no repository to
		// name; stateCall refuses it below.
		if cur, err := w.current(ctx, req.GetAgentId()); err != nil {
			return nil, err
		} else if cur.RepoID != "" {
			if err := w.s.decideWorktree(ctx, req.GetAgentId(), cur.RepoID, req.GetTargetWorktreeId(), "switch to"); err != nil {
				return nil, err
			}
		}
	}
	return w.stateCall(ctx, req.GetAgentId(), workflows.WorktreeSwitchRequestUpdate,
		workflows.WorktreeSwitchRequest{TargetWorktreeID: req.GetTargetWorktreeId(), RequiresHITL: req.GetRequiresHitl(), By: by(ctx)})
}

// ApproveSwitch approves the agent's pending switch for ttl_ms milliseconds (0 means
// workflows.DefaultSwitchTTL, at most workflows.MaxSwitchTTL): the target worktree is made or
// reused and the agent works there (BOUND_NON_HOME) until the TTL returns it home.
// target_worktree_id, when set, must be the pending switch's. If the target cannot be made,
// the switch stays pending and the call fails with the §16.3 reason.
func (w *worktreeService) ApproveSwitch(ctx context.Context, req *worktreepb.SwitchApprove) (*worktreepb.StatusResponse, error) {
	if perr := worktree.ValidateSwitchApproval(req, workflows.MaxSwitchTTL); perr != nil {
		return nil, perr
	}
	return w.stateCall(ctx, req.GetAgentId(), workflows.WorktreeSwitchApproveUpdate, workflows.WorktreeSwitchApproval{TargetWorktreeID: req.GetTargetWorktreeId(),
		TTL: time.Duration(req.GetTtlMs()) * time.Millisecond, By: by(ctx)})
}

// RejectSwitch rejects the agent's pending switch (SWITCH_REJECT) or, once approved, revokes
// it (SWITCH_REVOKE): the agent is back home at once.
func (w *worktreeService) RejectSwitch(ctx context.Context, req *worktreepb.SwitchReject) (*worktreepb.StatusResponse, error) {
	if perr := worktree.ValidateSwitchRejection(req); perr != nil {
		return nil, perr
	}
	return w.stateCall(ctx, req.GetAgentId(), workflows.WorktreeSwitchRejectUpdate, workflows.WorktreeSwitchRejection{Reason: req.GetReason(), By: by(ctx)})
}

// Status answers the agent's binding: from its running workflow, else the store's projection
// of the last one, else UNBOUND. The headers add the branch, the path, the home worktree, a
// switch's target and remaining TTL, and a failed bind's reason.
func (w *worktreeService) Status(ctx context.Context, req *worktreepb.StatusRequest) (*worktreepb.StatusResponse, error) {
	agent := req.GetAgentId()
	if perr := protocol.ValidateAgentID(agent); perr != nil {
		return nil, perr
	}
	st, err := w.current(ctx, agent)
	if err != nil {
		return nil, err
	}
	return statusResponse(ctx, st), nil
}

// current is the agent's binding: the running workflow's, else the store's.
func (w *worktreeService) current(ctx context.Context, agent string) (workflows.WorktreeState, error) {
	// A closed run is not replayed to answer: the store holds its last state.
	st, open, err := queryOpen[workflows.WorktreeState](ctx, w.s.temporal, workflows.WorktreeWorkflowID(agent), workflows.WorktreeStateQuery)
	switch {
	case open:
		return st, err
	case err == nil, classify(err) == temporalNotFound:
		return w.stored(ctx, agent)
	}
	return st, temporalUnavailable("query the binding", ctxFirst(ctx, err))
}

// stored is the binding the store recorded last; UNBOUND for an agent never bound.
func (w *worktreeService) stored(ctx context.Context, agent string) (workflows.WorktreeState, error) {
	b, err := w.s.store.Worktrees().GetBinding(ctx, agent)
	if errors.Is(err, store.ErrNotFound) {
		return workflows.WorktreeState{AgentID: agent, State: worktree.StateUnbound}, nil
	}
	if err != nil {
		return workflows.WorktreeState{}, failed("read the binding", err)
	}
	return workflows.WorktreeStateFromBinding(b), nil
}

// stateCall sends an update answering a WorktreeState and answers it as a StatusResponse.
func (w *worktreeService) stateCall(ctx context.Context, agent, name string, arg any) (*worktreepb.StatusResponse, error) {
	st, err := w.update(ctx, agent, name, arg)
	if errors.Is(err, errNoBinding) || errors.Is(err, errClosing) {
		cur, cerr := w.stored(ctx, agent)
		if cerr != nil {
			return nil, cerr
		}
		setWorktreeHeaders(ctx, cur)
		return nil, precondition(commonpb.ErrorCode_VALIDATION_ERROR, "%s is %s: %s needs a bound agent (§16.2)", agent, cur.State, name)
	}
	if err != nil {
		return nil, err
	}
	return statusResponse(ctx, st), nil
}

// errNoBinding: the agent has no running binding workflow; errClosing: its run is ending.
var (
	errNoBinding = errors.New("no running binding")
	errClosing   = errors.New("binding closing")
)

// update sends an update to the agent's running binding and waits for its answer; a run
// that is ending is waited for briefly (retryClosing). errNoBinding and errClosing say that
// there is no run to answer.
func (w *worktreeService) update(ctx context.Context, agent, name string, arg any) (workflows.WorktreeState, error) {
	var st workflows.WorktreeState
	err := w.retryClosing(ctx, closingError, func() (err error) {
		st, err = update[workflows.WorktreeState](ctx, w.s.temporal,
			client.UpdateWorkflowOptions{WorkflowID: workflows.WorktreeWorkflowID(agent), UpdateName: name, Args: []any{arg}})
		return err
	})
	switch {
	case err == nil:
		return st, nil
	case closingError(err):
		return st, errClosing
	case classify(err) == temporalNotFound:
		// No running binding: none ever, one that has ended, or one whose run closed under
		// this update — none of them can answer.
		return st, errNoBinding
	}
	return st, w.updateError(ctx, agent, err)
}

// closingError reports whether err says the run is ending: the server's "workflow is
// closing", or the binding's own refusal once an unbind has begun.
func closingError(err error) bool {
	if app := refusalOf(err); app != nil {
		return app.Type() == workflows.WorktreeRunClosing
	}
	return classify(err) == temporalClosing
}

// closingRetries bounds how often a call meeting a run that is ending is made again (every
// closingWait): an unbind's run ends within a workflow task or two.
const (
	closingRetries = 50
	closingWait    = 100 * time.Millisecond
)

// retryClosing runs call, again while its error satisfies retry (a run that is ending), so
// that a Bind right after an Unbind reaches the next run rather than the one closing.
func (w *worktreeService) retryClosing(ctx context.Context, retry func(error) bool, call func() error) error {
	for attempt := 1; ; attempt++ {
		err := call()
		if err == nil || !retry(err) || attempt == closingRetries || !sleepCtx(ctx, closingWait) {
			return err
		}
	}
}

// updateError maps a failed update: a refusal of the binding's state is FailedPrecondition
// (validation_error), a target that could not be made carries its §16.3 reason, anything
// else is Temporal failing.
func (w *worktreeService) updateError(ctx context.Context, agent string, err error) error {
	app := refusalOf(err)
	if app == nil {
		return temporalUnavailable("reach the binding of "+agent, err)
	}
	if r, perr := worktree.ParseReason(app.Type()); perr == nil {
		_ = grpc.SetHeader(ctx, metadata.Pairs(wire.WorktreeReasonHeader, string(r)))
		if r == worktree.ReasonPermissionDenied {
			return protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "%s", app.Message())
		}
		return precondition(commonpb.ErrorCode_VALIDATION_ERROR, "%s", app.Message())
	}
	if app.Type() == workflows.WorktreeUpdateRefused || app.Type() == workflows.WorktreeRunClosing {
		if cur, cerr := w.current(ctx, agent); cerr == nil {
			setWorktreeHeaders(ctx, cur)
		}
		return precondition(commonpb.ErrorCode_VALIDATION_ERROR, "%s", app.Message())
	}
	return temporalUnavailable("reach the binding of "+agent, err)
}

// statusResponse answers a binding, with its headers.
func statusResponse(ctx context.Context, st workflows.WorktreeState) *worktreepb.StatusResponse {
	setWorktreeHeaders(ctx, st)
	return &worktreepb.StatusResponse{RepoId: st.RepoID, WorktreeId: st.WorktreeID, State: st.State.String()}
}

// setWorktreeHeaders sets the response headers of a binding; empty values are left out.
func setWorktreeHeaders(ctx context.Context, st workflows.WorktreeState) {
	md := metadata.MD{}
	put := func(k, v string) {
		if v != "" {
			md.Set(k, headerValue(v))
		}
	}
	put(wire.WorktreeStateHeader, st.State.String())
	put(wire.WorktreeBranchHeader, st.Branch)
	put(wire.WorktreePathHeader, st.Path)
	put(wire.WorktreeHomeHeader, st.HomeWorktreeID)
	put(wire.WorktreeTargetHeader, st.TargetWorktreeID)
	if st.State == worktree.StateBoundNonHome && !st.ExpiresAt.IsZero() {
		put(wire.WorktreeTTLRemainingHeader, strconv.FormatInt(st.TTLRemaining(time.Now()).Milliseconds(), 10))
		put(wire.WorktreeExpiresHeader, st.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	if st.State == worktree.StateBindFailed {
		put(wire.WorktreeReasonHeader, string(st.Reason))
		put(wire.WorktreeAttemptsHeader, strconv.Itoa(st.Attempts))
		put(wire.WorktreeRetriesHeader, strconv.Itoa(st.Retries))
	}
	if st.HitlID != "" {
		put(wire.WorktreeHITLHeader, "hitl/"+st.HitlID)
	}
	put(wire.WorktreeNoteHeader, st.Note)
	_ = grpc.SetHeader(ctx, md)
}

// headerValue escapes a value for a gRPC header, which carries printable ASCII only: a Go
// string literal without its quotes (strconv.Unquote of `"`+v+`"` reads it back).
func headerValue(v string) string {
	q := strconv.QuoteToASCII(v)
	return q[1 : len(q)-1]
}
