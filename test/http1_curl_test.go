package test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// curlScript runs the calls of docs/http1.md (docs/http1_test.go keeps the page's commands
// and the script's the same).
const curlScript = "../scripts/http1-curl.sh"

// TestHTTP1Curl: the page's curl calls work as it says, against each store — two agents
// register over HTTP/1.1, a DATA message reaches the recipient's Connect stream among
// keep-alive items, AckDelivery records it, the ACK FULFILLED and the router's ACK RECEIVED
// reach the sender's stream, the errors look as documented, and the HTTP port serves the
// descriptor set. The script checks each answer and exits non-zero at the first wrong one.
func TestHTTP1Curl(t *testing.T) {
	bash := requireTool(t, "bash")
	requireTool(t, "curl") // the script's only other need beyond coreutils
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			cfg := newConfig(t, kind)
			// Keep-alive items among the streams' messages, which the script must step over.
			cfg.StreamKeepAlive = 50 * time.Millisecond
			s := start(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bash, curlScript)
			cmd.Env = append(os.Environ(),
				"SW4RM_ADDR="+s.app.GRPCAddr(), "SW4RM_HTTP_ADDR="+s.app.HTTPAddr(),
				"FROM="+uniq(t, "from"), "TO="+uniq(t, "to"))
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			t.Log(out.String())
			require.NoError(t, err, "scripts/http1-curl.sh failed:\n%s", out.String())
			require.Contains(t, out.String(), "PASS: every call of docs/http1.md answered as documented")
			require.Contains(t, out.String(), "ok: the sender's stream: ACK FULFILLED")
			require.Contains(t, out.String(), "ok: descriptors.binpb: RouterService is in it")
			m := regexp.MustCompile(`keep-alive items on the two streams so far: (\d+)`).FindStringSubmatch(out.String())
			require.NotNil(t, m, "the script counts keep-alive items")
			require.NotEqual(t, "0", m[1], "the streams carried keep-alive items, and the script read past them")
			require.NotContains(t, out.String(), "FAIL")
		})
	}
}

// requireTool returns the path of a program the test runs. Without it the test is skipped,
// except under CI=true, where it fails: .ci/run installs it, and a check that did not run
// must not pass unseen.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not on PATH (.ci/run installs it): %v", name, err)
		}
		t.Skipf("%s is not on PATH: the curl calls of docs/http1.md did not run", name)
	}
	return p
}
