package test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	wtsdk "github.com/sw4rm/sw4rm-temporal/sdk/worktree"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// TestWorktreeEnvelopeScope: on both stores, an agent may send envelopes naming only the
// worktree it is bound to (§6.4): unbound, every envelope naming a worktree is refused with
// permission_denied (and audited); bound at home, its own repository and worktree pass and
// another worktree or repository is refused; while an approved switch lasts, the target passes
// and home is refused; envelopes naming none always pass.
func TestWorktreeEnvelopeScope(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, _ := worktreeSystem(t, kind)
			ctx := context.Background()
			coder := dialBinder(t, sys, "coder")
			peer := dialBinder(t, sys, "peer")
			send := func(repoID, worktreeID string) (*commonpb.Envelope, error) {
				return coder.Send(ctx, sdk.Message{To: peer.ID(), Payload: []byte(`{"work":1}`), RepoID: repoID, WorktreeID: worktreeID})
			}
			refused := func(repoID, worktreeID, want string) {
				t.Helper()
				env, err := send(repoID, worktreeID)
				require.Error(t, err, "%s/%s", repoID, worktreeID)
				assert.Equal(t, commonpb.ErrorCode_PERMISSION_DENIED, sdk.CodeOf(err), "%v", err)
				assert.Contains(t, err.Error(), want)
				require.Eventually(t, func() bool {
					evs, err := sys.app.Store().Audit().List(ctx, store.AuditFilter{MessageID: env.GetMessageId(), TypePrefix: "message.rejected"})
					require.NoError(t, err)
					return len(evs) == 1
				}, 5*time.Second, 20*time.Millisecond, "the refusal is audited")
			}
			passes := func(repoID, worktreeID string) {
				t.Helper()
				_, err := send(repoID, worktreeID)
				assert.NoError(t, err, "%s/%s", repoID, worktreeID)
			}

			refused("app", "home", "not bound to a worktree (state UNBOUND")
			passes("", "")

			_, err := coder.wt.Bind(ctx, "app", "home")
			require.NoError(t, err)
			passes("app", "home")
			passes("", "home")
			passes("app", "")
			refused("app", "elsewhere", `bound to repo_id "app" worktree_id "home"`)
			refused("lib", "home", `repo_id "lib"`)

			// An approved switch: the target, not home, until the TTL brings the agent back.
			op := wtsdk.NewOperator(coder.Conn())
			_, err = coder.wt.RequestSwitch(ctx, "hotfix", false)
			require.NoError(t, err)
			refused("app", "hotfix", "SWITCH_PENDING")
			_, err = op.ApproveSwitch(ctx, coder.ID(), "hotfix", 2*time.Second)
			require.NoError(t, err)
			passes("app", "hotfix")
			refused("app", "home", "BOUND_NON_HOME")
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			_, err = coder.wt.WaitState(wctx, 100*time.Millisecond, func(s wtsdk.Status) bool { return s.State == wtsdk.StateBoundHome })
			require.NoError(t, err, "the TTL returns it home")
			passes("app", "home")
			refused("app", "hotfix", `worktree_id "hotfix"`)

			require.NoError(t, coder.wt.Unbind(ctx))
			refused("app", "home", "UNBOUND")
			passes("", "")
		})
	}
}
