package worktree_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
)

func TestValidateNames(t *testing.T) {
	type check func(string) *protocol.Error
	id := map[string]check{"repo_id": worktree.ValidateRepoID, "worktree_id": worktree.ValidateWorktreeID}
	cases := []struct {
		name  string
		in    string
		idOK  bool   // accepted as repo_id and worktree_id
		brOK  bool   // accepted as a branch
		match string // part of the refusal message
	}{
		{"plain", "agent-1", true, true, ""},
		{"dots and underscores", "svc_v1.2", true, true, ""},
		{"at sign alone inside", "me@home", true, true, ""},
		{"unicode", "wörk", true, true, ""},
		{"hierarchical branch", "sw4rm/agent-1", false, true, `must not contain "/"`},
		{"deep branch", "a/b/c", false, true, `must not contain "/"`},
		{"empty", "", false, false, "is required"},
		{"too long", strings.Repeat("a", worktree.MaxBranchLength+1), false, false, "is longer than"},
		{"dot dot", "a..b", false, false, `".."`},
		{"parent", "..", false, false, `".."`},
		{"leading dash", "-rf", false, false, `start with "-"`},
		{"leading dot", ".hidden", false, false, `starting with "."`},
		{"dot alone", ".", false, false, `end with "."`},
		{"component with leading dot", "a/.b", false, false, ""},
		{"trailing dot", "a.", false, false, `end with "."`},
		{"lock suffix", "main.lock", false, false, `".lock"`},
		{"component lock suffix", "x.lock/y", false, false, ""},
		{"reflog syntax", "a@{1}", false, false, `"@{"`},
		{"at alone", "@", false, false, `"@"`},
		{"space", "a b", false, false, "space"},
		{"tab", "a\tb", false, false, "control characters"},
		{"newline", "a\nb", false, false, "control characters"},
		{"nul", "a\x00b", false, false, "control characters"},
		{"del", "a\x7fb", false, false, "control characters"},
		{"tilde", "a~1", false, false, "~ ^ :"},
		{"caret", "a^", false, false, "~ ^ :"},
		{"colon", "a:b", false, false, "~ ^ :"},
		{"question mark", "a?", false, false, "? * ["},
		{"star", "a*", false, false, "? * ["},
		{"bracket", "a[0]", false, false, "? * ["},
		{"backslash", `a\b`, false, false, `"\"`},
		{"leading slash", "/a", false, false, ""},
		{"trailing slash", "a/", false, false, ""},
		{"double slash", "a//b", false, false, ""},
		{"invalid utf-8", "a\xffb", false, false, "UTF-8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for field, f := range id {
				err := f(c.in)
				if c.idOK {
					assert.Nil(t, err, field)
					continue
				}
				require.NotNil(t, err, field)
				assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, err.Code)
				assert.Contains(t, err.Error(), field)
				assert.Contains(t, err.Error(), c.match)
			}
			err := worktree.ValidateBranch(c.in)
			if c.brOK {
				assert.Nil(t, err)
				return
			}
			require.NotNil(t, err)
			assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, err.Code)
			assert.Contains(t, err.Error(), "branch")
			if c.match != `must not contain "/"` {
				assert.Contains(t, err.Error(), c.match)
			}
		})
	}
}

func TestValidateNameLimits(t *testing.T) {
	assert.Nil(t, worktree.ValidateWorktreeID(strings.Repeat("w", worktree.MaxIDLength)))
	assert.NotNil(t, worktree.ValidateWorktreeID(strings.Repeat("w", worktree.MaxIDLength+1)))
	assert.Nil(t, worktree.ValidateBranch(strings.Repeat("b", worktree.MaxBranchLength)))
	assert.NotNil(t, worktree.ValidateBranch("HEAD"))
	assert.Nil(t, worktree.ValidateWorktreeID("HEAD"), "only a branch may not be HEAD")
}
