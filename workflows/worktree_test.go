package workflows_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// worktreeHarness runs WorktreeWorkflow with its activities mocked: binds succeed unless
// fail says otherwise, every git call, record and escalation is remembered, and a switch's
// HITL wait answers with hitl after hitlAfter.
type worktreeHarness struct {
	t   *testing.T
	env *testsuite.TestWorkflowEnvironment
	t0  time.Time

	mu sync.Mutex
	// fail decides whether an EnsureWorktree call fails, and with what reason ("" = no).
	fail      func(in activities.EnsureWorktreeInput, call int) worktree.Reason
	ensures   []activities.EnsureWorktreeInput
	ensuredAt []time.Time
	releases  []activities.ReleaseWorktreeInput
	records   []activities.RecordWorktreeInput
	escalated []activities.BindRecoveryTimeoutInput
	hitl      hitl.Outcome
	hitlAfter time.Duration
	invs      []hitl.Invocation
}

func newWorktreeHarness(t *testing.T) *worktreeHarness {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	h := &worktreeHarness{t: t, env: suite.NewTestWorkflowEnvironment(), t0: time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)}
	h.env.SetStartTime(h.t0)
	h.fail = func(activities.EnsureWorktreeInput, int) worktree.Reason { return "" }
	var acts *activities.Activities
	h.env.OnActivity(acts.EnsureWorktree, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.EnsureWorktreeInput) (activities.EnsuredWorktree, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.ensures = append(h.ensures, in)
		h.ensuredAt = append(h.ensuredAt, h.env.Now())
		if r := h.fail(in, len(h.ensures)); r != "" {
			return activities.EnsuredWorktree{}, temporal.NewNonRetryableApplicationError(string(r)+" for "+in.WorktreeID, string(r), nil)
		}
		return activities.EnsuredWorktree{Branch: "sw4rm/" + in.WorktreeID, Path: "/wt/" + in.RepoID + "/" + in.WorktreeID, Created: true}, nil
	})
	h.env.OnActivity(acts.ReleaseWorktree, mock.Anything, mock.Anything).Return(recorder(&h.mu, &h.releases))
	h.env.OnActivity(acts.RecordWorktree, mock.Anything, mock.Anything).Return(recorder(&h.mu, &h.records))
	h.env.OnActivity(acts.NotifyBindRecoveryTimeout, mock.Anything, mock.Anything).Return(recorder(&h.mu, &h.escalated))
	h.env.RegisterWorkflow(workflows.HitlWait)
	h.env.OnWorkflow(workflows.HitlWait, mock.Anything, mock.Anything).Return(
		func(ctx workflow.Context, in workflows.HitlWaitInput) (hitl.Outcome, error) {
			h.mu.Lock()
			h.invs = append(h.invs, in.Invocation)
			out, after := h.hitl, h.hitlAfter
			h.mu.Unlock()
			if err := workflow.Sleep(ctx, after); err != nil {
				return hitl.Outcome{}, err
			}
			out.InvocationID = in.Invocation.InvocationID
			return out, nil
		})
	return h
}

// wtUpdate is what the test environment's callbacks reported for one update.
type wtUpdate struct {
	updateOutcome
	state workflows.WorktreeState
	bind  workflows.WorktreeBindResult
}

// update sends an update at a moment of workflow time and records the outcome.
func (h *worktreeHarness) update(after time.Duration, name string, arg any) *wtUpdate {
	res := &wtUpdate{}
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(name, "", res.callback(func(v any) {
			switch s := v.(type) {
			case workflows.WorktreeState:
				res.state = s
			case workflows.WorktreeBindResult:
				res.bind, res.state = s, s.State
			}
		}), arg)
	}, after)
	return res
}

func (h *worktreeHarness) bind(after time.Duration, repo, wt string) *wtUpdate {
	return h.update(after, workflows.WorktreeBindUpdate, workflows.WorktreeBind{RepoID: repo, WorktreeID: wt, By: "coder"})
}

func (h *worktreeHarness) unbind(after time.Duration) *wtUpdate {
	return h.update(after, workflows.WorktreeUnbindUpdate, workflows.WorktreeUnbind{By: "coder"})
}

