package debate

import (
	"strings"
	"unicode"
)

// Claims are the normalised sentences of a turn, the units of ADR-011's convergence heuristic
// ("stop when no new claims appear in a round"): the text is split into lines and each line
// into sentences (at ".", "!" or "?" followed by a space or the end of the line); each sentence
// is lower-cased, its spaces collapsed and its leading and trailing punctuation and symbols
// trimmed; sentences without a letter (list numbers, rules) and the FINAL_VERDICT lines are
// left out, and repeats are kept once, in first-seen order.
func Claims(text string) []string {
	var out []string
	seen := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if _, ok := markerLine(line); ok {
			continue
		}
		for _, s := range sentences(line) {
			c := normaliseClaim(s)
			if c == "" || seen[c] {
				continue
			}
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

// sentences splits a line at ".", "!" and "?" followed by white space or the end of the line,
// so that "3.5" and "e.g.x" stay whole.
func sentences(line string) []string {
	var out []string
	rs := []rune(line)
	start := 0
	for i, r := range rs {
		if r != '.' && r != '!' && r != '?' {
			continue
		}
		if i+1 == len(rs) || unicode.IsSpace(rs[i+1]) {
			out = append(out, string(rs[start:i+1]))
			start = i + 1
		}
	}
	if start < len(rs) {
		out = append(out, string(rs[start:]))
	}
	return out
}

func normaliseClaim(s string) string {
	s = strings.Join(strings.Fields(strings.ToLower(s)), " ")
	s = strings.TrimFunc(s, func(r rune) bool { return unicode.IsPunct(r) || unicode.IsSymbol(r) || unicode.IsSpace(r) })
	if !strings.ContainsFunc(s, unicode.IsLetter) {
		return ""
	}
	return s
}

// Converged says the round added no claim absent from every earlier round (ADR-011's
// convergence stop). It applies from the second round on: with no earlier turns, or an empty
// round (nobody answered, so nothing was agreed), it is false.
func Converged(earlier []Turn, round []Turn) bool {
	if len(earlier) == 0 || len(round) == 0 {
		return false
	}
	known := map[string]bool{}
	for _, t := range earlier {
		for _, c := range Claims(t.Text) {
			known[c] = true
		}
	}
	for _, t := range round {
		for _, c := range Claims(t.Text) {
			if !known[c] {
				return false
			}
		}
	}
	return true
}
