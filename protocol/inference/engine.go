package inference

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Engine is an Inference Engine consulted for scope-conflict analysis (§9.2, §9.3). An
// implementation backed by a remote service reports unavailability as an error; Decide then
// applies the configured UnavailablePolicy. Implementations used from Temporal workflow code
// must be deterministic.
type Engine interface {
	// CheckParallelism assesses whether tasks with scopes a and b can safely run in parallel.
	// The assessment must not depend on the order of a and b.
	CheckParallelism(a, b Scope) (Assessment, error)
}

// Assessment is an engine's answer (§9.3).
type Assessment struct {
	// Confidence is the confidence, in [0, 1], that the two tasks can run in parallel safely;
	// higher is safer.
	Confidence float64
	// Rule is the machine-readable id of the rule that set Confidence (one of the Rule*
	// constants for RuleEngine).
	Rule string
	// Overlaps lists, readably and sorted, what the scopes have in common.
	Overlaps []string
	// Notes explains the assessment for operators and HITL reviewers.
	Notes string
	// Engine names and versions the engine, for logging requests and responses (§24).
	Engine string
}

// Rule ids of RuleEngine, from the most to the least conflicting.
const (
	RuleIdenticalResource = "identical_resource"
	RuleIdenticalWorktree = "identical_worktree"
	RuleOverlappingPaths  = "overlapping_paths"
	RuleFreeTextShared    = "free_text_shared"
	RuleSharedBranch      = "shared_branch"
	RuleFreeTextUnrelated = "free_text_unrelated"
	RuleDisjoint          = "disjoint"
	RuleDifferentRepos    = "different_repos"
)

// RuleEngineVersion identifies RuleEngine and its rule set in Assessment.Engine.
const RuleEngineVersion = "sw4rm-rules/v1"

// ruleOrder breaks confidence ties: the earlier rule wins.
var ruleOrder = []string{
	RuleIdenticalResource, RuleIdenticalWorktree, RuleOverlappingPaths, RuleFreeTextShared,
	RuleSharedBranch, RuleFreeTextUnrelated, RuleDisjoint, RuleDifferentRepos,
}

// ruleText describes each rule in Notes.
var ruleText = map[string]string{
	RuleIdenticalResource: "both scopes name the same resource",
	RuleIdenticalWorktree: "both scopes name the same worktree (shared checkout and index)",
	RuleOverlappingPaths:  "paths overlap in a repository both scopes may share",
	RuleFreeTextShared:    "a scope is free text only and the scopes share words; free text cannot be analysed structurally",
	RuleSharedBranch:      "both scopes name the same branch of a repository they may share",
	RuleFreeTextUnrelated: "a scope is free text only; no words are shared, but free text cannot prove the scopes disjoint",
	RuleDisjoint:          "the repository may be shared, but paths, resources, worktrees and branches are disjoint",
	RuleDifferentRepos:    "the scopes name different repositories and share no resource or worktree",
}

// Confidences is RuleEngine's rule table: the confidence each rule answers. See the package
// comment for when each rule fires.
type Confidences struct {
	IdenticalResource float64
	IdenticalWorktree float64
	OverlappingPaths  float64
	FreeTextShared    float64
	SharedBranch      float64
	FreeTextUnrelated float64
	Disjoint          float64
	DifferentRepos    float64
}

// DefaultConfidences is the default rule table.
func DefaultConfidences() Confidences {
	return Confidences{
		IdenticalResource: 0.05,
		IdenticalWorktree: 0.05,
		OverlappingPaths:  0.20,
		FreeTextShared:    0.40,
		SharedBranch:      0.50,
		FreeTextUnrelated: 0.50,
		Disjoint:          0.80,
		DifferentRepos:    0.95,
	}
}

// For returns the confidence of rule, clamped into [0, 1]; an unknown rule answers 0.
func (c Confidences) For(rule string) float64 {
	var v float64
	switch rule {
	case RuleIdenticalResource:
		v = c.IdenticalResource
	case RuleIdenticalWorktree:
		v = c.IdenticalWorktree
	case RuleOverlappingPaths:
		v = c.OverlappingPaths
	case RuleFreeTextShared:
		v = c.FreeTextShared
	case RuleSharedBranch:
		v = c.SharedBranch
	case RuleFreeTextUnrelated:
		v = c.FreeTextUnrelated
	case RuleDisjoint:
		v = c.Disjoint
	case RuleDifferentRepos:
		v = c.DifferentRepos
	}
	return clamp01(v)
}