func (h *worktreeHarness) requestSwitch(after time.Duration, target string, hitl bool) *wtUpdate {
	return h.update(after, workflows.WorktreeSwitchRequestUpdate, workflows.WorktreeSwitchRequest{TargetWorktreeID: target, RequiresHITL: hitl, By: "coder"})
}

func (h *worktreeHarness) approve(after time.Duration, target string, ttl time.Duration) *wtUpdate {
	return h.update(after, workflows.WorktreeSwitchApproveUpdate, workflows.WorktreeSwitchApproval{TargetWorktreeID: target, TTL: ttl, By: "operator:ops"})
}

func (h *worktreeHarness) reject(after time.Duration, reason string) *wtUpdate {
	return h.update(after, workflows.WorktreeSwitchRejectUpdate, workflows.WorktreeSwitchRejection{Reason: reason, By: "operator:ops"})
}

// query reads the state at a moment of workflow time.
func (h *worktreeHarness) query(after time.Duration) *workflows.WorktreeState {
	st := &workflows.WorktreeState{}
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(workflows.WorktreeStateQuery)
		require.NoError(h.t, err)
		require.NoError(h.t, v.Get(st))
	}, after)
	return st
}

func (h *worktreeHarness) run() workflows.WorktreeState {
	h.t.Helper()
	h.env.ExecuteWorkflow(workflows.WorktreeWorkflow, workflows.WorktreeInput{AgentID: "coder"})
	require.True(h.t, h.env.IsWorkflowCompleted())
	require.NoError(h.t, h.env.GetWorkflowError())
	var res workflows.WorktreeState
	require.NoError(h.t, h.env.GetWorkflowResult(&res))
	return res
}

// transitions lists "FROM -event-> TO" of every recorded transition, in order.
func (h *worktreeHarness) transitions() []string {
	var out []string
	for _, r := range h.records {
		if r.Type == activities.WorktreeEventState {
			out = append(out, r.From+" -"+r.Event+"-> "+r.Binding.State)
		}
	}
	return out
}

// TestWorktreeBindAndUnbind: a bind locks the home worktree and answers ok; a second bind of
// it is answered ok at once, one of another worktree refused; an unbind releases it and ends
// the run; every transition is recorded.
func TestWorktreeBindAndUnbind(t *testing.T) {
	h := newWorktreeHarness(t)
	b := h.bind(time.Second, "app", "w1")
	mid := h.query(2 * time.Second)
	again := h.bind(3*time.Second, "app", "w1")
	other := h.bind(4*time.Second, "app", "w2")
	u := h.unbind(5 * time.Second)
	res := h.run()

	requireAccepted(t, b)
	assert.True(t, b.bind.OK, b.bind.Reason)
	assert.Equal(t, worktree.StateBoundHome, b.state.State)
	assert.Equal(t, "/wt/app/w1", b.state.Path)
	assert.Equal(t, "sw4rm/w1", b.state.Branch)
	assert.Equal(t, worktree.StateBoundHome, mid.State)
	assert.Equal(t, "w1", mid.WorktreeID)
	requireAccepted(t, again)
	assert.True(t, again.bind.OK)
	assert.Contains(t, again.bind.Reason, "already bound")
	requireRefused(t, other, "unbind it before binding app/w2")
	requireAccepted(t, u)
	assert.Equal(t, worktree.StateUnbound, u.state.State)

	assert.Equal(t, worktree.StateUnbound, res.State)
	require.Len(t, h.ensures, 1, "the idempotent bind makes no git call")
	assert.True(t, h.ensures[0].Lock, "a home worktree is locked")
	assert.Equal(t, []activities.ReleaseWorktreeInput{{AgentID: "coder", RepoID: "app", WorktreeID: "w1"}}, h.releases)
	assert.Equal(t, []string{"UNBOUND -bind_ok-> BOUND_HOME", "BOUND_HOME -unbind-> UNBOUND"}, h.transitions())
	last := h.records[len(h.records)-1].Binding
	assert.Empty(t, last.RepoID, "an unbound agent has no worktree")
	assert.Equal(t, "coder", h.records[0].Actor)
}

