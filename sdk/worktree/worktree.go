// Package worktree is the Go SDK of worktree binding (§16): an agent binds itself to its home
// worktree, learns where it is on disk, asks to switch to another worktree for a while and
// unbinds; operators approve, reject or revoke switches. It speaks the canonical
// WorktreeService plus the sw4rm-worktree-* response headers documented in
// docs/worktrees.md ("RPCs").
package worktree

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/proto/worktreepb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// The §16.1 states, as Status.State spells them.
const (
	StateUnbound       = "UNBOUND"
	StateBoundHome     = "BOUND_HOME"
	StateSwitchPending = "SWITCH_PENDING"
	StateBoundNonHome  = "BOUND_NON_HOME"
	StateBindFailed    = "BIND_FAILED"
)

// Status is an agent's binding as the server answers it.
type Status struct {
	// State is the §16.1 state, e.g. StateBoundHome.
	State string
	// RepoID is the home worktree's repository.
	RepoID string
	// WorktreeID, Branch and Path are the worktree the agent works in now: its home, or a
	// switch's target while BOUND_NON_HOME. Path is a directory on the workers' host.
	WorktreeID, Branch, Path string
	// Home is the home worktree_id.
	Home string
	// Target is a pending or approved switch's target.
	Target string
	// TTLRemaining and ExpiresAt: when a BOUND_NON_HOME binding returns home.
	TTLRemaining time.Duration
	ExpiresAt    time.Time
	// Reason is the §16.3 reason of the last failed bind while BIND_FAILED; Attempts counts
	// the failed binds, Retries the automatic retries made (at most three).
	Reason            string
	Attempts, Retries int
	// HITL is the invocation (hitl/<id>) deciding a pending switch that requires HITL.
	HITL string
	// Note says what the last change was about.
	Note string
}

// Bound reports whether the agent holds a worktree it may work in (§16.3: only then is it
// given tasks that need one).
func (s Status) Bound() bool {
	switch s.State {
	case StateBoundHome, StateSwitchPending, StateBoundNonHome:
		return true
	}
	return false
}

// BindError is a bind that failed with its §16.3 reason (worktree_not_found,
// permission_denied, filesystem_error, worktree_locked); the server retries it
// automatically, three times at most, and Status follows the retries.
type BindError struct {
	// Reason is the §16.3 reason.
	Reason string
	// Message is the server's full reason.
	Message string
}

func (e *BindError) Error() string { return "sw4rm: bind failed: " + e.Message }

// ErrNotBound is Path's answer when the agent holds no worktree.
var ErrNotBound = errors.New("sw4rm: the agent is not bound to a worktree")

// Client makes an agent's worktree calls over its connection (signed when the agent signs).
type Client struct {
	agent *sdk.Agent
	svc   worktreepb.WorktreeServiceClient
}

// New returns the worktree client of a dialled agent.
func New(a *sdk.Agent) *Client {
	return &Client{agent: a, svc: worktreepb.NewWorktreeServiceClient(a.ClientConn())}
}

// Bind binds the agent to its home worktree (repoID, worktreeID). The worktree is made (on
// branch sw4rm/<worktree_id>) or reused, and locked for the agent. A failed bind returns the
// binding (BIND_FAILED) and a *BindError; the server's retries follow (WaitState waits for
// them).
func (c *Client) Bind(ctx context.Context, repoID, worktreeID string) (Status, error) {
	var hdr metadata.MD
	res, err := c.svc.Bind(ctx, &worktreepb.BindRequest{AgentId: c.agent.ID(), RepoId: repoID, WorktreeId: worktreeID}, grpc.Header(&hdr))
	if err != nil {
		return Status{}, err
	}
	st := fromHeaders(nil, hdr)
	st.RepoID = repoID
	if !res.GetOk() {
		reason, _, _ := strings.Cut(res.GetReason(), ":")
		return st, &BindError{Reason: reason, Message: res.GetReason()}
	}
	return st, nil
}

// Unbind ends the agent's binding: its home worktree is unlocked and stays on disk with its
// branch. An agent not bound is unbound already; one whose switch is pending is refused.
func (c *Client) Unbind(ctx context.Context) error {
	_, err := c.svc.Unbind(ctx, &worktreepb.UnbindRequest{AgentId: c.agent.ID()})
	return err
}

// RequestSwitch asks to work in another worktree of the home repository for a while
// (SWITCH_PENDING). Operators decide it with ApproveSwitch or RejectSwitch, or, with
// requiresHITL, a human decides HITL invocation Status.HITL.
func (c *Client) RequestSwitch(ctx context.Context, target string, requiresHITL bool) (Status, error) {
	var hdr metadata.MD
	res, err := c.svc.RequestSwitch(ctx, &worktreepb.SwitchRequest{AgentId: c.agent.ID(), TargetWorktreeId: target, RequiresHitl: requiresHITL}, grpc.Header(&hdr))
	if err != nil {
		return Status{}, err
	}
	return fromHeaders(res, hdr), nil
}

// Status returns the agent's binding.
func (c *Client) Status(ctx context.Context) (Status, error) {
	return statusOf(ctx, c.svc, c.agent.ID())
}

// Path is the directory of the worktree the agent works in now (home, or an approved
// switch's target); ErrNotBound when it holds none. Open it with confine.Open to keep every
// file operation inside it.
func (c *Client) Path(ctx context.Context) (string, error) {
	st, err := c.Status(ctx)
	if err != nil {
		return "", err
	}
	if !st.Bound() || st.Path == "" {
		return "", fmt.Errorf("%w (state %s)", ErrNotBound, st.State)
	}
	return st.Path, nil
}

