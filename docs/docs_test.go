// Package docs holds tests that keep the documentation true to the tree.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestArchitectureListsEveryPackage fails when a Go package of the module is missing from
// the package table of architecture.md, so the table stays the map a newcomer can trust.
// Generated protobuf packages (proto/<name>pb) are listed once as `proto/<name>pb`.
func TestArchitectureListsEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	table := packageTable(t, string(doc))
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z0-9_./<>-]+?)/?`").FindAllStringSubmatch(table, -1) {
		named[m[1]] = true
	}
	var missing []string
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && path != ".." || d.Name() == "testdata" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		dir, _ := filepath.Rel("..", filepath.Dir(path))
		dir = filepath.ToSlash(dir)
		if dir == "." || dir == "docs" || named[dir] || regexp.MustCompile(`^proto/[a-z]+pb$`).MatchString(dir) && named["proto/<name>pb"] {
			return nil
		}
		named[dir] = true // report each package once
		missing = append(missing, dir)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Errorf("architecture.md's package table does not name these packages: %s", strings.Join(missing, ", "))
	}
}

// packageTable returns the table rows of the "## Packages" section.
func packageTable(t *testing.T, doc string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n## Packages\n")
	if !ok {
		t.Fatal(`architecture.md has no "## Packages" section`)
	}
	section, _, _ := strings.Cut(rest, "\n## ")
	var rows []string
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "|") {
			rows = append(rows, line)
		}
	}
	return strings.Join(rows, "\n")
}