// TestWorktreeBindFailureRetries: a failed bind answers ok=false with its reason, enters
// BIND_FAILED, is retried after 1 s, 2 s and 4 s (durable timers) and stays BIND_FAILED with
// the last reason; operators are told once, at the 60 s recovery timeout; an unbind clears it.
func TestWorktreeBindFailureRetries(t *testing.T) {
	h := newWorktreeHarness(t)
	h.fail = func(activities.EnsureWorktreeInput, int) worktree.Reason { return worktree.ReasonWorktreeNotFound }
	b := h.bind(time.Second, "app", "w1")
	after := h.query(30 * time.Second)
	u := h.unbind(2 * time.Minute)
	res := h.run()

	requireAccepted(t, b)
	assert.False(t, b.bind.OK)
	assert.Contains(t, b.bind.Reason, "worktree_not_found: worktree_not_found for w1")
	assert.Contains(t, b.bind.Reason, "retry 1 of 3")
	assert.Equal(t, worktree.StateBindFailed, b.state.State)

	require.Len(t, h.ensuredAt, 4, "the first attempt and three retries")
	var gaps []time.Duration
	for i := 1; i < len(h.ensuredAt); i++ {
		gaps = append(gaps, h.ensuredAt[i].Sub(h.ensuredAt[i-1]))
	}
	assert.Equal(t, worktree.BindRetry.Delays(), gaps, "§16.3's exponential backoff")
	assert.Equal(t, worktree.StateBindFailed, after.State)
	assert.Equal(t, worktree.ReasonWorktreeNotFound, after.Reason)
	assert.Equal(t, 4, after.Attempts)
	assert.Equal(t, 3, after.Retries)
	assert.True(t, after.NextRetryAt.IsZero(), "no retry left")

	require.Len(t, h.escalated, 1, "operators are told once")
	assert.Equal(t, "worktree_not_found", h.escalated[0].Reason)
	assert.Equal(t, 4, h.escalated[0].Attempts)
	assert.Equal(t, h.t0.Add(time.Second), h.escalated[0].FailedAt)

	requireAccepted(t, u)
	assert.Equal(t, worktree.StateUnbound, res.State)
	assert.Empty(t, h.releases, "nothing was locked")
	assert.Equal(t, []string{"UNBOUND -bind_failed-> BIND_FAILED", "BIND_FAILED -unbind-> UNBOUND"}, h.transitions())
	var failed int
	for _, r := range h.records {
		if r.Type == activities.WorktreeEventBindFailed {
			failed++
			assert.Equal(t, "worktree_not_found", r.Binding.Reason)
		}
	}
	assert.Equal(t, 3, failed, "each failed retry is recorded, without a transition")
}

// TestWorktreeRetryRecovers: a retry that succeeds moves BIND_FAILED straight to BOUND_HOME
// (§16.2 "Successful retry BIND"), and no operator is told.
func TestWorktreeRetryRecovers(t *testing.T) {
	h := newWorktreeHarness(t)
	h.fail = func(_ activities.EnsureWorktreeInput, call int) worktree.Reason {
		if call <= 2 {
			return worktree.ReasonWorktreeLocked
		}
		return ""
	}
	b := h.bind(time.Second, "app", "w1")
	st := h.query(90 * time.Second)
	h.unbind(2 * time.Minute)
	h.run()

	assert.False(t, b.bind.OK)
	assert.Contains(t, b.bind.Reason, "worktree_locked")
	assert.Equal(t, worktree.StateBoundHome, st.State)
	assert.Empty(t, st.Reason, "the failure is cleared")
	assert.Zero(t, st.Attempts)
	assert.Empty(t, h.escalated)
	assert.Equal(t, []string{"UNBOUND -bind_failed-> BIND_FAILED", "BIND_FAILED -bind_ok-> BOUND_HOME", "BOUND_HOME -unbind-> UNBOUND"}, h.transitions())
}

