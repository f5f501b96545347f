package inference

import (
	"path"
	"strings"
)

// PathsOverlap reports whether two repository-relative paths or globs may touch a common file.
// Each covers the paths it matches and, since any of them might be a directory, everything
// beneath them: so "src" overlaps "src/main.go" but not "src2", and "src/ui/**" overlaps
// "src/ui/button.go". A whole segment "**" matches any number of segments; other segments use
// path.Match syntax. When two glob segments cannot be compared exactly the answer is true
// (conservative). Comparison is case-insensitive; backslashes count as slashes.
func PathsOverlap(a, b string) bool {
	return segmentsOverlap(splitPath(a), splitPath(b))
}

// splitPath lower-cases p and splits it into segments, dropping empty ones and "." so that
// hand-built Scopes compare like parsed ones. The root ("", "/", ".") is the whole repository.
func splitPath(p string) []string {
	p = strings.ToLower(strings.ReplaceAll(p, `\`, "/"))
	var segs []string
	for _, s := range strings.Split(p, "/") {
		if s != "" && s != "." {
			segs = append(segs, s)
		}
	}
	if len(segs) == 0 {
		return []string{"**"}
	}
	return segs
}

// segmentsOverlap decides, by dynamic programming over suffixes, whether some path lies under
// a match of a and under a match of b. m[i][j] answers for a[i:] and b[j:]; a sequence that
// ran out matched a prefix, whose subtree contains everything the other can still match.
func segmentsOverlap(a, b []string) bool {
	n, k := len(a), len(b)
	m := make([]bool, (n+1)*(k+1))
	at := func(i, j int) bool { return m[i*(k+1)+j] }
	for i := n; i >= 0; i-- {
		for j := k; j >= 0; j-- {
			var v bool
			switch {
			case i == n || j == k:
				v = true
			case a[i] == "**" || b[j] == "**":
				// "**" matches zero segments (skip it) or one more segment of the other side.
				if a[i] == "**" {
					v = at(i+1, j) || at(i, j+1)
				}
				if !v && b[j] == "**" {
					v = at(i, j+1) || at(i+1, j)
				}
			default:
				v = segmentCompatible(a[i], b[j]) && at(i+1, j+1)
			}
			m[i*(k+1)+j] = v
		}
	}
	return at(0, 0)
}

const globMeta = "*?["

// segmentCompatible reports whether some single path segment may match both x and y.
func segmentCompatible(x, y string) bool {
	if x == y {
		return true
	}
	xg, yg := strings.ContainsAny(x, globMeta), strings.ContainsAny(y, globMeta)
	switch {
	case !xg && !yg:
		return false
	case !yg:
		return matchOrTrue(x, y)
	case !xg:
		return matchOrTrue(y, x)
	}
	// Two globs: a segment matching both starts with both literal prefixes and ends with both
	// literal suffixes, so one of each pair must extend the other. Otherwise assume overlap.
	px, py := literalPrefix(x), literalPrefix(y)
	if !strings.HasPrefix(px, py) && !strings.HasPrefix(py, px) {
		return false
	}
	sx, sy := literalSuffix(x), literalSuffix(y)
	if !strings.HasSuffix(sx, sy) && !strings.HasSuffix(sy, sx) {
		return false
	}
	return true
}

// matchOrTrue is path.Match(pattern, name), true on a malformed pattern (conservative).
func matchOrTrue(pattern, name string) bool {
	ok, err := path.Match(pattern, name)
	return ok || err != nil
}

// literalPrefix is the part of a glob before its first meta character.
func literalPrefix(g string) string {
	if i := strings.IndexAny(g, globMeta+`\`); i >= 0 {
		return g[:i]
	}
	return g
}

// literalSuffix is the part of a glob after its last '*' or '?', or "" when the glob has a
// character class or escape (whose end is not a reliable boundary).
func literalSuffix(g string) string {
	if strings.ContainsAny(g, `[\`) {
		return ""
	}
	return g[strings.LastIndexAny(g, "*?")+1:]
}
