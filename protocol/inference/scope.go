package inference

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Size limits of one scope; they bound the work of CheckParallelism on untrusted input.
const (
	// MaxScopeBytes is the longest scope string ParseScope accepts.
	MaxScopeBytes = 16 << 10
	// MaxScopeItems is the most structured items (repos, paths, worktrees, branches and
	// resources together) one scope may name.
	MaxScopeItems = 256
	// MaxValueBytes is the longest single value.
	MaxValueBytes = 512
	// MaxPathSegments is the most slash-separated segments one path may have.
	MaxPathSegments = 64
)

var (
	// ErrEmptyScope reports a scope with nothing in it; §9.2 makes scope metadata required.
	ErrEmptyScope = errors.New("scope is required (§9.2)")
	// ErrInvalidScope reports a scope that cannot be parsed.
	ErrInvalidScope = errors.New("invalid scope")
)

// Scope is parsed task scope metadata (§9.2). Every list is case-folded, deduplicated and
// sorted, so equal scopes compare equal whatever order they were written in. Use ParseScope to
// build one; the engine tolerates hand-built scopes but does not validate them.
type Scope struct {
	// Repos are repository ids.
	Repos []string
	// Paths are normalized repository-relative paths or globs ("**" is the whole repository).
	Paths []string
	// Worktrees are worktree ids (§16).
	Worktrees []string
	// Branches are branch names.
	Branches []string
	// Resources are other named entities: databases, queues, services.
	Resources []string
	// Words are the free-text words (lower case, letters and digits only).
	Words []string
}

// Structured reports whether the scope names at least one repo, path, worktree, branch or
// resource. A scope that is not structured is free text only.
func (s Scope) Structured() bool {
	return len(s.Repos)+len(s.Paths)+len(s.Worktrees)+len(s.Branches)+len(s.Resources) > 0
}

// IsEmpty reports whether the scope names nothing at all.
func (s Scope) IsEmpty() bool { return !s.Structured() && len(s.Words) == 0 }

// String renders the scope in canonical text form; ParseScope(s.String()) equals s.
func (s Scope) String() string {
	var parts []string
	add := func(kind string, vals []string) {
		for _, v := range vals {
			if strings.ContainsFunc(v, isSeparator) {
				v = `"` + v + `"`
			}
			parts = append(parts, kind+":"+v)
		}
	}
	add("repo", s.Repos)
	add("worktree", s.Worktrees)
	add("branch", s.Branches)
	add("path", s.Paths)
	add("resource", s.Resources)
	parts = append(parts, s.Words...)
	return strings.Join(parts, " ")
}

// kinds maps every accepted kind spelling to its canonical name.
var kinds = map[string]string{
	"repo": "repo", "repository": "repo",
	"path": "path", "file": "path", "dir": "path",
	"worktree": "worktree",
	"branch":   "branch",
	"resource": "resource", "res": "resource",
}

// ParseScope parses scope metadata in the text or JSON form documented in the package
// comment. An empty scope wraps ErrEmptyScope; every other problem wraps ErrInvalidScope.
func ParseScope(raw string) (Scope, error) {
	if len(raw) > MaxScopeBytes {
		return Scope{}, fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidScope, len(raw), MaxScopeBytes)
	}
	if !utf8.ValidString(raw) {
		return Scope{}, fmt.Errorf("%w: not valid UTF-8", ErrInvalidScope)
	}
	trimmed := strings.TrimSpace(raw)
	if trimmed == "" {
		return Scope{}, fmt.Errorf("%w: it is empty; name what the task touches, e.g. %q", ErrEmptyScope, "repo:my-repo path:src/ui/**")
	}
	var b builder
	var err error
	if strings.HasPrefix(trimmed, "{") {
		err = b.parseJSON(trimmed)
	} else {
		err = b.parseText(trimmed)
	}
	if err != nil {
		return Scope{}, err
	}
	s := b.scope()
	if s.IsEmpty() {
		return Scope{}, fmt.Errorf("%w: %q names no repo, path, worktree, branch, resource or word", ErrEmptyScope, clip(trimmed))
	}
	return s, nil
}

