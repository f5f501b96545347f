package reasoning

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/reasoningpb"
)

// BuiltinModel names and versions Builtin's algorithms: SummarizeResponse.model, the
// "engine" of EvaluateDebate's notes, and the request log (§24). A change of either
// algorithm changes the version.
const BuiltinModel = "sw4rm-builtin/v1"

// Summary budget.
const (
	// DefaultSummaryTokens is the budget of a Summarize request with max_tokens 0.
	DefaultSummaryTokens = 256
	// BytesPerToken is the builtin token estimate: a token is 4 bytes of UTF-8, rounded up —
	// the same heuristic negotiation uses for drafts.
	BytesPerToken = 4
)

// Methods named in EvaluateDebate's notes.
const (
	// MethodJSONStructural compares two JSON documents leaf by leaf.
	MethodJSONStructural = "json_structural"
	// MethodTokenJaccard compares the word sets of two texts.
	MethodTokenJaccard = "token_jaccard"
)

// maxListed bounds the paths or words a note lists; the rest are counted.
const maxListed = 10

// ellipsis marks a sentence Summarize had to cut.
const ellipsis = "…"

// Builtin is the engine that needs no model. It is deterministic — the same request always
// gets the same answer, whatever the order of a JSON object's keys — and free.
//
// EvaluateDebate scores how close proposal_b is to proposal_a as a Jaccard similarity,
// |A ∩ B| / |A ∪ B|, in [0, 1] (1: the same; 0: nothing in common):
//   - when both proposals are JSON objects or arrays, structurally (MethodJSONStructural): A
//     and B are the documents' leaves, each a JSON Pointer (RFC 6901) with its value —
//     objects compared by key, arrays by index, an empty object or array a leaf of its own,
//     numbers by value (1.0 equals 1) — and the notes name the paths where they differ;
//   - otherwise as text (MethodTokenJaccard): A and B are the sets of distinct words, a word
//     being a run of letters and digits, lower-cased; the notes name the words only one
//     proposal has. Two texts without any word score 1 when equal, else 0.
//
// The intensity is checked (CheckDebateRequest) and echoed in the notes; it does not change
// the score — the negotiation's score_threshold, which intensity sets, is what it is held to.
//
// Summarize is extractive and honours max_tokens (DefaultSummaryTokens when 0) at
// BytesPerToken bytes per token. Segments are taken in seq order (ties keep their order in
// the request; blank ones are skipped), and each is split into sentences (ending at ".", "!"
// or "?" before a space, or at a line break; whitespace collapsed). The summary takes the
// first sentence of every segment, then the second of every segment that has one, and so on,
// until the next sentence does not fit: that one is cut at a word boundary and marked with
// "…" (mid-word, and without its kind, only when nothing else fits at all), and the summary
// ends. It is rendered one
// line per segment, in seq order, "<kind>: <sentences>" ("<sentences>" when kind is empty);
// at is not used. Modes: "" and "extractive"; any other is refused with InvalidArgument.
// tokens counts the summary's own tokens; cost_cents is 0 and model BuiltinModel.
type Builtin struct{}

// Name implements Named.
func (Builtin) Name() string { return BuiltinModel }

// EvaluateDebate implements Engine (see Builtin).
func (Builtin) EvaluateDebate(ctx context.Context, req *reasoningpb.DebateEvaluateRequest) (*reasoningpb.DebateEvaluateResponse, error) {
	if err := CheckDebateRequest(req); err != nil {
		return nil, InvalidArgument(err)
	}
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	s := Similarity(req.GetProposalA(), req.GetProposalB())
	notes := s.Notes()
	if in, _ := ParseIntensity(req.GetIntensity()); in != 0 {
		notes += "; intensity " + in.String() + " (the score does not depend on it)"
	}
	return &reasoningpb.DebateEvaluateResponse{ConfidenceScore: s.Score, Notes: notes}, nil
}

// SimilarityResult is Builtin's comparison of two proposals.
type SimilarityResult struct {
	// Method is MethodJSONStructural or MethodTokenJaccard.
	Method string
	// Shared counts the leaves (or words) both proposals have; Union those either has.
	Shared, Union int
	// Score is Shared/Union in [0, 1].
	Score float64
	// OnlyA and OnlyB are the words only proposal a (b) has, sorted (MethodTokenJaccard).
	OnlyA, OnlyB []string
	// Differ lists the JSON Pointers where the documents differ, sorted
	// (MethodJSONStructural; "" is the root).
	Differ []string
}

// Similarity compares proposal b with proposal a as Builtin.EvaluateDebate does.
func Similarity(a, b string) SimilarityResult {
	if la, ok := jsonLeaves(a); ok {
		if lb, ok := jsonLeaves(b); ok {
			r := jaccard(MethodJSONStructural, keys(la), keys(lb))
			paths := map[string]struct{}{}
			for _, l := range append(onlyIn(la, lb), onlyIn(lb, la)...) {
				paths[l] = struct{}{}
			}
			r.Differ = sortedKeys(paths)
			return r
		}
	}
	wa, wb := words(a), words(b)
	r := jaccard(MethodTokenJaccard, wa, wb)
	if r.Union == 0 && a != b {
		r.Score = 0 // no word on either side, and the texts differ
	}
	r.OnlyA, r.OnlyB = onlyInSet(wa, wb), onlyInSet(wb, wa)
	return r
}

