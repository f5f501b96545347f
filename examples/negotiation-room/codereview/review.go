package codereview

import (
	"fmt"
	"go/format"
	"regexp"
	"strings"
)

// Drafts are the producer's artifact, one per version: a Go change, one or more files in
// txtar form ("-- name --" lines start each file). Draft 1 has problems every critic can find;
// draft 2 is the revision.
var Drafts = []string{
	`-- notify.go --
package notify

import "os/exec"

const webhookToken = "sk_live_51HxQd2eZvKYlo2C8Xb"

func Send(channel, text string) error {
    cmd := exec.Command("sh", "-c", "curl -s -X POST -H 'Authorization: Bearer "+webhookToken+"' -d '"+text+"' https://hooks.example.com/"+channel)
    return cmd.Run()
}
`,
	`-- notify.go --
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
)

// Endpoint is the chat webhook Send posts to.
var Endpoint = "https://hooks.example.com/post"

// Send posts text to a chat channel through the webhook, authenticating with the token in
// the NOTIFY_TOKEN environment variable.
func Send(ctx context.Context, channel, text string) error {
	body, err := json.Marshal(map[string]string{"channel": channel, "text": text})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, Endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+os.Getenv("NOTIFY_TOKEN"))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("notify: webhook answered %s", resp.Status)
	}
	return nil
}
-- notify_test.go --
package notify

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestSendReportsWebhookErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()
	Endpoint = srv.URL
	if err := Send(context.Background(), "ops", "hello"); err == nil {
		t.Fatal("Send succeeded although the webhook failed")
	}
}
`,
}

// file is one file of an artifact.
type file struct {
	name, body string
}

// splitFiles splits a txtar-style artifact into its files; text without markers is one file.
func splitFiles(artifact string) []file {
	var files []file
	cur := -1
	for _, line := range strings.SplitAfter(artifact, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "-- ") && strings.HasSuffix(trimmed, " --") && len(trimmed) > 6 {
			files = append(files, file{name: strings.TrimSpace(trimmed[3 : len(trimmed)-3])})
			cur = len(files) - 1
			continue
		}
		if cur < 0 {
			files = append(files, file{name: "snippet.go"})
			cur = 0
		}
		files[cur].body += line
	}
	return files
}

// review is a critic's verdict on an artifact, ready to become a NegotiationVote.
type review struct {
	score, confidence float64
	passed            bool
	strengths         []string
	weaknesses        []string
	recommendations   []string
}

// critic is one reviewer of the room: a name, and a deterministic heuristic.
type critic struct {
	name   string // short name: tests, style, security
	focus  string // one-line description for the registry
	review func(files []file) review
}

var critics = []critic{
	{name: "tests", focus: "checks that a change ships with Go tests that assert something", review: reviewTests},
	{name: "style", focus: "checks gofmt formatting, line length and doc comments of exported functions", review: reviewStyle},
	{name: "security", focus: "looks for shell-outs, file deletion and hard-coded secrets", review: reviewSecurity},
}

var (
	testFunc   = regexp.MustCompile(`(?m)^func Test\w*\(t \*testing\.T\)`)
	assertion  = regexp.MustCompile(`\bt\.(Error|Errorf|Fatal|Fatalf|Fail|FailNow)\(`)
	exportedFn = regexp.MustCompile(`(?m)^func (\([^)]*\) )?([A-Z]\w*)\(`)
	secret     = regexp.MustCompile(`(?i)\b\w*(token|secret|password|passwd|api_?key)\w*\s*(=|:=)\s*"([^"]{8,})"`)
	shellOut   = regexp.MustCompile(`\bexec\.Command(Context)?\(`)
	removal    = regexp.MustCompile(`\bos\.Remove(All)?\(`)
)