// Validate reports a confidence that is NaN or outside [0, 1]. (RuleEngine clamps such values
// anyway; Validate lets configuration loading reject them loudly.)
func (c Confidences) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"IdenticalResource", c.IdenticalResource}, {"IdenticalWorktree", c.IdenticalWorktree},
		{"OverlappingPaths", c.OverlappingPaths}, {"FreeTextShared", c.FreeTextShared},
		{"SharedBranch", c.SharedBranch}, {"FreeTextUnrelated", c.FreeTextUnrelated},
		{"Disjoint", c.Disjoint}, {"DifferentRepos", c.DifferentRepos},
	} {
		if math.IsNaN(f.v) || f.v < 0 || f.v > 1 {
			errs = append(errs, fmt.Errorf("confidence %s = %v is outside [0, 1]", f.name, f.v))
		}
	}
	return errors.Join(errs...)
}

// clamp01 clamps x into [0, 1]; NaN becomes 0, the most conservative confidence.
func clamp01(x float64) float64 {
	switch {
	case math.IsNaN(x) || x < 0:
		return 0
	case x > 1:
		return 1
	}
	return x
}

// MaxOverlaps bounds Assessment.Overlaps; further overlaps are summarized in one last entry.
const MaxOverlaps = 32

// RuleEngine is the default Engine: deterministic, rule-based and conservative (package
// comment, "Rule table"). The zero value uses DefaultConfidences; it never returns an error
// for non-empty scopes.
type RuleEngine struct {
	// Confidences is the rule table; the zero value means DefaultConfidences.
	Confidences Confidences
}

var _ Engine = (*RuleEngine)(nil)

// NewRuleEngine returns a RuleEngine with the table c after validating it.
func NewRuleEngine(c Confidences) (*RuleEngine, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &RuleEngine{Confidences: c}, nil
}

func (e *RuleEngine) table() Confidences {
	if e == nil || e.Confidences == (Confidences{}) {
		return DefaultConfidences()
	}
	return e.Confidences
}

// prepared is a scope in comparable form: every list lower-cased, deduplicated and sorted.
// (Sorted slices rather than maps: Temporal's workflowcheck rejects iterating over a map.)
type prepared struct {
	repos, worktrees, branches, resources []string
	paths                                 []string // with the implicit "**" when applicable
	implicitWhole                         bool
	structured                            bool
	words                                 []string // free text, significant words only
	valueWords                            []string // significant words of the structured values
}

func prepare(s Scope) prepared {
	set := func(vals []string) []string {
		var out []string
		for _, v := range vals {
			if v = strings.ToLower(strings.TrimSpace(v)); v != "" {
				out = append(out, v)
			}
		}
		return sortedSet(out)
	}
	p := prepared{
		repos: set(s.Repos), worktrees: set(s.Worktrees), branches: set(s.Branches),
		resources: set(s.Resources), structured: s.Structured(),
	}
	for _, v := range s.Paths {
		if v = strings.TrimSpace(v); v != "" {
			p.paths = append(p.paths, v)
		}
	}
	if len(p.paths) == 0 && len(p.repos)+len(p.worktrees)+len(p.branches) > 0 {
		p.paths, p.implicitWhole = []string{"**"}, true
	}
	p.words = significantWords(s.Words)
	p.valueWords = significantWords(slices.Concat(s.Repos, s.Paths, s.Worktrees, s.Branches, s.Resources))
	return p
}

// significantWords returns the sorted significant words of texts.
func significantWords(texts []string) []string {
	var out []string
	for _, t := range texts {
		for _, w := range words(t) {
			if significant(w) {
				out = append(out, w)
			}
		}
	}
	return sortedSet(out)
}

// sortedSet sorts l and drops duplicates.
func sortedSet(l []string) []string {
	slices.Sort(l)
	return slices.Compact(l)
}

// stopWords are common English words that do not identify anything.
var stopWords = map[string]bool{
	"the": true, "and": true, "for": true, "with": true, "from": true, "into": true, "onto": true,
	"that": true, "this": true, "these": true, "those": true, "are": true, "was": true, "were": true,
	"not": true, "but": true, "all": true, "any": true, "its": true, "our": true, "you": true,
	"your": true, "has": true, "have": true, "will": true, "can": true, "should": true, "must": true,
	"may": true, "also": true, "via": true, "per": true, "then": true, "than": true, "when": true,
	"only": true, "each": true, "both": true, "out": true, "off": true, "over": true, "under": true,
	"about": true, "after": true, "before": true, "while": true, "what": true, "which": true,
	"who": true, "how": true, "why": true, "some": true, "more": true, "most": true, "other": true,
	"an": true, "of": true, "to": true, "in": true, "on": true, "is": true, "it": true, "be": true,
	"by": true, "or": true, "as": true, "at": true, "we": true, "do": true, "if": true, "no": true,
	"so": true, "up": true,
}

// significant reports whether a free-text word can identify something: two or more
// characters (short names such as "ui" or "db" count) and not a stop word.
func significant(w string) bool {
	return len([]rune(w)) >= 2 && !stopWords[w]
}

// finding is one rule that fired.
type finding struct {
	rule     string
	overlaps []string
}

