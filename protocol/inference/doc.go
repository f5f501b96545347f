// Package inference is SW4RM's pluggable Inference Engine for scope-conflict analysis (RFC §9.2,
// §9.3, §9.4): it parses task scope metadata, scores how safely two scopes can run in
// parallel, and turns a score into a scheduling verdict.
//
// The package is pure and deterministic: no I/O, no clock, no randomness, no mutable global
// state, no iteration over maps. Temporal workflow code may call ParseScope,
// RuleEngine.CheckParallelism and Decide directly; workflowcheck accepts them (the JSON
// decoding call carries a justified //workflowcheck:ignore).
//
// # Scope format
//
// §9.2 requires every task to carry "descriptive scope metadata identifying resources,
// repositories, file paths, or other entities the task will access or modify". ParseScope
// accepts two forms.
//
// Text form: items separated by whitespace, commas or semicolons. An item is either
// kind:value, for one of these kinds (the kind is case-insensitive; aliases in parentheses):
//
//	repo:<id>          (repository) a repository, e.g. repo:sw4rm/sw4rm-temporal
//	path:<path|glob>   (file, dir)  a path relative to the repository root, e.g. path:src/ui/**
//	worktree:<id>                   a worktree (§16), e.g. worktree:wt-7
//	branch:<name>                   a branch, e.g. branch:main (a refs/heads/ prefix is dropped)
//	resource:<name>    (res)        any other shared entity: a database, a queue, a service
//
// or a bare word, which is free text. Examples:
//
//	repo:sw4rm path:src/ui/** path:docs/ui.md
//	repo:sw4rm, branch:feature/login; path:auth/login.go resource:users-db
//	resource:billing-db refactor the invoice schema
//	path: "My Documents/plan.txt"
//	update the billing docs
//
// Rules of the text form:
//   - Double quotes protect spaces, commas and semicolons inside a value:
//     path:"a b/c.txt". Quotes do not nest and there are no escapes; an unterminated quote is
//     an error.
//   - "kind: value" with a space after the colon is accepted: the value is the next item.
//   - A token whose prefix before the first colon is not a known kind (note:, https:, C:) is
//     free text, like any bare word. Bare words are never interpreted as paths or
//     resources: write path:src/b.go, not src/b.go. (Treating every bare word as a resource
//     would make "the" in two descriptions an identical resource.)
//   - Values are case-folded (comparison is case-insensitive, which can only add overlaps).
//   - To name several paths, repeat the kind: path:a.go path:b.go.
//
// JSON form: a scope whose first non-space character is '{' must be one JSON object whose
// keys are repo, repos, path, paths, worktree, worktrees, branch, branches, resource,
// resources and text; each value is a string or an array of strings (text is free text).
// Unknown keys are an error, so that a typo such as "pahts" cannot silently drop a path:
//
//	{"repo": "sw4rm", "paths": ["src/ui/**", "docs/ui.md"], "resources": ["users-db"]}
//
// Paths: backslashes become slashes; "./" and a leading "/" are dropped; ".." may not leave the
// repository root; "." (the root) becomes "**". Segments may use the glob syntax of path.Match
// (*, ?, [...]); a whole segment "**" matches any number of segments. Every path is assumed to
// possibly be a directory, so it covers everything beneath it: path:src overlaps
// path:src/main.go but not path:src2. In consequence an unanchored glob such as **/*.md
// overlaps any literal path (src/main.go might be a directory holding .md files); anchor
// scopes with disjoint directory prefixes (path:src/ui vs path:docs) to get credit for
// disjointness. A scope that names a repo, branch or worktree but no path covers the whole
// repository (as if it said path:**).
//
// Errors: an empty or blank scope, or one with no item or word, is ErrEmptyScope (§9.2 makes
// scope required); every other problem (unterminated quote, "path:" with no value, a path
// escaping the root, a malformed glob, an unknown JSON key, a scope over the size limits) is
// ErrInvalidScope. Both messages name the offending item.
//
// # Rule table
//
// RuleEngine is the default engine. It is rule-based and conservative by design (§9.4: "When
// conflict assessment is uncertain, implementations MUST choose serialization or human
// escalation"). It collects every rule that fires and answers the lowest confidence among
// them (ties go to the rule listed first):
//
//	rule                 default  fires when
//	identical_resource   0.05     both scopes name the same resource
//	identical_worktree   0.05     both scopes name the same worktree (shared checkout and index)
//	overlapping_paths    0.20     the repositories may be the same and a path of one overlaps a
//	                              path of the other (prefix, glob or whole-repository overlap)
//	free_text_shared     0.40     at least one scope has no structured item (free text only) and
//	                              the scopes share a significant word
//	shared_branch        0.50     the repositories may be the same and both name the same branch
//	free_text_unrelated  0.50     at least one scope is free text only and no word is shared:
//	                              free text cannot prove disjointness
//	disjoint             0.80     the repositories may be the same, nothing above fired
//	different_repos      0.95     both scopes name repositories, the sets are disjoint, and no
//	                              resource or worktree is shared
//
// A significant word has two or more letters or digits and is not a common English stop word
// ("ui" and "db" count; "the" and "of" do not); a structured scope's values also count as
// words when compared with a free-text scope (path:src/billing/** has "src" and "billing").
// "The repositories may be the same" means: both name a common repo, or at least one scope
// names none (an unknown repository is assumed to be shared). Branches never raise
// confidence; different worktrees of one repository do not exempt overlapping paths, because
// their changes still collide when merged. When both scopes have structured items their free
// text is descriptive and not analysed. Confidences are configurable through Confidences and
// always clamped into [0, 1] (a NaN becomes 0).
//
// # Decision
//
// Decide applies §9.3: a confidence at or above the threshold (DefaultThreshold 0.7) runs the
// tasks in parallel; below it escalates to HITL with reason type CONFLICT. If the engine
// failed, the UnavailablePolicy decides: UnavailableSerialize (the default) serializes,
// UnavailableHITL escalates with CONFLICT, and UnavailableAllow — parallelism without an
// assessment — applies only when an administrator configures it explicitly (§9.3, §9.4
// "Policy overrides MUST be explicitly documented"). With the default table and threshold,
// only different_repos and disjoint run in parallel.
package inference