// reviewTests looks for Go test functions ("func Test") and for assertions in them.
func reviewTests(files []file) review {
	tests, asserts := 0, 0
	for _, f := range files {
		tests += len(testFunc.FindAllString(f.body, -1))
		asserts += len(assertion.FindAllString(f.body, -1))
	}
	switch {
	case tests == 0:
		return review{score: 3, confidence: 0.9, passed: false,
			strengths:       []string{"small change, easy to cover"},
			weaknesses:      []string{"no tests: no func Test anywhere in the change"},
			recommendations: []string{"add a _test.go file with a test for the failure path"}}
	case asserts == 0:
		return review{score: 6, confidence: 0.8, passed: false,
			strengths:       []string{fmt.Sprintf("%d test function(s)", tests)},
			weaknesses:      []string{"the tests assert nothing (no t.Error/t.Fatal)"},
			recommendations: []string{"make the tests fail when the behaviour is wrong"}}
	default:
		return review{score: 9, confidence: 0.9, passed: true,
			strengths:       []string{fmt.Sprintf("%d test function(s) with %d assertion(s)", tests, asserts), "covers the failure path"},
			weaknesses:      []string{"no test of the success path"},
			recommendations: []string{"add a table test for the happy path"}}
	}
}

// reviewStyle checks gofmt, lines over 100 columns and doc comments on exported functions.
func reviewStyle(files []file) review {
	var weak, recs []string
	confidence := 0.8
	for _, f := range files {
		if !strings.HasSuffix(f.name, ".go") {
			continue
		}
		if formatted, err := format.Source([]byte(f.body)); err != nil {
			weak = append(weak, f.name+" does not parse: "+err.Error())
			confidence = 0.5
		} else if string(formatted) != f.body {
			weak = append(weak, f.name+" is not gofmt-formatted")
			recs = append(recs, "run gofmt -w "+f.name)
		}
		lines := strings.Split(f.body, "\n")
		for i, line := range lines {
			if n := len(strings.ReplaceAll(line, "\t", "    ")); n > 100 {
				weak = append(weak, fmt.Sprintf("%s:%d is %d columns long", f.name, i+1, n))
				recs = append(recs, fmt.Sprintf("wrap %s:%d below 100 columns", f.name, i+1))
			}
			if m := exportedFn.FindStringSubmatch(line); m != nil && !strings.HasPrefix(m[2], "Test") &&
				(i == 0 || !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "//")) {
				weak = append(weak, fmt.Sprintf("exported func %s has no doc comment", m[2]))
				recs = append(recs, fmt.Sprintf("document %s with a sentence starting with its name", m[2]))
			}
		}
	}
	r := review{score: max(10-1.5*float64(len(weak)), 1), confidence: confidence, weaknesses: weak, recommendations: recs}
	if len(weak) == 0 {
		r.score = 9.5
		r.strengths = []string{"gofmt-clean", "short lines", "exported functions documented"}
		r.recommendations = []string{"none"}
	} else {
		r.strengths = []string{"short and focused"}
	}
	r.passed = r.score >= 7
	return r
}

// reviewSecurity looks for shell-outs, file deletion and hard-coded secrets.
func reviewSecurity(files []file) review {
	var weak, recs, strong []string
	env := false
	for _, f := range files {
		if shellOut.MatchString(f.body) {
			weak = append(weak, f.name+" runs a shell command (exec.Command): command injection risk")
			recs = append(recs, "call the API with net/http instead of shelling out")
		}
		if removal.MatchString(f.body) {
			weak = append(weak, f.name+" deletes files (os.Remove/os.RemoveAll)")
			recs = append(recs, "confine deletions to a checked directory")
		}
		for _, m := range secret.FindAllStringSubmatch(f.body, -1) {
			weak = append(weak, fmt.Sprintf("%s hard-codes a secret (%s...)", f.name, m[3][:4]))
			recs = append(recs, "read the secret from the environment or a secret store, and rotate it")
		}
		env = env || strings.Contains(f.body, "os.Getenv(")
	}
	if env {
		strong = append(strong, "credentials come from the environment")
	}
	if len(weak) == 0 {
		strong = append(strong, "no shell-outs, deletions or embedded secrets")
		return review{score: 9.5, confidence: 0.85, passed: true, strengths: strong,
			weaknesses: []string{"none found by pattern scan"}, recommendations: []string{"keep secrets out of logs"}}
	}
	if len(strong) == 0 {
		strong = []string{"small attack surface"}
	}
	return review{score: max(10-3*float64(len(weak)), 1), confidence: 0.9, passed: false,
		strengths: strong, weaknesses: weak, recommendations: recs}
}