// builder accumulates items while parsing.
type builder struct {
	s     Scope
	items int
}

func (b *builder) scope() Scope {
	for _, l := range []*[]string{&b.s.Repos, &b.s.Paths, &b.s.Worktrees, &b.s.Branches, &b.s.Resources, &b.s.Words} {
		slices.Sort(*l)
		*l = slices.Compact(*l)
	}
	return b.s
}

// add validates and stores one structured item; where names it in error messages.
func (b *builder) add(kind, value, where string) error {
	value = strings.TrimSpace(value)
	if value == "" {
		return fmt.Errorf("%w: %s: %s needs a value, e.g. %s", ErrInvalidScope, where, kind, example(kind))
	}
	if len(value) > MaxValueBytes {
		return fmt.Errorf("%w: %s: value is %d bytes, the limit is %d", ErrInvalidScope, where, len(value), MaxValueBytes)
	}
	if strings.ContainsFunc(value, func(r rune) bool { return r == '"' || unicode.IsControl(r) }) {
		return fmt.Errorf("%w: %s: value may not contain double quotes or control characters", ErrInvalidScope, where)
	}
	if b.items++; b.items > MaxScopeItems {
		return fmt.Errorf("%w: more than %d items", ErrInvalidScope, MaxScopeItems)
	}
	value = strings.ToLower(value)
	switch kind {
	case "repo":
		b.s.Repos = append(b.s.Repos, value)
	case "path":
		p, err := normalizePath(value)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrInvalidScope, where, err)
		}
		b.s.Paths = append(b.s.Paths, p)
	case "worktree":
		b.s.Worktrees = append(b.s.Worktrees, value)
	case "branch":
		if v := strings.TrimPrefix(value, "refs/heads/"); v != "" {
			value = v
		}
		b.s.Branches = append(b.s.Branches, value)
	case "resource":
		b.s.Resources = append(b.s.Resources, value)
	}
	return nil
}

// addWords stores the free-text words of text.
func (b *builder) addWords(text string) {
	b.s.Words = append(b.s.Words, words(text)...)
}

func example(kind string) string {
	switch kind {
	case "repo":
		return "repo:my-repo"
	case "path":
		return "path:src/ui/**"
	case "worktree":
		return "worktree:wt-1"
	case "branch":
		return "branch:main"
	}
	return "resource:users-db"
}

// token is one item of the text form.
type token struct {
	text   string
	quoted bool // a double quote appeared in it
}

func isSeparator(r rune) bool { return unicode.IsSpace(r) || r == ',' || r == ';' }

// tokenize splits the text form on whitespace, commas and semicolons outside double quotes.
func tokenize(s string) ([]token, error) {
	var (
		out    []token
		cur    strings.Builder
		quoted bool
		inQ    bool
		qStart int
		have   bool
	)
	flush := func() {
		if have {
			out = append(out, token{text: cur.String(), quoted: quoted})
		}
		cur.Reset()
		quoted, have = false, false
	}
	for i, r := range s {
		switch {
		case r == '"':
			inQ = !inQ
			quoted, have = true, true
			if inQ {
				qStart = i
			}
		case !inQ && isSeparator(r):
			flush()
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if inQ {
		return nil, fmt.Errorf("%w: unterminated double quote at byte %d", ErrInvalidScope, qStart)
	}
	flush()
	return out, nil
}

// kindOf returns the canonical kind and value of a kind:value token, or ok=false for free text.
func kindOf(t string) (kind, value string, ok bool) {
	i := strings.IndexByte(t, ':')
	if i <= 0 {
		return "", "", false
	}
	kind, ok = kinds[strings.ToLower(t[:i])]
	return kind, t[i+1:], ok
}

func (b *builder) parseText(s string) error {
	toks, err := tokenize(s)
	if err != nil {
		return err
	}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		kind, value, ok := kindOf(t.text)
		if !ok {
			b.addWords(t.text)
			continue
		}
		where := fmt.Sprintf("item %d %q", i+1, clip(t.text))
		if value == "" && !t.quoted {
			// "kind: value": the value is the next token, unless that is an item itself.
			if i+1 >= len(toks) {
				return fmt.Errorf("%w: %s: %s needs a value, e.g. %s", ErrInvalidScope, where, kind, example(kind))
			}
			if _, _, next := kindOf(toks[i+1].text); next {
				return fmt.Errorf("%w: %s: %s needs a value, but the next item is %q", ErrInvalidScope, where, kind, clip(toks[i+1].text))
			}
			i++
			value = toks[i].text
		}
		if err := b.add(kind, value, where); err != nil {
			return err
		}
	}
	return nil
}

// stringOrList is a JSON string or array of strings.
type stringOrList []string

func (l *stringOrList) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, []byte("null")) {
		return nil
	}
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*l = []string{s}
		return nil
	}
	var ss []string
	if err := json.Unmarshal(data, &ss); err != nil {
		return errors.New("want a string or an array of strings")
	}
	*l = ss
	return nil
}

