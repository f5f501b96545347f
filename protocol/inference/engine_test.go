package inference

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDefaultConfidences(t *testing.T) {
	assert.Equal(t, Confidences{
		IdenticalResource: 0.05, IdenticalWorktree: 0.05, OverlappingPaths: 0.2, FreeTextShared: 0.4,
		SharedBranch: 0.5, FreeTextUnrelated: 0.5, Disjoint: 0.8, DifferentRepos: 0.95,
	}, DefaultConfidences())
	// The table is conservative: every rule that names a conflict is below DefaultThreshold,
	// and only the two "no overlap found" rules reach it.
	for _, r := range ruleOrder {
		below := r != RuleDisjoint && r != RuleDifferentRepos
		assert.Equal(t, below, DefaultConfidences().For(r) < DefaultThreshold, r)
	}
}

func TestPathsOverlap(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"src/ui/**", "src/ui/button.go", true},
		{"src/ui/**", "src/ui", true},
		{"src", "src/main.go", true}, // a directory covers its subtree
		{"src", "src2", false},       // but is not a string prefix
		{"src", "src2/main.go", false},
		{"src/ui", "src/api", false},
		{"src/ui/button.go", "src/ui/button.go", true},
		{"src/ui/button.go", "src/ui/button_test.go", false},
		{"SRC/UI", "src/ui/x.go", true}, // case-insensitive
		{`src\ui`, "src/ui/x.go", true}, // backslashes are separators
		{"**", "anything/at/all", true},
		{"", "docs", true}, // the root is the whole repository
		{"./src", "src/a", true},
		{"src/*.go", "src/main.go", true},
		{"src/*.go", "src/main.md", false},
		{"src/*.go", "src/ui/x.go", false}, // * does not cross a slash
		{"src/*", "src/ui/x.go", true},     // src/ui matches src/*, and covers its subtree
		{"*.md", "readme.md", true},
		{"*.md", "main.go", false},
		{"docs/**", "src/main.go", false},
		{"src/**/*.go", "src/a/b/c.go", true},
		{"src/**/*.go", "docs/a.go", false},
		{"src/**/test", "src/test", true}, // ** matches zero segments
		{"**/*.md", "src/main.go", true},  // src/main.go might be a directory holding .md files
		{"src/?.go", "src/a.go", true},
		{"src/?.go", "src/ab.go", false},
		{"src/[ab].go", "src/b.go", true},
		{"src/[ab].go", "src/c.go", false},
		{"src/[^ab].go", "src/c.go", true},
		// two globs
		{"src/*.go", "src/*_test.go", true},
		{"src/*.go", "src/*.md", false},    // suffixes .go and .md are incompatible
		{"src/a*", "src/b*", false},        // prefixes a and b are incompatible
		{"src/ab*", "src/a*", true},        // prefix ab extends a
		{"src/[ab]*.go", "src/*.md", true}, // character class: no suffix disproof, conservative
		{"src/*/x", "src/*/y", false},
		{"src/*/x", "src/**", true},
		{"a/**/b/**/c", "a/x/b/y/c/d", true},
		{"a/**/b/**/c", "a/x/y/c", true}, // a/x/y/c might be a directory holding b/c
		{"a/**/b/**/c", "x/a/b/c", false},
	}
	for _, tc := range cases {
		t.Run(tc.a+" vs "+tc.b, func(t *testing.T) {
			assert.Equal(t, tc.want, PathsOverlap(tc.a, tc.b))
			assert.Equal(t, tc.want, PathsOverlap(tc.b, tc.a), "symmetry")
		})
	}
}

// Long chains of "**" and "*" segments at the size limit are answered exactly (by a dynamic
// program over segment suffixes, O(len(a)*len(b))).
func TestPathsOverlapIsBoundedOnAdversarialGlobs(t *testing.T) {
	deep := strings.Repeat("**/", MaxPathSegments-1) + "z"
	other := strings.Repeat("a/", MaxPathSegments-2) + "b/y"
	assert.True(t, PathsOverlap(deep, other))
	assert.False(t, PathsOverlap("x/"+deep, other))
	assert.False(t, PathsOverlap(strings.Repeat("*/", MaxPathSegments-1)+"z", strings.Repeat("a/", MaxPathSegments-2)+"b/y"))
}