// Notes renders the result as EvaluateDebate's notes, e.g. "engine sw4rm-builtin/v1; method
// json_structural: 3 of 5 leaves in common (similarity 0.600); differ at /price, /terms/0".
func (r SimilarityResult) Notes() string {
	unit := "distinct words"
	if r.Method == MethodJSONStructural {
		unit = "leaves"
	}
	parts := []string{
		"engine " + BuiltinModel,
		fmt.Sprintf("method %s: %d of %d %s in common (similarity %.3f)", r.Method, r.Shared, r.Union, unit, r.Score),
	}
	if len(r.Differ) > 0 {
		d := make([]string, len(r.Differ))
		for i, p := range r.Differ {
			if p == "" {
				p = "(root)"
			}
			d[i] = p
		}
		parts = append(parts, "differ at "+list(d))
	}
	if len(r.OnlyA) > 0 {
		parts = append(parts, "only in proposal_a: "+list(r.OnlyA))
	}
	if len(r.OnlyB) > 0 {
		parts = append(parts, "only in proposal_b: "+list(r.OnlyB))
	}
	if r.Shared == r.Union && r.Score == 1 {
		parts = append(parts, "identical")
	}
	return strings.Join(parts, "; ")
}

// list joins at most maxListed items and counts the rest.
func list(items []string) string {
	if len(items) <= maxListed {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:maxListed], ", ") + fmt.Sprintf(" (+%d more)", len(items)-maxListed)
}

// jaccard scores two sets.
func jaccard(method string, a, b map[string]struct{}) SimilarityResult {
	shared := 0
	for k := range a {
		if _, ok := b[k]; ok {
			shared++
		}
	}
	r := SimilarityResult{Method: method, Shared: shared, Union: len(a) + len(b) - shared}
	if r.Union == 0 {
		r.Score = 1
	} else {
		r.Score = float64(r.Shared) / float64(r.Union)
	}
	return r
}

// jsonLeaves returns the leaves of a JSON object or array, "pointer=value" → pointer; ok is
// false for anything else (not JSON, a scalar, trailing data).
func jsonLeaves(s string) (map[string]string, bool) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false // more after the first value: not one document
	}
	switch v.(type) {
	case map[string]any, []any:
	default:
		return nil, false
	}
	out := map[string]string{}
	walk(v, "", out)
	return out, true
}

// walk adds the leaves under v at pointer path to out.
func walk(v any, path string, out map[string]string) {
	leaf := func(value string) { out[path+"="+value] = path }
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			leaf("{}")
		}
		// The leaves form a set, so the map's iteration order does not matter.
		for k, c := range x {
			walk(c, path+"/"+strings.NewReplacer("~", "~0", "/", "~1").Replace(k), out)
		}
	case []any:
		if len(x) == 0 {
			leaf("[]")
		}
		for i, c := range x {
			walk(c, path+"/"+strconv.Itoa(i), out)
		}
	case json.Number:
		if f, err := x.Float64(); err == nil {
			leaf(strconv.FormatFloat(f, 'g', -1, 64)) // 1.0 and 1 are one value
		} else {
			leaf(x.String())
		}
	case string:
		b, _ := json.Marshal(x)
		leaf(string(b))
	case bool:
		leaf(strconv.FormatBool(x))
	default:
		leaf("null")
	}
}

// words returns the distinct lower-cased runs of letters and digits of s.
func words(s string) map[string]struct{} {
	out := map[string]struct{}{}
	for _, w := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		out[w] = struct{}{}
	}
	return out
}

func keys(m map[string]string) map[string]struct{} {
	out := make(map[string]struct{}, len(m))
	for k := range m {
		out[k] = struct{}{}
	}
	return out
}

// onlyIn returns the pointers of a's leaves that b lacks.
func onlyIn(a, b map[string]string) []string {
	var out []string
	for k, p := range a {
		if _, ok := b[k]; !ok {
			out = append(out, p)
		}
	}
	return out
}