// CheckParallelism implements Engine. The result is symmetric in a and b. An empty scope is
// an error wrapping ErrEmptyScope.
func (e *RuleEngine) CheckParallelism(a, b Scope) (Assessment, error) {
	if a.IsEmpty() || b.IsEmpty() {
		return Assessment{}, fmt.Errorf("%w: cannot assess an empty scope", ErrEmptyScope)
	}
	pa, pb := prepare(a), prepare(b)
	var (
		findings []finding
		notes    []string
		fallback string
	)
	if !pa.structured || !pb.structured {
		fa, fb := union(pa.words, pa.valueWords), union(pb.words, pb.valueWords)
		if shared := intersect(fa, fb); len(shared) > 0 {
			findings = append(findings, finding{RuleFreeTextShared, prefixAll("word ", shared)})
		} else {
			fallback = RuleFreeTextUnrelated
		}
	} else {
		if shared := intersect(pa.resources, pb.resources); len(shared) > 0 {
			findings = append(findings, finding{RuleIdenticalResource, prefixAll("resource ", shared)})
		}
		if shared := intersect(pa.worktrees, pb.worktrees); len(shared) > 0 {
			findings = append(findings, finding{RuleIdenticalWorktree, prefixAll("worktree ", shared)})
		}
		sameRepo := len(pa.repos) == 0 || len(pb.repos) == 0 || len(intersect(pa.repos, pb.repos)) > 0
		if sameRepo {
			if len(pa.repos) == 0 || len(pb.repos) == 0 {
				notes = append(notes, "a scope without repo: is assumed to share the other's repository")
			}
			if ov := pathOverlaps(pa.paths, pb.paths); len(ov) > 0 {
				findings = append(findings, finding{RuleOverlappingPaths, ov})
				if pa.implicitWhole || pb.implicitWhole {
					notes = append(notes, "a scope naming a repo, branch or worktree but no path covers the whole repository (**)")
				}
			}
			if shared := intersect(pa.branches, pb.branches); len(shared) > 0 {
				findings = append(findings, finding{RuleSharedBranch, prefixAll("branch ", shared)})
			}
			fallback = RuleDisjoint
		} else {
			fallback = RuleDifferentRepos
		}
		if len(pa.words)+len(pb.words) > 0 {
			notes = append(notes, "free text is not analysed when both scopes name structured items")
		}
	}
	return e.assess(findings, fallback, notes), nil
}

// assess picks the lowest-confidence finding (or the fallback rule when none fired) and
// renders the Assessment.
func (e *RuleEngine) assess(findings []finding, fallback string, notes []string) Assessment {
	t := e.table()
	rule, conf := fallback, t.For(fallback)
	var overlaps, fired []string
	for _, r := range ruleOrder { // ruleOrder order makes the earlier rule win ties
		for _, f := range findings {
			if f.rule == r {
				overlaps = append(overlaps, f.overlaps...)
				fired = append(fired, r)
			}
		}
	}
	for i, r := range fired {
		if c := t.For(r); i == 0 || c < conf {
			rule, conf = r, c
		}
	}
	var also []string
	for _, r := range fired {
		if r != rule {
			also = append(also, r)
		}
	}
	slices.Sort(overlaps)
	overlaps = slices.Compact(overlaps)
	if len(overlaps) > MaxOverlaps {
		more := len(overlaps) - (MaxOverlaps - 1)
		overlaps = append(overlaps[:MaxOverlaps-1:MaxOverlaps-1], fmt.Sprintf("… and %d more", more))
	}
	slices.Sort(also)
	also = slices.Compact(also)
	parts := []string{"rule " + rule + " (confidence " + strconv.FormatFloat(conf, 'f', -1, 64) + "): " + ruleText[rule]}
	if len(also) > 0 {
		parts = append(parts, "also fired: "+strings.Join(also, ", "))
	}
	parts = append(parts, notes...)
	return Assessment{Confidence: conf, Rule: rule, Overlaps: overlaps, Notes: strings.Join(parts, "; "), Engine: RuleEngineVersion}
}

// pathOverlaps lists every overlapping pair, each rendered in a canonical (sorted) order so
// the result does not depend on which scope is a and which is b.
func pathOverlaps(a, b []string) []string {
	var out []string
	for _, x := range a {
		for _, y := range b {
			if !PathsOverlap(x, y) {
				continue
			}
			lx, ly := strings.ToLower(x), strings.ToLower(y)
			switch {
			case lx == ly:
				out = append(out, "path "+lx)
			case lx < ly:
				out = append(out, "path "+lx+" overlaps "+ly)
			default:
				out = append(out, "path "+ly+" overlaps "+lx)
			}
		}
	}
	return out
}

// union merges two sorted sets.
func union(a, b []string) []string {
	return sortedSet(slices.Concat(a, b))
}

// intersect returns the elements of sorted set a that are in sorted set b, sorted.
func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); ok {
			out = append(out, x)
		}
	}
	return out
}

func prefixAll(prefix string, vals []string) []string {
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = prefix + v
	}
	return out
}
