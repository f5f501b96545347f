package router

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// countingWorktrees is the memory store's binding projection, counting the router's reads
// and failing them on demand.
type countingWorktrees struct {
	store.Worktrees
	reads atomic.Int64
	fail  atomic.Bool
}

func (w *countingWorktrees) GetBinding(ctx context.Context, agentID string) (store.WorktreeBinding, error) {
	w.reads.Add(1)
	if w.fail.Load() {
		return store.WorktreeBinding{}, errors.New("store down")
	}
	return w.Worktrees.GetBinding(ctx, agentID)
}

// worktreesStore is the memory store with w as its binding projection.
type worktreesStore struct {
	handoffsStore
	w *countingWorktrees
}

func (s worktreesStore) Worktrees() store.Worktrees { return s.w }

// named is a message from p that names a repository and a worktree.
func named(repoID, worktreeID string) *commonpb.Envelope {
	env := message("p", "corr-"+repoID+"-"+worktreeID)
	env.RepoId, env.WorktreeId = repoID, worktreeID
	return env
}

// TestEnvelopeNamingAnotherWorktreeIsRefused: an envelope naming a worktree its producer is
// not bound to is refused with permission_denied (§6.4), never admitted, NACKed,
// dead-lettered and audited; one naming the producer's worktree passes, as does any envelope
// naming none; the binding is read afresh, so a change is seen at once; the scheduler's own
// envelopes are not checked.
func TestEnvelopeNamingAnotherWorktreeIsRefused(t *testing.T) {
	ctx := t.Context()
	mem := memory.New()
	t.Cleanup(mem.Close)
	wt := &countingWorktrees{Worktrees: mem.Worktrees()}
	st := worktreesStore{handoffsStore: handoffsStore{Store: mem, h: &fakeHandoffs{}}, w: wt}
	sweepFixture(t, st, time.Minute) // registers p and c
	r := New(st, Config{BufferCapacity: 1000}, audit.New(slog.New(slog.DiscardHandler), st.Audit()))

	refused := func(env *commonpb.Envelope, want string) {
		t.Helper()
		perr, err := r.Send(ctx, env, "c")
		require.NoError(t, err)
		require.NotNil(t, perr, "%s/%s is refused", env.GetRepoId(), env.GetWorktreeId())
		assert.Equal(t, commonpb.ErrorCode_PERMISSION_DENIED, perr.Code)
		assert.Contains(t, perr.Msg, want)
		assert.Contains(t, perr.Msg, "§6.4")
		if rec, err := st.Messages().GetMessage(ctx, env.GetMessageId()); err == nil {
			assert.NotEqual(t, commonpb.EnvelopeState_ENVELOPE_STATE_SENT, rec.State, "a refused message is never admitted")
		}
	}
	passes := func(env *commonpb.Envelope) {
		t.Helper()
		perr, err := r.Send(ctx, env, "c")
		require.NoError(t, err)
		assert.Nil(t, perr, "%s/%s passes", env.GetRepoId(), env.GetWorktreeId())
	}

	// Unbound: no binding recorded at all.
	env := named("app", "home")
	refused(env, "not bound to a worktree (state UNBOUND")
	nacks, err := st.Messages().Claim(ctx, store.ClaimRequest{AgentID: "p", Limit: 100, Lease: time.Minute})
	require.NoError(t, err)
	nacked := false
	for _, d := range nacks {
		if a, perr := protocol.ParseAck(d.Envelope); perr == nil && a.AckForMessageID == env.GetMessageId() {
			nacked = a.ErrorCode == commonpb.ErrorCode_PERMISSION_DENIED && strings.Contains(a.Note, "§6.4")
		}
	}
	assert.True(t, nacked, "the producer is NACKed with permission_denied")
	dl, err := st.DLQ().ListDeadLetters(ctx, store.DLQFilter{ProducerID: "p"})
	require.NoError(t, err)
	require.Len(t, dl, 1)
	assert.Equal(t, store.DLQPolicyViolation, dl[0].Class)
	require.Eventually(t, func() bool {
		evs, err := st.Audit().List(ctx, store.AuditFilter{MessageID: env.GetMessageId(), TypePrefix: "message.rejected"})
		require.NoError(t, err)
		if len(evs) != 1 {
			return false
		}
		var d map[string]any
		require.NoError(t, json.Unmarshal(evs[0].Details, &d))
		return d["error_code"] == "PERMISSION_DENIED" && strings.Contains(d["reason"].(string), "§6.4")
	}, 5*time.Second, 10*time.Millisecond, "the refusal is audited")

	// BIND_FAILED is no binding either.
	require.NoError(t, mem.Worktrees().PutBinding(ctx, store.WorktreeBinding{AgentID: "p", State: "BIND_FAILED", RepoID: "app",
		HomeWorktreeID: "home", Reason: "worktree_locked", UpdatedAt: time.Now()}))
	refused(named("app", ""), "state BIND_FAILED")

	// Bound at home: its repository and worktree pass, anything else is refused.
	require.NoError(t, mem.Worktrees().PutBinding(ctx, store.WorktreeBinding{AgentID: "p", State: "BOUND_HOME", RepoID: "app",
		HomeWorktreeID: "home", WorktreeID: "home", Branch: "sw4rm/home", UpdatedAt: time.Now()}))
	passes(named("app", "home"))
	passes(named("app", ""))
	passes(named("", "home"))
	refused(named("app", "other"), `bound to repo_id "app" worktree_id "home"`)
	refused(named("lib", "home"), `repo_id "lib"`)

	// An approved switch moves the agent: the target passes, home does not, until the TTL
	// brings it back — seen by the very next envelope.
	require.NoError(t, mem.Worktrees().PutBinding(ctx, store.WorktreeBinding{AgentID: "p", State: "BOUND_NON_HOME", RepoID: "app",
		HomeWorktreeID: "home", WorktreeID: "hotfix", TargetWorktreeID: "hotfix", UpdatedAt: time.Now()}))
	passes(named("app", "hotfix"))
	refused(named("app", "home"), "BOUND_NON_HOME")
	require.NoError(t, mem.Worktrees().PutBinding(ctx, store.WorktreeBinding{AgentID: "p", State: "BOUND_HOME", RepoID: "app",
		HomeWorktreeID: "home", WorktreeID: "home", UpdatedAt: time.Now()}))
	passes(named("app", "home"))
	refused(named("app", "hotfix"), `worktree_id "hotfix"`)

	// Envelopes naming no worktree cost no read.
	before := wt.reads.Load()
	for range 20 {
		passes(message("p", "plain"))
	}
	assert.Equal(t, before, wt.reads.Load(), "an envelope naming no worktree reads no binding")

	// The scheduler's envelopes are not checked.
	ctrl := message(protocol.SchedulerID, "ctrl")
	ctrl.RepoId, ctrl.WorktreeId = "elsewhere", "x"
	before = wt.reads.Load()
	require.NoError(t, r.Notify(ctx, "p", ctrl))
	assert.Equal(t, before, wt.reads.Load(), "the scheduler's envelopes are not checked")

	// A store that cannot answer is a failure of the server, not a refusal.
	wt.fail.Store(true)
	perr, err := r.Send(ctx, named("app", "home"), "c")
	assert.Nil(t, perr)
	assert.ErrorContains(t, err, "worktree binding")
}
