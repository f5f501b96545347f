package docs

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestSigningDocShowsTheVectors fails when signing.md and the vectors the tests check
// (protocol/signing/testdata/vectors.json) disagree: every vector's pre-image, as the page
// writes it (\n for each newline), and signature are on the page, and every signature on the
// page is a vector's, so a vector changed in one place and not the other is caught.
func TestSigningDocShowsTheVectors(t *testing.T) {
	doc, err := os.ReadFile("signing.md")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../protocol/signing/testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []struct {
		Preimage  string `json:"preimage"`
		Signature string `json:"signature_b64url"`
		JSON      string `json:"json"`
	}
	if err := json.Unmarshal(raw, &vs); err != nil {
		t.Fatal(err)
	}
	page := string(doc)
	published := map[string]bool{}
	for i, v := range vs {
		if pre := strings.ReplaceAll(v.Preimage, "\n", `\n`); !strings.Contains(page, "preimage         "+pre+"\n") {
			t.Errorf("vector %d: signing.md does not show its pre-image %s", i, pre)
		}
		if !strings.Contains(page, "signature_b64url "+v.Signature+"\n") {
			t.Errorf("vector %d: signing.md does not show its signature %s", i, v.Signature)
		}
		if v.JSON != "" && !strings.Contains(page, "\n"+v.JSON+"\n") {
			t.Errorf("vector %d: signing.md does not show its JSON body %s on a line of its own", i, v.JSON)
		}
		published[v.Signature] = true
	}
	for _, line := range strings.Split(page, "\n") {
		if sig, ok := strings.CutPrefix(line, "signature_b64url "); ok && !published[strings.TrimSpace(sig)] {
			t.Errorf("signing.md shows a signature no vector has: %s", sig)
		}
	}
}
