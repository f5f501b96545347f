package inference

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseScope(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want Scope
	}{
		{"one repo", "repo:sw4rm", Scope{Repos: []string{"sw4rm"}}},
		{"every kind", "repo:r path:src/ui/** worktree:wt-1 branch:main resource:users-db",
			Scope{Repos: []string{"r"}, Paths: []string{"src/ui/**"}, Worktrees: []string{"wt-1"}, Branches: []string{"main"}, Resources: []string{"users-db"}}},
		{"aliases and case-insensitive kinds", "Repository:R FILE:a.go Dir:docs RES:q BRANCH:Dev WorkTree:W",
			Scope{Repos: []string{"r"}, Paths: []string{"a.go", "docs"}, Worktrees: []string{"w"}, Branches: []string{"dev"}, Resources: []string{"q"}}},
		{"comma and semicolon separators", "repo:r,path:a.go;path:b.go , resource:x",
			Scope{Repos: []string{"r"}, Paths: []string{"a.go", "b.go"}, Resources: []string{"x"}}},
		{"newlines and tabs", "repo:r\n\tpath:a.go\r\n", Scope{Repos: []string{"r"}, Paths: []string{"a.go"}}},
		{"bare words are free text", "refactor the Invoice-Schema", Scope{Words: []string{"invoice", "refactor", "schema", "the"}}},
		{"unknown kind is free text", "note:billing https://x.io/y", Scope{Words: []string{"billing", "https", "io", "note", "x", "y"}}},
		{"mixed structured and free text", "resource:billing-db fix invoices",
			Scope{Resources: []string{"billing-db"}, Words: []string{"fix", "invoices"}}},
		{"kind colon space value", "repo: sw4rm path: src/main.go", Scope{Repos: []string{"sw4rm"}, Paths: []string{"src/main.go"}}},
		{"quoted value with spaces and commas", `path:"My Docs/a, b.txt" resource:"x y"`,
			Scope{Paths: []string{"my docs/a, b.txt"}, Resources: []string{"x y"}}},
		{"quoted whole item", `"path:a b"`, Scope{Paths: []string{"a b"}}},
		{"dedup and sort", "path:b path:a path:B path:./a", Scope{Paths: []string{"a", "b"}}},
		{"path normalization", `path:/src//ui/ path:.\win\x.go path:a/./b/../c path:.`,
			Scope{Paths: []string{"**", "a/c", "src/ui", "win/x.go"}}},
		{"rooted dot-dot stays inside", "path:/../x", Scope{Paths: []string{"x"}}},
		{"globs kept", "path:src/**/*.go path:[ab]?.md", Scope{Paths: []string{"[ab]?.md", "src/**/*.go"}}},
		{"refs/heads prefix dropped", "branch:refs/heads/main branch:refs/heads/", Scope{Branches: []string{"main", "refs/heads/"}}},
		{"value with colon", "resource:db:users", Scope{Resources: []string{"db:users"}}},
		{"JSON strings", `{"repo": "R", "path": "src", "worktree": "w", "branch": "main", "resource": "db", "text": "Fix it"}`,
			Scope{Repos: []string{"r"}, Paths: []string{"src"}, Worktrees: []string{"w"}, Branches: []string{"main"}, Resources: []string{"db"}, Words: []string{"fix", "it"}}},
		{"JSON arrays", ` {"repos": ["a", "b"], "paths": ["src/ui/**", "docs"], "worktrees": ["w1"], "branches": ["x"], "resources": ["q1", "q2"], "text": ["one", "two"]}`,
			Scope{Repos: []string{"a", "b"}, Paths: []string{"docs", "src/ui/**"}, Worktrees: []string{"w1"}, Branches: []string{"x"}, Resources: []string{"q1", "q2"}, Words: []string{"one", "two"}}},
		{"JSON null ignored", `{"repo": null, "resources": ["q"]}`, Scope{Resources: []string{"q"}}},
		{"JSON value with spaces", `{"paths": ["a b/c"]}`, Scope{Paths: []string{"a b/c"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseScope(tc.in)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			// The canonical form parses back to the same scope.
			again, err := ParseScope(got.String())
			require.NoError(t, err, "canonical form %q", got.String())
			assert.Equal(t, got, again, "canonical form %q", got.String())
		})
	}
}

