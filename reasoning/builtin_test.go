package reasoning

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/reasoningpb"
)

func evaluate(t *testing.T, a, b string) *reasoningpb.DebateEvaluateResponse {
	t.Helper()
	resp, err := Builtin{}.EvaluateDebate(t.Context(), &reasoningpb.DebateEvaluateRequest{NegotiationId: "n", ProposalA: a, ProposalB: b})
	require.NoError(t, err)
	return resp
}

func TestBuiltinEvaluateDebateScores(t *testing.T) {
	cases := []struct {
		name   string
		a, b   string
		score  float64
		method string
		notes  []string
	}{
		{"identical text", "Ship on Friday.", "ship on friday", 1, MethodTokenJaccard, []string{"3 of 3 distinct words", "identical"}},
		{"disjoint text", "alpha beta", "gamma delta", 0, MethodTokenJaccard,
			[]string{"0 of 4", "only in proposal_a: alpha, beta", "only in proposal_b: delta, gamma"}},
		{"half the words", "price 10 delivery monday", "price 10 delivery tuesday", 3.0 / 5, MethodTokenJaccard,
			[]string{"3 of 5 distinct words in common (similarity 0.600)", "only in proposal_a: monday", "only in proposal_b: tuesday"}},
		{"JSON, key order and number form do not matter", `{"price": 10, "terms": ["net30", "fob"]}`, `{"terms":["net30","fob"],"price":10.0}`, 1,
			MethodJSONStructural, []string{"3 of 3 leaves", "identical"}},
		{"JSON, one leaf changed", `{"price": 10, "terms": ["net30", "fob"], "ship": {"by": "air"}}`,
			`{"price": 12, "terms": ["net30", "fob"], "ship": {"by": "air"}}`, 3.0 / 5, MethodJSONStructural,
			[]string{"3 of 5 leaves in common (similarity 0.600)", "differ at /price"}},
		{"JSON, added and removed keys, escaped pointers", `{"a/b": 1, "keep": true}`, `{"c~d": 1, "keep": true}`, 1.0 / 3, MethodJSONStructural,
			[]string{"differ at /a~1b, /c~0d"}},
		{"JSON arrays by index", `[1, 2, 3]`, `[1, 3, 2]`, 1.0 / 5, MethodJSONStructural, []string{"differ at /1, /2"}},
		{"empty containers are leaves", `{"a": {}}`, `{"a": []}`, 0, MethodJSONStructural, []string{"differ at /a"}},
		{"JSON against text compares words", `{"price": 10}`, "price 10", 1, MethodTokenJaccard, nil},
		{"scalars are text", `"hello world"`, `"hello there"`, 1.0 / 3, MethodTokenJaccard, nil},
		{"no words, equal", "!!!", "!!!", 1, MethodTokenJaccard, nil},
		{"no words, different", "!!!", "???", 0, MethodTokenJaccard, nil},
		{"trailing data is not one JSON document", `{"a":1} {"b":2}`, `{"a":1}`, 2.0 / 4, MethodTokenJaccard, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := evaluate(t, tc.a, tc.b)
			assert.InDelta(t, tc.score, resp.GetConfidenceScore(), 1e-12)
			assert.True(t, strings.HasPrefix(resp.GetNotes(), "engine "+BuiltinModel+"; method "+tc.method+":"), resp.GetNotes())
			for _, n := range tc.notes {
				assert.Contains(t, resp.GetNotes(), n)
			}
			// Symmetric in score: how close b is to a is how close a is to b.
			assert.InDelta(t, resp.GetConfidenceScore(), evaluate(t, tc.b, tc.a).GetConfidenceScore(), 1e-12)
		})
	}
}

// TestBuiltinEvaluateDebateIsDeterministic: the same request gets byte-identical answers,
// also when a JSON object's keys come in another order (Go randomises map iteration, so a
// leak of it would show within these repetitions).
func TestBuiltinEvaluateDebateIsDeterministic(t *testing.T) {
	var keysA, keysB []string
	for i := range 40 {
		keysA = append(keysA, fmt.Sprintf(`"k%02d": %d`, i, i))
		keysB = append(keysB, fmt.Sprintf(`"k%02d": %d`, 39-i, (39-i)%7))
	}
	a, b := "{"+strings.Join(keysA, ",")+"}", "{"+strings.Join(keysB, ",")+"}"
	first := evaluate(t, a, b)
	assert.Contains(t, first.GetNotes(), "(+")
	for range 50 {
		assert.True(t, proto.Equal(first, evaluate(t, a, b)), "answers differ")
	}
	text := evaluate(t, "z y x w v u t s r q p o n m", "a b c d e f g h i j k l m")
	for range 50 {
		assert.True(t, proto.Equal(text, evaluate(t, "z y x w v u t s r q p o n m", "a b c d e f g h i j k l m")))
	}
	assert.Contains(t, text.GetNotes(), "only in proposal_a: n, o, p, q, r, s, t, u, v, w (+3 more)")
}