// mustScope parses s or fails the test.
func mustScope(t *testing.T, s string) Scope {
	t.Helper()
	sc, err := ParseScope(s)
	require.NoError(t, err, "scope %q", s)
	return sc
}

func TestRuleEngine(t *testing.T) {
	d := DefaultConfidences()
	cases := []struct {
		name     string
		a, b     string
		rule     string
		conf     float64
		overlaps []string
		notes    []string // substrings of Notes
	}{
		{"different repos", "repo:a path:src", "repo:b path:src", RuleDifferentRepos, d.DifferentRepos, nil,
			[]string{"rule different_repos (confidence 0.95)"}},
		{"different repos, whole repository each", "repo:a", "repo:b branch:main", RuleDifferentRepos, d.DifferentRepos, nil, nil},
		{"different repos ignore same branch name", "repo:a branch:main", "repo:b branch:main", RuleDifferentRepos, d.DifferentRepos, nil, nil},
		{"different repos but identical resource", "repo:a resource:db", "repo:b resource:DB", RuleIdenticalResource, d.IdenticalResource,
			[]string{"resource db"}, nil},
		{"different repos but identical worktree", "repo:a worktree:w", "repo:b worktree:w", RuleIdenticalWorktree, d.IdenticalWorktree,
			[]string{"worktree w"}, nil},
		{"multi-repo scopes sharing one repo", "repo:a repo:b path:src", "repo:b repo:c path:src/x.go", RuleOverlappingPaths, d.OverlappingPaths,
			[]string{"path src overlaps src/x.go"}, nil},
		{"same repo disjoint paths", "repo:r path:src/ui/**", "repo:r path:docs", RuleDisjoint, d.Disjoint, nil,
			[]string{"rule disjoint (confidence 0.8)"}},
		{"same repo src vs src2", "repo:r path:src", "repo:r path:src2", RuleDisjoint, d.Disjoint, nil, nil},
		{"same repo disjoint resources", "repo:r path:a resource:x", "repo:r path:b resource:y", RuleDisjoint, d.Disjoint, nil, nil},
		{"different worktrees disjoint paths", "repo:r worktree:w1 path:a", "repo:r worktree:w2 path:b", RuleDisjoint, d.Disjoint, nil, nil},
		{"resources only, disjoint", "resource:x", "resource:y", RuleDisjoint, d.Disjoint, nil, nil},
		{"resources only vs a repo", "resource:x", "repo:r", RuleDisjoint, d.Disjoint, nil, nil},
		{"glob covers file", "repo:r path:src/ui/**", "repo:r path:src/ui/button.go", RuleOverlappingPaths, d.OverlappingPaths,
			[]string{"path src/ui/** overlaps src/ui/button.go"}, []string{"rule overlapping_paths (confidence 0.2)"}},
		{"directory prefix", "repo:r path:src", "repo:r path:src/main.go", RuleOverlappingPaths, d.OverlappingPaths,
			[]string{"path src overlaps src/main.go"}, nil},
		{"identical path", "repo:r path:a.go", "repo:r path:A.go", RuleOverlappingPaths, d.OverlappingPaths, []string{"path a.go"}, nil},
		{"several overlapping pairs", "repo:r path:src path:docs", "repo:r path:src/a.go path:docs/b.md path:x", RuleOverlappingPaths, d.OverlappingPaths,
			[]string{"path docs overlaps docs/b.md", "path src overlaps src/a.go"}, nil},
		{"different worktrees do not exempt overlap", "repo:r worktree:w1 path:a", "repo:r worktree:w2 path:a", RuleOverlappingPaths, d.OverlappingPaths,
			[]string{"path a"}, nil},
		{"unknown repo is assumed shared", "path:src/a.go", "repo:r path:src/**", RuleOverlappingPaths, d.OverlappingPaths,
			[]string{"path src/** overlaps src/a.go"}, []string{"assumed to share the other's repository"}},
		{"unknown repo, disjoint paths", "path:src/a.go", "repo:r path:docs", RuleDisjoint, d.Disjoint, nil, []string{"assumed to share"}},
		{"repo without paths covers the whole repository", "repo:r", "repo:r path:src/a.go", RuleOverlappingPaths, d.OverlappingPaths,
			[]string{"path ** overlaps src/a.go"}, []string{"covers the whole repository (**)"}},
		{"worktree without paths covers a whole checkout", "worktree:w1", "worktree:w2", RuleOverlappingPaths, d.OverlappingPaths,
			[]string{"path **"}, []string{"covers the whole repository"}},
		{"same branch, disjoint paths", "repo:r branch:main path:a", "repo:r branch:main path:b", RuleSharedBranch, d.SharedBranch,
			[]string{"branch main"}, []string{"rule shared_branch (confidence 0.5)"}},
		{"different branches do not exempt overlap", "repo:r branch:x path:a", "repo:r branch:y path:a/b", RuleOverlappingPaths, d.OverlappingPaths,
			[]string{"path a overlaps a/b"}, nil},
		{"lowest rule wins and others are listed", "repo:r branch:main path:a resource:db", "repo:r branch:main path:a/x resource:db",
			RuleIdenticalResource, d.IdenticalResource, []string{"branch main", "path a overlaps a/x", "resource db"},
			[]string{"rule identical_resource (confidence 0.05)", "also fired: overlapping_paths, shared_branch"}},
		{"identical resource and worktree tie: resource first", "worktree:w resource:db", "worktree:w resource:db", RuleIdenticalResource, d.IdenticalResource,
			[]string{"path **", "resource db", "worktree w"}, []string{"also fired: identical_worktree, overlapping_paths"}},
		{"free text sharing words", "update the billing docs", "refactor billing code", RuleFreeTextShared, d.FreeTextShared,
			[]string{"word billing"}, []string{"rule free_text_shared (confidence 0.4)"}},
		{"free text stop words are not shared", "fix the bug in the parser", "write the docs in the wiki", RuleFreeTextUnrelated, d.FreeTextUnrelated,
			nil, []string{"cannot prove the scopes disjoint"}},
		{"two-letter names are significant", "polish the ui", "repo:r path:src/ui/**", RuleFreeTextShared, d.FreeTextShared, []string{"word ui"}, nil},
		{"free text vs structured, no shared word", "update billing", "repo:r path:src/ui/**", RuleFreeTextUnrelated, d.FreeTextUnrelated, nil, nil},
		{"free text vs structured values", "rotate users-db credentials", "resource:users-db", RuleFreeTextShared, d.FreeTextShared,
			[]string{"word db", "word users"}, nil},
		{"free text even against a different repo", "sw4rm cleanup", "repo:other", RuleFreeTextUnrelated, d.FreeTextUnrelated, nil, nil},
		{"free text in structured scopes is not analysed", "repo:r path:a fix billing", "repo:r path:b fix billing", RuleDisjoint, d.Disjoint,
			nil, []string{"free text is not analysed"}},
	}
	e := &RuleEngine{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := mustScope(t, tc.a), mustScope(t, tc.b)
			got, err := e.CheckParallelism(a, b)
			require.NoError(t, err)
			assert.Equal(t, tc.rule, got.Rule)
			assert.Equal(t, tc.conf, got.Confidence)
			assert.Equal(t, tc.overlaps, got.Overlaps)
			assert.Equal(t, RuleEngineVersion, got.Engine)
			assert.Contains(t, got.Notes, "rule "+tc.rule+" (confidence ")
			for _, n := range tc.notes {
				assert.Contains(t, got.Notes, n)
			}
			// Symmetry: swapping a and b changes nothing.
			swapped, err := e.CheckParallelism(b, a)
			require.NoError(t, err)
			assert.Equal(t, got, swapped, "CheckParallelism(b, a)")
		})
	}
}

