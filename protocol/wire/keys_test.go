package wire_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repoRoot is the module root, two levels above this package.
const repoRoot = "../.."

// notKeys are sw4rm-prefixed words the docs use that are values, not keys: the dev operator's
// token, a fault scenario's name, the version lines of the signing pre-images, and the
// processes' OpenTelemetry service names and scrape targets (observability.md).
var notKeys = map[string]bool{
	"sw4rm-dev":              true,
	"sw4rm-server":           true,
	"sw4rm-worker":           true,
	"sw4rm-worker-1":         true,
	"sw4rm-worker-2":         true,
	"sw4rm-dev-token":        true,
	"sw4rm-dev-kill":         true,
	"sw4rm-sig-v1":           true,
	"sw4rm-hitl-decision-v1": true,
	// The objects of the deploy files (docs/deploy.md): compose services, Kubernetes names.
	"sw4rm-server-1": true,
	"sw4rm-server-2": true,
	"sw4rm-settings": true,
	"sw4rm-secrets":  true,
	// The cluster kit's command (docs/deploy.md, docs/reliability.md).
	"sw4rm-cluster": true,
}

// docKey finds a key in prose: "sw4rm-" or "sw4rm." and a name, not part of a longer word,
// path, MIME type or proto name (so "vnd.sw4rm.debate-turn", ".sw4rm-worktrees/",
// "sw4rm.common.Envelope", "sw4rm-builtin/v1" and "sw4rm-activity-*" are not keys).
var docKey = regexp.MustCompile(`(^|[^A-Za-z0-9./_-])(sw4rm[-.][a-z0-9_-]*[a-z0-9_])([^A-Za-z0-9./_*-]|$)`)

// declared returns the sw4rm-prefixed string constants of package wire, by value.
func declared(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	require.NoError(t, err)
	keys := map[string]string{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for i, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					val, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					if strings.HasPrefix(val, "sw4rm") {
						require.NotContains(t, keys, val, "%s declared twice", val)
						keys[val] = vs.Names[i].Name
					}
				}
			}
		}
	}
	require.NotEmpty(t, keys)
	return keys
}

// documented returns the keys docs/*.md and README.md mention, with a file naming each.
func documented(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	require.NoError(t, err)
	files = append(files, filepath.Join(repoRoot, "README.md"))
	keys := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, line := range strings.Split(string(b), "\n") {
			// Matches share no characters, so a key right after another is found by
			// matching the remainder again.
			for rest := line; ; {
				m := docKey.FindStringSubmatchIndex(rest)
				if m == nil {
					break
				}
				if k := rest[m[4]:m[5]]; !notKeys[k] {
					keys[k] = filepath.Base(f)
				}
				rest = rest[m[5]:]
			}
		}
	}
	return keys
}

// TestKeysMatchDocs: every key the docs name is declared here, and every key declared here is
// named in the docs, so neither a key added in code without docs nor a documented key the
// code does not know gets through.
func TestKeysMatchDocs(t *testing.T) {
	code, docs := declared(t), documented(t)
	for k, f := range docs {
		assert.Contains(t, code, k, "%s names %q, which package wire does not declare", f, k)
	}
	for k, name := range code {
		assert.Contains(t, docs, k, "wire.%s (%q) is named in no doc (docs/*.md, README.md)", name, k)
	}
}

// TestOneHome: no other non-test Go file spells a declared key as a literal, so every reader
// and writer of a key goes through this package.
func TestOneHome(t *testing.T) {
	code := declared(t)
	self, err := filepath.Abs(".")
	require.NoError(t, err)
	fset := token.NewFileSet()
	err = filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			abs, _ := filepath.Abs(path)
			if abs == self || slices.Contains([]string{".git", "testdata", "proto", "test"}, d.Name()) && path != repoRoot {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil {
					if name, ok := code[v]; ok {
						t.Errorf("%s spells %q: use wire.%s", fset.Position(lit.Pos()), v, name)
					}
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
}