func TestBuiltinEvaluateDebateBounds(t *testing.T) {
	inputs := []string{"a", "a b", `{"x": [1, {"y": null}]}`, `[]`, "ünïcödé wörds", `{"x": 1}`, "   x   ", "1.0", `{"x":"1"}`}
	for _, a := range inputs {
		for _, b := range inputs {
			c := evaluate(t, a, b).GetConfidenceScore()
			assert.False(t, math.IsNaN(c))
			assert.GreaterOrEqual(t, c, 0.0, "%q vs %q", a, b)
			assert.LessOrEqual(t, c, 1.0, "%q vs %q", a, b)
			if a == b {
				assert.Equal(t, 1.0, c, "%q with itself", a)
			}
		}
	}
}

func TestBuiltinEvaluateDebateIntensity(t *testing.T) {
	resp, err := Builtin{}.EvaluateDebate(t.Context(), &reasoningpb.DebateEvaluateRequest{ProposalA: "a", ProposalB: "a", Intensity: "high"})
	require.NoError(t, err)
	assert.Equal(t, 1.0, resp.GetConfidenceScore(), "intensity does not change the score")
	assert.Contains(t, resp.GetNotes(), "intensity HIGH")
}

func TestBuiltinRefusals(t *testing.T) {
	ctx := t.Context()
	for name, tc := range map[string]struct {
		call func() error
		msg  string
	}{
		"no proposal_a": {func() error {
			_, err := Builtin{}.EvaluateDebate(ctx, &reasoningpb.DebateEvaluateRequest{ProposalB: "x"})
			return err
		}, "validation_error: proposal_a is required"},
		"blank proposal_b": {func() error {
			_, err := Builtin{}.EvaluateDebate(ctx, &reasoningpb.DebateEvaluateRequest{ProposalA: "x", ProposalB: " \n"})
			return err
		}, "validation_error: proposal_b is required"},
		"unknown intensity": {func() error {
			_, err := Builtin{}.EvaluateDebate(ctx, &reasoningpb.DebateEvaluateRequest{ProposalA: "x", ProposalB: "y", Intensity: "EXTREME"})
			return err
		}, `validation_error: intensity "EXTREME": want LOWEST, LOW, MEDIUM, HIGH or HIGHEST`},
		"UNSPECIFIED is not an intensity": {func() error {
			_, err := Builtin{}.EvaluateDebate(ctx, &reasoningpb.DebateEvaluateRequest{ProposalA: "x", ProposalB: "y", Intensity: "DEBATE_INTENSITY_UNSPECIFIED"})
			return err
		}, "validation_error: intensity"},
		"no segments": {func() error {
			_, err := Builtin{}.Summarize(ctx, &reasoningpb.SummarizeRequest{SessionId: "s"})
			return err
		}, "validation_error: segments are required"},
		"blank segments": {func() error {
			_, err := Builtin{}.Summarize(ctx, &reasoningpb.SummarizeRequest{Segments: []*reasoningpb.TextSegment{{Content: " "}, {Content: ""}}})
			return err
		}, "validation_error: segments: all 2 are blank"},
		"unknown mode": {func() error {
			_, err := Builtin{}.Summarize(ctx, &reasoningpb.SummarizeRequest{Segments: []*reasoningpb.TextSegment{{Content: "x"}}, Mode: "abstractive"})
			return err
		}, `validation_error: mode "abstractive": the builtin engine summarises extractively only`},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.call()
			assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), tc.msg)
		})
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err := Builtin{}.EvaluateDebate(cancelled, &reasoningpb.DebateEvaluateRequest{ProposalA: "x", ProposalB: "y"})
	assert.Equal(t, codes.Canceled, status.Code(err))
}

func seg(kind, content string, seq int64) *reasoningpb.TextSegment {
	return &reasoningpb.TextSegment{Kind: kind, Content: content, Seq: seq}
}

func summarize(t *testing.T, maxTokens uint32, segs ...*reasoningpb.TextSegment) *reasoningpb.SummarizeResponse {
	t.Helper()
	resp, err := Builtin{}.Summarize(t.Context(), &reasoningpb.SummarizeRequest{SessionId: "s", Segments: segs, MaxTokens: maxTokens})
	require.NoError(t, err)
	assert.Equal(t, BuiltinModel, resp.GetModel())
	assert.Zero(t, resp.GetCostCents())
	assert.Equal(t, uint32(Tokens(resp.GetSummary())), resp.GetTokens())
	return resp
}

