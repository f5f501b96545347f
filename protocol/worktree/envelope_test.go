package worktree_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
)

func TestCheckEnvelope(t *testing.T) {
	home := worktree.Binding{State: worktree.StateBoundHome, RepoID: "app", WorktreeID: "home"}
	pending := worktree.Binding{State: worktree.StateSwitchPending, RepoID: "app", WorktreeID: "home"}
	away := worktree.Binding{State: worktree.StateBoundNonHome, RepoID: "app", WorktreeID: "hotfix"}
	failed := worktree.Binding{State: worktree.StateBindFailed, RepoID: "app"}
	for _, tc := range []struct {
		name           string
		b              worktree.Binding
		repo, wt       string
		ok             bool
		wantInRefusal  string
		wantInRefusal2 string
	}{
		{name: "no names, unbound", b: worktree.Binding{}, ok: true},
		{name: "no names, failed", b: failed, ok: true},
		{name: "home, both names", b: home, repo: "app", wt: "home", ok: true},
		{name: "home, repo only", b: home, repo: "app", ok: true},
		{name: "home, worktree only", b: home, wt: "home", ok: true},
		{name: "pending switch works at home", b: pending, repo: "app", wt: "home", ok: true},
		{name: "approved switch target", b: away, repo: "app", wt: "hotfix", ok: true},
		{name: "approved switch, repo only", b: away, repo: "app", ok: true},

		{name: "no binding recorded", b: worktree.Binding{}, repo: "app", wt: "home", wantInRefusal: "not bound", wantInRefusal2: "UNBOUND"},
		{name: "unbound", b: worktree.Binding{State: worktree.StateUnbound}, wt: "home", wantInRefusal: `worktree_id "home"`, wantInRefusal2: "UNBOUND"},
		{name: "bind failed", b: failed, repo: "app", wantInRefusal: `repo_id "app"`, wantInRefusal2: "BIND_FAILED"},
		{name: "another worktree", b: home, repo: "app", wt: "other", wantInRefusal: `worktree_id "other"`, wantInRefusal2: `bound to repo_id "app" worktree_id "home"`},
		{name: "another repository", b: home, repo: "lib", wt: "home", wantInRefusal: `repo_id "lib"`},
		{name: "another repository alone", b: home, repo: "lib", wantInRefusal: `repo_id "lib"`},
		{name: "pending target not yet approved", b: pending, wt: "hotfix", wantInRefusal: "SWITCH_PENDING"},
		{name: "home while away", b: away, repo: "app", wt: "home", wantInRefusal: `worktree_id "hotfix"`, wantInRefusal2: "BOUND_NON_HOME"},
		{name: "case matters", b: home, repo: "App", wt: "home", wantInRefusal: `repo_id "App"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := worktree.CheckEnvelope(tc.b, tc.repo, tc.wt)
			if tc.ok {
				assert.NoError(t, err)
				return
			}
			if assert.Error(t, err) {
				assert.Contains(t, err.Error(), tc.wantInRefusal)
				assert.Contains(t, err.Error(), tc.wantInRefusal2)
				assert.Contains(t, err.Error(), "§6.4")
			}
		})
	}
}