func TestRuleEngineEveryRuleReachable(t *testing.T) {
	// Each rule of the table has a pair of scopes that selects it, so no rule is dead.
	pairs := map[string][2]string{
		RuleIdenticalResource: {"resource:x", "resource:x"},
		RuleIdenticalWorktree: {"worktree:w path:a", "worktree:w path:b"},
		RuleOverlappingPaths:  {"path:a", "path:a/b"},
		RuleFreeTextShared:    {"billing", "billing"},
		RuleSharedBranch:      {"branch:m path:a", "branch:m path:b"},
		RuleFreeTextUnrelated: {"billing", "docs"},
		RuleDisjoint:          {"path:a", "path:b"},
		RuleDifferentRepos:    {"repo:a", "repo:b"},
	}
	require.Len(t, pairs, len(ruleOrder))
	for _, r := range ruleOrder {
		p, ok := pairs[r]
		require.True(t, ok, r)
		got, err := (&RuleEngine{}).CheckParallelism(mustScope(t, p[0]), mustScope(t, p[1]))
		require.NoError(t, err)
		assert.Equal(t, r, got.Rule)
		assert.Equal(t, DefaultConfidences().For(r), got.Confidence, r)
		assert.NotEmpty(t, ruleText[r], r)
	}
}

func TestRuleEngineConfigurable(t *testing.T) {
	c := DefaultConfidences()
	c.SharedBranch = 0.75
	c.Disjoint = 0.6
	e, err := NewRuleEngine(c)
	require.NoError(t, err)
	got, err := e.CheckParallelism(mustScope(t, "repo:r branch:m path:a"), mustScope(t, "repo:r branch:m path:b"))
	require.NoError(t, err)
	assert.Equal(t, 0.75, got.Confidence)
	got, err = e.CheckParallelism(mustScope(t, "path:a"), mustScope(t, "path:b"))
	require.NoError(t, err)
	assert.Equal(t, 0.6, got.Confidence)
	assert.Contains(t, got.Notes, "confidence 0.6)")

	// A configured table may rank rules differently: the lowest confidence still wins.
	c = DefaultConfidences()
	c.SharedBranch = 0.01
	got, err = (&RuleEngine{Confidences: c}).CheckParallelism(mustScope(t, "branch:m path:a"), mustScope(t, "branch:m path:a/b"))
	require.NoError(t, err)
	assert.Equal(t, RuleSharedBranch, got.Rule)
	assert.Contains(t, got.Notes, "also fired: overlapping_paths")
}