func TestBuiltinSummarizeOrderAndPasses(t *testing.T) {
	segs := []*reasoningpb.TextSegment{
		seg("bob", "Second turn. It has more! And more?", 2),
		seg("alice", "First turn opens.\nIt continues on a new line.", 1),
		seg("", "   ", 3), // blank: skipped
		seg("carol", "Third   turn\twith   spaces.", 4),
	}
	// A large budget takes everything, in seq order, one line per segment.
	full := summarize(t, 1000, segs...)
	assert.Equal(t, "alice: First turn opens. It continues on a new line.\nbob: Second turn. It has more! And more?\ncarol: Third turn with spaces.", full.GetSummary())

	// A budget for the first sentences only: every segment is represented before any gets
	// a second sentence. 76 bytes hold the three first sentences and their prefixes
	// ("alice: First turn opens.\nbob: Second turn.\ncarol: Third turn with spaces." is 73).
	first := summarize(t, 19, segs...)
	assert.Equal(t, "alice: First turn opens.\nbob: Second turn.\ncarol: Third turn with spaces.", first.GetSummary())

	// Equal seq keep their request order.
	tie := summarize(t, 100, seg("x", "one.", 5), seg("y", "two.", 5))
	assert.Equal(t, "x: one.\ny: two.", tie.GetSummary())
}

func TestBuiltinSummarizeBudget(t *testing.T) {
	long := strings.Repeat("word ", 200) + "end."
	segs := []*reasoningpb.TextSegment{seg("a", long, 1), seg("b", "Short one. "+long, 2), seg("", "ünïcödé "+long, 3)}
	for _, maxTokens := range []uint32{1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 1000} {
		resp := summarize(t, maxTokens, segs...)
		s := resp.GetSummary()
		assert.LessOrEqual(t, len(s), int(maxTokens)*BytesPerToken, "max_tokens %d", maxTokens)
		assert.LessOrEqual(t, resp.GetTokens(), maxTokens, "max_tokens %d", maxTokens)
		assert.NotEmpty(t, s, "max_tokens %d: something always fits", maxTokens)
		assert.True(t, utf8.ValidString(s), "cut on rune boundaries")
		if maxTokens < 300 {
			assert.True(t, strings.HasSuffix(s, ellipsis), "max_tokens %d: a cut sentence is marked: %q", maxTokens, s)
		}
	}
	// A sentence is cut at a word boundary.
	cut := summarize(t, 5, seg("", "alpha beta gamma delta epsilon.", 1)).GetSummary()
	assert.Equal(t, "alpha beta gamma…", cut)
	// Only when no word fits at all is a word cut.
	assert.Equal(t, "abcdefghijklmnopq…", summarize(t, 5, seg("", strings.Repeat("abcdefghijklmnopqrstuvwxyz", 3), 1)).GetSummary())
	// max_tokens 0 means DefaultSummaryTokens.
	def := summarize(t, 0, segs...)
	assert.LessOrEqual(t, len(def.GetSummary()), DefaultSummaryTokens*BytesPerToken)
	assert.Greater(t, len(def.GetSummary()), DefaultSummaryTokens*BytesPerToken-20, "the default budget is used, not a smaller one")
}

func TestBuiltinSummarizeIsDeterministic(t *testing.T) {
	segs := []*reasoningpb.TextSegment{seg("a", "One. Two. Three.", 3), seg("b", "Four. Five.", 1), seg("c", "Six.", 2)}
	first := summarize(t, 6, segs...)
	for range 20 {
		assert.True(t, proto.Equal(first, summarize(t, 6, segs...)))
	}
	_, err := Builtin{}.Summarize(t.Context(), &reasoningpb.SummarizeRequest{Segments: segs, Mode: "Extractive"})
	assert.NoError(t, err, "the extractive mode by name, any case")
}

func TestSentences(t *testing.T) {
	assert.Equal(t, []string{"A b.", "C?", "D!", "e.g.x stays", "Last line"},
		sentences("A  b. C? D!\n\n e.g.x stays\r\nLast line"))
	assert.Equal(t, []string{"3.14 is pi."}, sentences("3.14 is pi."))
}

func TestFromConfig(t *testing.T) {
	e, err := FromConfig("")
	require.NoError(t, err)
	assert.Equal(t, Builtin{}, e)
	assert.Equal(t, BuiltinModel, NameOf(e))
	e, err = FromConfig(" 127.0.0.1:1 ")
	require.NoError(t, err)
	ext, ok := e.(*External)
	require.True(t, ok, "%T", e)
	assert.Equal(t, "external:127.0.0.1:1", NameOf(e))
	require.NoError(t, ext.Close())
	_, err = NewExternal(" ")
	assert.Error(t, err)
}