// TestWorktreeManualRecovery: a new BIND of the failed worktree while BIND_FAILED retries it
// at once; a BIND of another worktree resets the failure first (§16.2 "Retry reset").
func TestWorktreeManualRecovery(t *testing.T) {
	h := newWorktreeHarness(t)
	h.fail = func(in activities.EnsureWorktreeInput, _ int) worktree.Reason {
		if in.WorktreeID == "broken" {
			return worktree.ReasonFilesystemError
		}
		return ""
	}
	h.bind(time.Second, "app", "broken")
	again := h.bind(90*time.Second, "app", "broken")
	other := h.bind(100*time.Second, "app", "w2")
	h.unbind(2 * time.Minute)
	h.run()

	assert.False(t, again.bind.OK)
	assert.Contains(t, again.bind.Reason, "retry 1 of 3", "a manual retry starts the retries afresh")
	assert.Equal(t, 5, again.state.Attempts)
	require.True(t, other.bind.OK, other.bind.Reason)
	assert.Equal(t, "w2", other.state.HomeWorktreeID)
	assert.Equal(t, []string{"UNBOUND -bind_failed-> BIND_FAILED", "BIND_FAILED -retry_reset-> UNBOUND", "UNBOUND -bind_ok-> BOUND_HOME",
		"BOUND_HOME -unbind-> UNBOUND"}, h.transitions())
	assert.Len(t, h.escalated, 1, "the first failure stayed past the recovery timeout")
}

// TestWorktreeSwitchApprovedReturnsHome: an approved switch binds the target (not locked)
// for its TTL; the durable timer returns the agent home; decisions are checked.
func TestWorktreeSwitchApprovedReturnsHome(t *testing.T) {
	h := newWorktreeHarness(t)
	h.bind(time.Second, "app", "home")
	early := h.approve(2*time.Second, "", time.Minute)
	req := h.requestSwitch(3*time.Second, "hotfix", false)
	self := h.requestSwitch(3*time.Second+time.Millisecond, "home", false)
	unbindPending := h.unbind(4 * time.Second)
	wrong := h.approve(5*time.Second, "other", time.Minute)
	tooLong := h.approve(5*time.Second, "", 25*time.Hour)
	ok := h.approve(6*time.Second, "hotfix", 10*time.Minute)
	during := h.query(5 * time.Minute)
	back := h.query(11 * time.Minute)
	h.unbind(12 * time.Minute)
	h.run()

	requireRefused(t, early, "switch_approve is not allowed in state BOUND_HOME")
	requireAccepted(t, req)
	assert.Equal(t, worktree.StateSwitchPending, req.state.State)
	assert.Equal(t, "home", req.state.WorktreeID, "still at home while pending")
	requireRefused(t, self, "switch_request is not allowed in state SWITCH_PENDING")
	requireRefused(t, unbindPending, "unbind is not allowed in state SWITCH_PENDING")
	requireRefused(t, wrong, "is to hotfix, not other")
	requireRefused(t, tooLong, "outside")
	requireAccepted(t, ok)
	assert.Equal(t, worktree.StateBoundNonHome, ok.state.State)
	assert.Equal(t, "hotfix", ok.state.WorktreeID)
	assert.Equal(t, "/wt/app/hotfix", ok.state.Path)
	assert.Equal(t, h.t0.Add(6*time.Second+10*time.Minute), ok.state.ExpiresAt)
	assert.Equal(t, 10*time.Minute, ok.state.TTLRemaining(h.t0.Add(6*time.Second)))

	assert.Equal(t, worktree.StateBoundNonHome, during.State)
	assert.Equal(t, worktree.StateBoundHome, back.State, "the TTL returned it home")
	assert.Equal(t, "home", back.WorktreeID)
	assert.Equal(t, "/wt/app/home", back.Path)
	assert.Empty(t, back.TargetWorktreeID)
	require.Len(t, h.ensures, 2)
	assert.False(t, h.ensures[1].Lock, "a non-home worktree is not locked")
	assert.Equal(t, []string{"UNBOUND -bind_ok-> BOUND_HOME", "BOUND_HOME -switch_request-> SWITCH_PENDING",
		"SWITCH_PENDING -switch_approve-> BOUND_NON_HOME", "BOUND_NON_HOME -ttl_expired-> BOUND_HOME", "BOUND_HOME -unbind-> UNBOUND"}, h.transitions())
	for _, r := range h.records {
		if r.Event == "switch_approve" {
			assert.Equal(t, "operator:ops", r.Actor)
			assert.Equal(t, h.t0.Add(6*time.Second+10*time.Minute), r.Binding.ExpiresAt)
		}
	}
}