// onlyInSet returns a's members that b lacks, sorted.
func onlyInSet(a, b map[string]struct{}) []string {
	out := []string{}
	for k := range a {
		if _, ok := b[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func sortedKeys(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Summarize implements Engine (see Builtin).
func (Builtin) Summarize(ctx context.Context, req *reasoningpb.SummarizeRequest) (*reasoningpb.SummarizeResponse, error) {
	if err := CheckSummarizeRequest(req); err != nil {
		return nil, InvalidArgument(err)
	}
	if m := strings.ToLower(strings.TrimSpace(req.GetMode())); m != "" && m != "extractive" {
		return nil, InvalidArgument(invalidf("mode %q: the builtin engine summarises extractively only (mode \"\" or \"extractive\"); configure SW4RM_REASONING_EXTERNAL for others", req.GetMode()))
	}
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	maxTokens := int(req.GetMaxTokens())
	if maxTokens == 0 {
		maxTokens = DefaultSummaryTokens
	}
	summary := Extract(req.GetSegments(), maxTokens*BytesPerToken)
	return &reasoningpb.SummarizeResponse{
		Summary: summary, Tokens: uint32(Tokens(summary)), CostCents: 0, Model: BuiltinModel,
	}, nil
}

// Tokens is the builtin token estimate of s: ceil(bytes / BytesPerToken).
func Tokens(s string) int { return (len(s) + BytesPerToken - 1) / BytesPerToken }

// summaryLine is one segment's line of a summary.
type summaryLine struct {
	prefix    string   // "<kind>: " or ""
	sentences []string // all of the segment's
	kept      []string // those in the summary
}

// Extract is Builtin's extractive summary of segments in at most budget bytes (see Builtin).
func Extract(segments []*reasoningpb.TextSegment, budget int) string {
	order := make([]*reasoningpb.TextSegment, 0, len(segments))
	for _, s := range segments {
		if strings.TrimSpace(s.GetContent()) != "" {
			order = append(order, s)
		}
	}
	slices.SortStableFunc(order, func(a, b *reasoningpb.TextSegment) int {
		switch {
		case a.GetSeq() < b.GetSeq():
			return -1
		case a.GetSeq() > b.GetSeq():
			return 1
		}
		return 0
	})
	lines := make([]*summaryLine, len(order))
	for i, s := range order {
		lines[i] = &summaryLine{sentences: sentences(s.GetContent())}
		if k := strings.TrimSpace(s.GetKind()); k != "" {
			lines[i].prefix = k + ": "
		}
	}
	used, started := 0, 0 // bytes of the summary so far; lines with a sentence
fill:
	for pass := 0; ; pass++ {
		more := false
		for _, l := range lines {
			if pass >= len(l.sentences) {
				continue
			}
			more = true
			s := l.sentences[pass]
			// What adding s costs: the line's prefix and the newline before it for a line's
			// first sentence, the space before it otherwise.
			overhead := 1
			if len(l.kept) == 0 {
				overhead = len(l.prefix)
				if started > 0 {
					overhead++
				}
			}
			if used+overhead+len(s) > budget {
				cut := cutWords(s, budget-used-overhead)
				if cut == "" && used == 0 {
					// Nothing in the summary yet: rather a cut word than an empty summary,
					// and rather no kind than no text.
					if cut = cutRunes(s, budget-overhead); cut == "" {
						l.prefix, cut = "", cutRunes(s, budget)
					}
				}
				if cut != "" {
					l.kept = append(l.kept, cut)
				}
				break fill // the summary is full
			}
			if len(l.kept) == 0 {
				started++
			}
			l.kept = append(l.kept, s)
			used += overhead + len(s)
		}
		if !more {
			break
		}
	}
	var out []string
	for _, l := range lines {
		if len(l.kept) > 0 {
			out = append(out, l.prefix+strings.Join(l.kept, " "))
		}
	}
	return strings.Join(out, "\n")
}

// sentences splits text at ".", "!" or "?" followed by a space or the end, and at line
// breaks; each sentence has its whitespace collapsed, and empty ones are dropped.
func sentences(text string) []string {
	var out []string
	add := func(s string) {
		if s = strings.Join(strings.Fields(s), " "); s != "" {
			out = append(out, s)
		}
	}
	for _, line := range strings.Split(text, "\n") {
		start := 0
		for i := 0; i < len(line); i++ {
			switch line[i] {
			case '.', '!', '?':
				if i+1 == len(line) || line[i+1] == ' ' || line[i+1] == '\t' || line[i+1] == '\r' {
					add(line[start : i+1])
					start = i + 1
				}
			}
		}
		add(line[start:])
	}
	return out
}

// cutWords returns the longest prefix of whole words of s that fits in room bytes with the
// ellipsis after it, or "" when not even one word does.
func cutWords(s string, room int) string {
	var b strings.Builder
	for _, w := range strings.Fields(s) {
		sep := 0
		if b.Len() > 0 {
			sep = 1
		}
		if b.Len()+sep+len(w)+len(ellipsis) > room {
			break
		}
		if sep == 1 {
			b.WriteByte(' ')
		}
		b.WriteString(w)
	}
	if b.Len() == 0 {
		return ""
	}
	return b.String() + ellipsis
}

// cutRunes returns the longest prefix of whole runes of s that fits in room bytes with the
// ellipsis after it, or "" when none does.
func cutRunes(s string, room int) string {
	n := 0
	for n < len(s) {
		_, size := utf8.DecodeRuneInString(s[n:])
		if n+size+len(ellipsis) > room {
			break
		}
		n += size
	}
	if n == 0 {
		return ""
	}
	return s[:n] + ellipsis
}