// WaitState polls Status every interval (zero: 200 ms) until done accepts it, and returns it;
// e.g. to wait for a failed bind's retries to end, or for a switch to return home.
func (c *Client) WaitState(ctx context.Context, interval time.Duration, done func(Status) bool) (Status, error) {
	return waitState(ctx, c.svc, c.agent.ID(), interval, done)
}

// Operator makes an operator's worktree calls over a connection that carries the operator's
// credentials.
type Operator struct {
	svc worktreepb.WorktreeServiceClient
}

// NewOperator returns the operator client of a connection.
func NewOperator(conn grpc.ClientConnInterface) *Operator {
	return &Operator{svc: worktreepb.NewWorktreeServiceClient(conn)}
}

// ApproveSwitch approves agent's pending switch for ttl (zero: the server's default, 30 min;
// at most 24 h): the agent works in the target until the TTL returns it home. target, when
// not empty, must be the pending switch's.
func (o *Operator) ApproveSwitch(ctx context.Context, agent, target string, ttl time.Duration) (Status, error) {
	var hdr metadata.MD
	res, err := o.svc.ApproveSwitch(ctx, &worktreepb.SwitchApprove{AgentId: agent, TargetWorktreeId: target, TtlMs: uint64(ttl.Milliseconds())}, grpc.Header(&hdr))
	if err != nil {
		return Status{}, err
	}
	return fromHeaders(res, hdr), nil
}

// RejectSwitch rejects agent's pending switch, or revokes an approved one (the agent returns
// home at once).
func (o *Operator) RejectSwitch(ctx context.Context, agent, reason string) (Status, error) {
	var hdr metadata.MD
	res, err := o.svc.RejectSwitch(ctx, &worktreepb.SwitchReject{AgentId: agent, Reason: reason}, grpc.Header(&hdr))
	if err != nil {
		return Status{}, err
	}
	return fromHeaders(res, hdr), nil
}

// Unbind ends agent's binding (§16.3 manual recovery clears BIND_FAILED this way).
func (o *Operator) Unbind(ctx context.Context, agent string) error {
	_, err := o.svc.Unbind(ctx, &worktreepb.UnbindRequest{AgentId: agent})
	return err
}

// Status returns agent's binding.
func (o *Operator) Status(ctx context.Context, agent string) (Status, error) {
	return statusOf(ctx, o.svc, agent)
}

// WaitState polls agent's Status like Client.WaitState.
func (o *Operator) WaitState(ctx context.Context, agent string, interval time.Duration, done func(Status) bool) (Status, error) {
	return waitState(ctx, o.svc, agent, interval, done)
}

func statusOf(ctx context.Context, svc worktreepb.WorktreeServiceClient, agent string) (Status, error) {
	var hdr metadata.MD
	res, err := svc.Status(ctx, &worktreepb.StatusRequest{AgentId: agent}, grpc.Header(&hdr))
	if err != nil {
		return Status{}, err
	}
	return fromHeaders(res, hdr), nil
}

func waitState(ctx context.Context, svc worktreepb.WorktreeServiceClient, agent string, interval time.Duration, done func(Status) bool) (Status, error) {
	if interval <= 0 {
		interval = 200 * time.Millisecond
	}
	for {
		st, err := statusOf(ctx, svc, agent)
		if err != nil || done(st) {
			return st, err
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(interval):
		}
	}
}

// fromHeaders reads a binding from a StatusResponse (nil for Bind) and the response headers.
func fromHeaders(res *worktreepb.StatusResponse, hdr metadata.MD) Status {
	get := func(k string) string {
		v := hdr.Get(k)
		if len(v) == 0 {
			return ""
		}
		// The server escapes values as Go string literals without quotes.
		if s, err := strconv.Unquote(`"` + v[0] + `"`); err == nil {
			return s
		}
		return v[0]
	}
	num := func(k string) int {
		n, _ := strconv.Atoi(get(k))
		return n
	}
	st := Status{
		State: get(wire.WorktreeStateHeader), Branch: get(wire.WorktreeBranchHeader), Path: get(wire.WorktreePathHeader),
		Home: get(wire.WorktreeHomeHeader), Target: get(wire.WorktreeTargetHeader), Reason: get(wire.WorktreeReasonHeader),
		Attempts: num(wire.WorktreeAttemptsHeader), Retries: num(wire.WorktreeRetriesHeader),
		HITL: get(wire.WorktreeHITLHeader), Note: get(wire.WorktreeNoteHeader),
	}
	if ms, err := strconv.ParseInt(get(wire.WorktreeTTLRemainingHeader), 10, 64); err == nil {
		st.TTLRemaining = time.Duration(ms) * time.Millisecond
	}
	if t, err := time.Parse(time.RFC3339Nano, get(wire.WorktreeExpiresHeader)); err == nil {
		st.ExpiresAt = t
	}
	if res != nil {
		st.State, st.RepoID, st.WorktreeID = res.GetState(), res.GetRepoId(), res.GetWorktreeId()
	}
	if st.WorktreeID == "" && st.Bound() && st.State != StateBoundNonHome {
		st.WorktreeID = st.Home // Bind answers no StatusResponse: at home
	}
	return st
}