// TestWorktreeSwitchRejectedAndRevoked: a rejected switch leaves the agent home; an approved
// one revoked returns it home at once, before its TTL; a pending switch nobody decides is
// rejected after SwitchPendingTimeout.
func TestWorktreeSwitchRejectedAndRevoked(t *testing.T) {
	h := newWorktreeHarness(t)
	h.bind(time.Second, "app", "home")
	h.requestSwitch(2*time.Second, "hotfix", false)
	rej := h.reject(3*time.Second, "not today")
	noSwitch := h.reject(4*time.Second, "again")
	h.requestSwitch(5*time.Second, "hotfix", false)
	h.approve(6*time.Second, "", 0)
	away := h.query(7 * time.Second)
	revoke := h.reject(8*time.Second, "done early")
	h.requestSwitch(9*time.Second, "hotfix", false)
	lapsed := h.query(9*time.Second + workflows.SwitchPendingTimeout + time.Second)
	h.unbind(3 * time.Hour)
	h.run()

	requireAccepted(t, rej)
	assert.Equal(t, worktree.StateBoundHome, rej.state.State)
	assert.Contains(t, rej.state.Note, "rejected by operator:ops: not today")
	requireRefused(t, noSwitch, "has no switch to reject or revoke")
	assert.Equal(t, workflows.DefaultSwitchTTL, away.TTL, "ttl 0 is the default")
	requireAccepted(t, revoke)
	assert.Equal(t, worktree.StateBoundHome, revoke.state.State)
	assert.Equal(t, "home", revoke.state.WorktreeID)
	assert.Contains(t, revoke.state.Note, "revoked")
	assert.Equal(t, worktree.StateBoundHome, lapsed.State)
	assert.Contains(t, lapsed.Note, "nobody decided it")
	assert.Equal(t, []string{"UNBOUND -bind_ok-> BOUND_HOME",
		"BOUND_HOME -switch_request-> SWITCH_PENDING", "SWITCH_PENDING -switch_reject-> BOUND_HOME",
		"BOUND_HOME -switch_request-> SWITCH_PENDING", "SWITCH_PENDING -switch_approve-> BOUND_NON_HOME", "BOUND_NON_HOME -switch_revoke-> BOUND_HOME",
		"BOUND_HOME -switch_request-> SWITCH_PENDING", "SWITCH_PENDING -switch_reject-> BOUND_HOME",
		"BOUND_HOME -unbind-> UNBOUND"}, h.transitions())
}

// TestWorktreeSwitchByHITL: a switch that requires HITL raises an invocation with reason
// WORKTREE_OVERRIDE; operators' ApproveSwitch is refused meanwhile; a modify decision with a
// ttl_ms patch approves it for that TTL; a denial rejects the next one.
func TestWorktreeSwitchByHITL(t *testing.T) {
	h := newWorktreeHarness(t)
	h.hitl = hitl.Outcome{Decision: hitl.Modify, Patch: []byte(`{"ttl_ms": 120000}`), DecidedBy: "ops"}
	h.hitlAfter = time.Minute
	h.bind(time.Second, "app", "home")
	req := h.requestSwitch(2*time.Second, "hotfix", true)
	op := h.approve(10*time.Second, "", time.Minute)
	away := h.query(2*time.Minute + 30*time.Second)
	back := h.query(4*time.Minute + 30*time.Second)
	h.env.RegisterDelayedCallback(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.hitl = hitl.Outcome{Decision: hitl.Deny, Rationale: "too risky", DecidedBy: "ops"}
	}, 5*time.Minute)
	denied := h.requestSwitch(6*time.Minute, "hotfix", true)
	after := h.query(8 * time.Minute)
	h.unbind(9 * time.Minute)
	h.run()

	requireAccepted(t, req)
	assert.Equal(t, worktree.StateSwitchPending, req.state.State)
	require.NotEmpty(t, req.state.HitlID)
	requireRefused(t, op, "is decided by HITL invocation hitl/"+req.state.HitlID)
	require.Len(t, h.invs, 2)
	inv := h.invs[0]
	assert.Equal(t, "WORKTREE_OVERRIDE", inv.ReasonType)
	assert.Equal(t, req.state.HitlID, inv.InvocationID)
	assert.Equal(t, hitl.Subject{RepoID: "app", WorktreeID: "hotfix", AgentID: "coder"}, inv.Subject)
	assert.Equal(t, hitl.DenyByDefault, inv.Fallback.Policy)

	assert.Equal(t, worktree.StateBoundNonHome, away.State)
	assert.Equal(t, 2*time.Minute, away.TTL, "the patch's TTL")
	assert.Contains(t, away.Note, "approved by HITL decision of ops")
	assert.Equal(t, worktree.StateBoundHome, back.State)
	requireAccepted(t, denied)
	assert.Equal(t, worktree.StateBoundHome, after.State)
	assert.Contains(t, after.Note, "rejected by HITL decision of ops (deny): too risky")
	var actors []string
	for _, r := range h.records {
		if r.Event == "switch_approve" || r.Event == "switch_reject" {
			actors = append(actors, r.Actor)
		}
	}
	assert.Equal(t, []string{"hitl/" + h.invs[0].InvocationID, "hitl/" + h.invs[1].InvocationID}, actors)
}

