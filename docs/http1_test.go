package docs

import (
	"os"
	"strings"
	"testing"
)

// TestHTTP1CurlCallsAreTheScripts fails when a command of http1.md is not what
// scripts/http1-curl.sh runs: every line of the page's bash blocks (```bash; other examples
// are ```sh) is a line of the script, which test/http1_curl_test.go runs against a server and
// which checks each answer. So the page's curl calls are tested as written.
func TestHTTP1CurlCallsAreTheScripts(t *testing.T) {
	doc, err := os.ReadFile("http1.md")
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("../scripts/http1-curl.sh")
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(script), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	blocks, curls := 0, 0
	in := false
	for i, l := range strings.Split(string(doc), "\n") {
		switch {
		case !in && l == "```bash":
			in = true
			blocks++
		case in && l == "```":
			in = false
		case in:
			if strings.Contains(l, "curl ") {
				curls++
			}
			if tl := strings.TrimSpace(l); tl != "" && !lines[tl] {
				t.Errorf("http1.md:%d is not a line of scripts/http1-curl.sh: %s", i+1, tl)
			}
		}
	}
	if in {
		t.Error("http1.md: a bash block is not closed")
	}
	// RegisterAgent, StreamIncoming, SendMessage, AckDelivery, the ACK, the errors: the page
	// must keep showing them, so that the check above has something to check.
	if blocks < 10 || curls < 8 {
		t.Errorf("http1.md has %d bash blocks with %d curl calls; the calls of an agent's life are missing", blocks, curls)
	}
}
