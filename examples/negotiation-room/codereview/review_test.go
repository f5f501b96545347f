package codereview

import (
	"strings"
	"testing"

	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/protocol/voting"
)

// The drafts must play the story the README tells under the server's default policy and every
// strategy: draft 1 is sent back for revision, draft 2 is approved, and neither escalates to a
// human (which would make the example wait for an operator).
func TestDraftsUnderEveryStrategy(t *testing.T) {
	want := []negotiationroompb.DecisionOutcome{negotiationroompb.DecisionOutcome_REVISION_REQUESTED, negotiationroompb.DecisionOutcome_APPROVED}
	for i, draft := range Drafts {
		var ids []string
		var votes []*negotiationroompb.NegotiationVote
		for _, c := range critics {
			r := c.review(splitFiles(draft))
			ids = append(ids, c.name)
			v := &negotiationroompb.NegotiationVote{ArtifactId: "a", CriticId: c.name, Score: r.score, Confidence: r.confidence,
				Passed: r.passed, Strengths: r.strengths, Weaknesses: r.weaknesses, Recommendations: r.recommendations}
			if err := voting.ValidateVote(v, ids, votes); err != nil {
				t.Fatalf("draft %d, %s: invalid vote: %v", i+1, c.name, err)
			}
			votes = append(votes, v)
			t.Logf("draft %d %-8s score %.1f confidence %.2f passed %t weaknesses %q", i+1, c.name, r.score, r.confidence, r.passed, r.weaknesses)
		}
		for _, s := range voting.Strategies() {
			p := voting.DefaultPolicy()
			p.Strategy = s
			v := voting.Decide(p, ids, votes, false)
			if v.Outcome != want[i] {
				t.Errorf("draft %d under %s: %s (%s), want %s", i+1, s, v.Outcome, v.Reason, want[i])
			}
		}
	}
}

func TestReviewsSeeTheProblems(t *testing.T) {
	files := splitFiles(Drafts[0])
	if len(files) != 1 || files[0].name != "notify.go" {
		t.Fatalf("draft 1 files: %+v", files)
	}
	if r := reviewTests(files); r.passed {
		t.Error("tests critic passed a change without tests")
	}
	style := reviewStyle(files)
	for _, w := range []string{"not gofmt-formatted", "columns long", "no doc comment"} {
		if !contains(style.weaknesses, w) {
			t.Errorf("style critic missed %q: %q", w, style.weaknesses)
		}
	}
	sec := reviewSecurity(files)
	for _, w := range []string{"exec.Command", "hard-codes a secret"} {
		if !contains(sec.weaknesses, w) {
			t.Errorf("security critic missed %q: %q", w, sec.weaknesses)
		}
	}
	if r := reviewSecurity([]file{{name: "x.go", body: "package x\nfunc F() { os.RemoveAll(\"/\") }\n"}}); !contains(r.weaknesses, "deletes files") {
		t.Errorf("security critic missed os.RemoveAll: %q", r.weaknesses)
	}
	two := splitFiles(Drafts[1])
	if len(two) != 2 || two[1].name != "notify_test.go" {
		t.Fatalf("draft 2 files: %+v", two)
	}
}

func contains(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