// TestWorktreeSwitchTargetFails: an approval whose target cannot be made is answered with
// the §16.3 reason and leaves the switch pending; a later approval succeeds.
func TestWorktreeSwitchTargetFails(t *testing.T) {
	h := newWorktreeHarness(t)
	h.fail = func(in activities.EnsureWorktreeInput, call int) worktree.Reason {
		if in.WorktreeID == "hotfix" && call == 2 {
			return worktree.ReasonPermissionDenied
		}
		return ""
	}
	h.bind(time.Second, "app", "home")
	h.requestSwitch(2*time.Second, "hotfix", false)
	first := h.approve(3*time.Second, "", time.Minute)
	pending := h.query(4 * time.Second)
	second := h.approve(5*time.Second, "", time.Minute)
	h.unbind(10 * time.Minute)
	h.run()

	require.True(t, first.accepted && first.done)
	require.Error(t, first.err)
	assert.Contains(t, first.err.Error(), "permission_denied: worktree hotfix could not be bound")
	var app *temporal.ApplicationError
	require.ErrorAs(t, first.err, &app)
	assert.Equal(t, "permission_denied", app.Type())
	assert.Equal(t, worktree.StateSwitchPending, pending.State)
	requireAccepted(t, second)
	assert.Equal(t, worktree.StateBoundNonHome, second.state.State)
}

// TestWorktreeIdleRunEnds: a run whose first bind was refused ends after a minute rather
// than waiting forever.
func TestWorktreeIdleRunEnds(t *testing.T) {
	h := newWorktreeHarness(t)
	bad := h.bind(time.Second, "", "w1")
	res := h.run()
	requireRefused(t, bad, "repo_id and worktree_id are required")
	assert.Equal(t, worktree.StateUnbound, res.State)
	assert.Empty(t, h.records)
}

// TestWorktreeBindQueuedBehindUnbind: a bind queued behind the unbind that ends the run is
// refused as closing (the frontend calls again and reaches the next run): no run ends bound.
func TestWorktreeBindQueuedBehindUnbind(t *testing.T) {
	h := newWorktreeHarness(t)
	h.bind(time.Second, "app", "w1")
	var u, b *wtUpdate
	h.env.RegisterDelayedCallback(func() {
		u = &wtUpdate{}
		b = &wtUpdate{}
		for _, c := range []struct {
			name string
			arg  any
			res  *wtUpdate
		}{{workflows.WorktreeUnbindUpdate, workflows.WorktreeUnbind{}, u}, {workflows.WorktreeBindUpdate, workflows.WorktreeBind{RepoID: "app", WorktreeID: "w1"}, b}} {
			res := c.res
			h.env.UpdateWorkflow(c.name, "", res.callback(nil), c.arg)
		}
	}, 2*time.Second)
	res := h.run()
	requireAccepted(t, u)
	assert.Equal(t, worktree.StateUnbound, res.State, "the run ends unbound")
	if b.rejected == nil {
		require.True(t, b.done)
		var app *temporal.ApplicationError
		require.ErrorAs(t, b.err, &app)
		assert.Equal(t, workflows.WorktreeRunClosing, app.Type())
	} else {
		assert.Contains(t, b.rejected.Error(), "ending")
	}
	assert.Len(t, h.ensures, 1, "the queued bind made no git call")
}