func TestParseScopeErrors(t *testing.T) {
	cases := []struct {
		name  string
		in    string
		is    error
		parts []string // substrings the message must contain
	}{
		{"empty", "", ErrEmptyScope, []string{"scope is required (§9.2)", "it is empty"}},
		{"blank", " \n\t ", ErrEmptyScope, []string{"it is empty"}},
		{"separators only", " ,;, ", ErrEmptyScope, []string{"names no repo"}},
		{"punctuation only", "--- !!", ErrEmptyScope, []string{"names no repo"}},
		{"empty quotes only", `""`, ErrEmptyScope, []string{"names no repo"}},
		{"JSON empty object", "{}", ErrEmptyScope, []string{"names no repo"}},
		{"JSON empty text", `{"text": ""}`, ErrEmptyScope, nil},
		{"kind without value at end", "repo:r path:", ErrInvalidScope, []string{`item 2 "path:"`, "path needs a value", "path:src/ui/**"}},
		{"kind without value before item", "path: repo:r", ErrInvalidScope, []string{"path needs a value", `next item is "repo:r"`}},
		{"quoted empty value", `repo:"" word`, ErrInvalidScope, []string{"repo needs a value, e.g. repo:my-repo"}},
		{"unterminated quote", `path:"a b`, ErrInvalidScope, []string{"unterminated double quote at byte 5"}},
		{"path leaves root", "path:../etc", ErrInvalidScope, []string{`"path:../etc"`, "leaves the repository root"}},
		{"path dot-dot", "path:a/../..", ErrInvalidScope, []string{"leaves the repository root"}},
		{"malformed glob", "path:src/[ab", ErrInvalidScope, []string{`malformed glob segment "[ab"`}},
		{"too many segments", "path:" + strings.Repeat("a/", MaxPathSegments) + "b", ErrInvalidScope, []string{"segments"}},
		{"value too long", "resource:" + strings.Repeat("x", MaxValueBytes+1), ErrInvalidScope, []string{"the limit is 512"}},
		{"scope too long", strings.Repeat("x ", MaxScopeBytes), ErrInvalidScope, []string{"the limit is 16384"}},
		{"too many items", strings.Repeat("resource:x ", MaxScopeItems+1), ErrInvalidScope, []string{"more than 256 items"}},
		{"invalid utf-8", "repo:\xff", ErrInvalidScope, []string{"UTF-8"}},
		{"JSON control character", `{"repo": "a\u0007b"}`, ErrInvalidScope, []string{"control characters"}},
		{"JSON double quote in value", `{"resource": "a\"b"}`, ErrInvalidScope, []string{"double quotes"}},
		{"JSON unknown key", `{"pahts": ["a"]}`, ErrInvalidScope, []string{"not a valid JSON scope object", "pahts"}},
		{"JSON syntax", `{"repo": `, ErrInvalidScope, []string{"not a valid JSON scope object"}},
		{"JSON wrong type", `{"paths": 3}`, ErrInvalidScope, []string{"want a string or an array of strings"}},
		{"JSON trailing data", `{"repo": "a"} repo:b`, ErrInvalidScope, []string{"after the JSON scope object"}},
		{"JSON empty value", `{"paths": ["a", " "]}`, ErrInvalidScope, []string{`JSON paths[1]`, "path needs a value"}},
		{"JSON bad path", `{"path": "../x"}`, ErrInvalidScope, []string{"leaves the repository root"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseScope(tc.in)
			require.Error(t, err)
			assert.True(t, errors.Is(err, tc.is), "error %q should wrap %v", err, tc.is)
			other := ErrInvalidScope
			if tc.is == ErrInvalidScope {
				other = ErrEmptyScope
			}
			assert.False(t, errors.Is(err, other), "error %q should not wrap %v", err, other)
			for _, p := range tc.parts {
				assert.Contains(t, err.Error(), p)
			}
			assert.Equal(t, Scope{}, got)
		})
	}
}

func TestScopePredicates(t *testing.T) {
	assert.True(t, Scope{}.IsEmpty())
	assert.False(t, Scope{}.Structured())
	assert.False(t, Scope{Words: []string{"x"}}.IsEmpty())
	assert.False(t, Scope{Words: []string{"x"}}.Structured())
	for _, s := range []Scope{{Repos: []string{"r"}}, {Paths: []string{"p"}}, {Worktrees: []string{"w"}}, {Branches: []string{"b"}}, {Resources: []string{"x"}}} {
		assert.True(t, s.Structured(), "%+v", s)
		assert.False(t, s.IsEmpty(), "%+v", s)
	}
	assert.Equal(t, `repo:r worktree:w branch:b path:"a b" resource:x hello`,
		Scope{Repos: []string{"r"}, Paths: []string{"a b"}, Worktrees: []string{"w"}, Branches: []string{"b"}, Resources: []string{"x"}, Words: []string{"hello"}}.String())
}