// jsonScope is the JSON form.
type jsonScope struct {
	Repo      stringOrList `json:"repo"`
	Repos     stringOrList `json:"repos"`
	Path      stringOrList `json:"path"`
	Paths     stringOrList `json:"paths"`
	Worktree  stringOrList `json:"worktree"`
	Worktrees stringOrList `json:"worktrees"`
	Branch    stringOrList `json:"branch"`
	Branches  stringOrList `json:"branches"`
	Resource  stringOrList `json:"resource"`
	Resources stringOrList `json:"resources"`
	Text      stringOrList `json:"text"`
}

func (b *builder) parseJSON(s string) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	var j jsonScope
	// Decoding a string in memory is deterministic; workflowcheck flags encoding/json only
	// because its reflection reaches runtime internals (GC workers, stack frames).
	//workflowcheck:ignore
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("%w: it starts with '{' but is not a valid JSON scope object (keys repo(s), path(s), worktree(s), branch(es), resource(s), text): %v", ErrInvalidScope, err)
	}
	//workflowcheck:ignore
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: unexpected data after the JSON scope object", ErrInvalidScope)
	}
	for _, f := range []struct {
		key  string
		kind string
		vals []string
	}{
		{"repo", "repo", j.Repo}, {"repos", "repo", j.Repos},
		{"path", "path", j.Path}, {"paths", "path", j.Paths},
		{"worktree", "worktree", j.Worktree}, {"worktrees", "worktree", j.Worktrees},
		{"branch", "branch", j.Branch}, {"branches", "branch", j.Branches},
		{"resource", "resource", j.Resource}, {"resources", "resource", j.Resources},
	} {
		for i, v := range f.vals {
			where := fmt.Sprintf("JSON %s[%d] %q", f.key, i, clip(v))
			if err := b.add(f.kind, v, where); err != nil {
				return err
			}
		}
	}
	for _, t := range j.Text {
		b.addWords(t)
	}
	return nil
}

// normalizePath cleans a repository-relative path or glob; see the package comment.
func normalizePath(p string) (string, error) {
	p = strings.ReplaceAll(p, `\`, "/")
	p = path.Clean(p)
	p = strings.TrimLeft(p, "/")
	switch {
	case p == "" || p == ".":
		return "**", nil
	case p == ".." || strings.HasPrefix(p, "../"):
		return "", errors.New("path leaves the repository root")
	}
	segs := strings.Split(p, "/")
	if len(segs) > MaxPathSegments {
		return "", fmt.Errorf("path has %d segments, the limit is %d", len(segs), MaxPathSegments)
	}
	for _, seg := range segs {
		if _, err := path.Match(seg, ""); err != nil {
			return "", fmt.Errorf("malformed glob segment %q: %v", seg, err)
		}
	}
	return p, nil
}

// words splits free text into lower-case words of letters and digits.
func words(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

// clip shortens s for an error message.
func clip(s string) string {
	const limit = 80
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