func TestRuleEngineClampsConfidences(t *testing.T) {
	cases := []struct {
		v, want float64
	}{
		{-0.5, 0}, {1.5, 1}, {math.NaN(), 0}, {math.Inf(1), 1}, {math.Inf(-1), 0}, {0.3, 0.3},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.v), func(t *testing.T) {
			c := DefaultConfidences()
			c.Disjoint = tc.v
			got, err := (&RuleEngine{Confidences: c}).CheckParallelism(mustScope(t, "path:a"), mustScope(t, "path:b"))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got.Confidence)
			if tc.want != tc.v {
				_, err := NewRuleEngine(c)
				assert.ErrorContains(t, err, "confidence Disjoint")
				assert.Error(t, c.Validate())
			} else {
				assert.NoError(t, c.Validate())
			}
		})
	}
	assert.NoError(t, DefaultConfidences().Validate())
	assert.Equal(t, 0.0, DefaultConfidences().For("no-such-rule"))
}

func TestRuleEngineEmptyScope(t *testing.T) {
	e := &RuleEngine{}
	_, err := e.CheckParallelism(Scope{}, mustScope(t, "repo:r"))
	assert.True(t, errors.Is(err, ErrEmptyScope), "%v", err)
	_, err = e.CheckParallelism(mustScope(t, "repo:r"), Scope{})
	assert.True(t, errors.Is(err, ErrEmptyScope), "%v", err)
	var nilEngine *RuleEngine // a nil *RuleEngine uses the default table
	got, err := nilEngine.CheckParallelism(mustScope(t, "repo:a"), mustScope(t, "repo:b"))
	require.NoError(t, err)
	assert.Equal(t, 0.95, got.Confidence)
}

func TestRuleEngineHandBuiltScope(t *testing.T) {
	// Scopes not built by ParseScope are normalized for comparison.
	got, err := (&RuleEngine{}).CheckParallelism(
		Scope{Repos: []string{" R "}, Paths: []string{`./SRC\ui/`}},
		Scope{Repos: []string{"r"}, Paths: []string{"src/ui/x.go"}})
	require.NoError(t, err)
	assert.Equal(t, RuleOverlappingPaths, got.Rule)
}

func TestRuleEngineCapsOverlaps(t *testing.T) {
	var a, b []string
	for i := range MaxOverlaps + 10 {
		a = append(a, fmt.Sprintf("resource:r%03d", i))
		b = append(b, fmt.Sprintf("resource:r%03d", i))
	}
	got, err := (&RuleEngine{}).CheckParallelism(mustScope(t, strings.Join(a, " ")), mustScope(t, strings.Join(b, " ")))
	require.NoError(t, err)
	require.Len(t, got.Overlaps, MaxOverlaps)
	assert.Equal(t, "resource r000", got.Overlaps[0])
	assert.Equal(t, "… and 11 more", got.Overlaps[MaxOverlaps-1])
}
