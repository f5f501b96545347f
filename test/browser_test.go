package test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// The browser test's page lives in test/browser: index.html as served, src/app.ts the client,
// gen/ the TypeScript protoc-gen-es writes for proto/, dist/app.js the bundle of both, and
// dist/inputs.sha256 the digest of what the bundle was made from (test/browser/stamp.mjs).
// gen/ and dist/ are committed, so the test needs no Node.js; `make browser-bundle` remakes
// them with the tools test/browser/package-lock.json pins.
const browserDir = "browser"

// TestBrowserBundleCurrent: the committed bundle was made from the .proto files, the page's
// sources and the pinned tools as they are now, so the browser test runs the page the
// sources describe.
func TestBrowserBundleCurrent(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(browserDir, "dist", "inputs.sha256"))
	require.NoError(t, err)
	assert.Equal(t, strings.TrimSpace(string(want)), browserInputsDigest(t),
		"test/browser/dist is stale: a .proto file, test/browser/src or the pinned tools changed since it was built; run `make browser-bundle` and commit gen/ and dist/")
}

// browserInputsDigest computes what test/browser/stamp.mjs writes: the SHA-256 of, for each
// input in byte order of its path from the repository root, the path, "\n", the hex SHA-256
// of its content, "\n".
func browserInputsDigest(t *testing.T) string {
	t.Helper()
	root := ".."
	var inputs []string
	add := func(dir string, keep func(string) bool) {
		require.NoError(t, filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !keep(d.Name()) {
				return err
			}
			rel, err := filepath.Rel(root, p)
			inputs = append(inputs, filepath.ToSlash(rel))
			return err
		}))
	}
	add("proto", func(n string) bool { return strings.HasSuffix(n, ".proto") })
	add("test/browser/src", func(string) bool { return true })
	inputs = append(inputs, "test/browser/buf.gen.yaml", "test/browser/package.json", "test/browser/package-lock.json")
	slices.Sort(inputs) // Go compares strings bytewise, as stamp.mjs compares its paths
	h := sha256.New()
	for _, p := range inputs {
		b, err := os.ReadFile(filepath.Join(root, p))
		require.NoError(t, err)
		sum := sha256.Sum256(b)
		fmt.Fprintf(h, "%s\n%s\n", p, hex.EncodeToString(sum[:]))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// chromium finds the browser: $SW4RM_CHROMIUM, else chromium, chromium-browser or
// google-chrome on PATH. Without one the test skips, except under CI=true, where it fails, so
// that a machine without a browser cannot shrink the suite unseen (.ci/run installs Debian's
// chromium).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SW4RM_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "the browser test needs Chromium (Debian: apt-get install chromium) or SW4RM_CHROMIUM"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// servePage serves the browser test's page and, on the same origin, every other path through
// a reverse proxy to the gRPC port at grpcAddr. The sw4rm server sends no CORS headers, so a
// page of another origin could not call it; the proxy makes the API the page's own origin,
// as a deployment's web server in front of both would.
func servePage(t *testing.T, grpcAddr string) *httptest.Server {
	t.Helper()
	index, err := os.ReadFile(filepath.Join(browserDir, "index.html"))
	require.NoError(t, err)
	bundle, err := os.ReadFile(filepath.Join(browserDir, "dist", "app.js"))
	require.NoError(t, err)
	api := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: grpcAddr})
	// A server stream's items must reach the page as they come, not when a buffer fills.
	api.FlushInterval = -1
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(index)
	})
	mux.HandleFunc("GET /app.js", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		_, _ = w.Write(bundle)
	})
	mux.Handle("/", api)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// newBrowser starts headless Chromium with a fresh profile and returns its context; tabs are
// chromedp.NewContext of it. The flags keep it from reaching for the network (QUIC, component
// updates, sync, background fetches), which on a closed network makes it hang.
func newBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	// chromedp's defaults are Puppeteer's: headless, no first run, no background networking,
	// no sync, and no throttling of the timers of a tab in the background.
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // the tests may run as root, where Chromium's sandbox refuses to start
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1000, 700),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	// chromedp reports protocol events it cannot decode through these; they are noise unless
	// something is being debugged, and must not reach t.Logf after the test ended.
	logf := func(string, ...any) {}
	if os.Getenv("SW4RM_TEST_LOG") == "1" {
		logf = log.Printf
	}
	browser, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithLogf(logf), chromedp.WithErrorf(logf))
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	// The context of the first call is the browser's lifetime (chromedp.NewContext), so it
	// has no timeout of its own; go test's bounds a browser that never starts.
	require.NoError(t, chromedp.Do(browser), "start %s", path)
	return browser
}

// browserArtifacts is where the browser test saves its screenshots: $SW4RM_TEST_ARTIFACTS
// when set (kept), else the test's temporary directory (removed when it ends).
func browserArtifacts(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("SW4RM_TEST_ARTIFACTS"); dir != "" {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		return dir
	}
	return t.TempDir()
}

// pageState is what waitPage reads of the page on each poll.
type pageState struct {
	Status string `json:"status"`
	OK     bool   `json:"ok"`
}

// waitPage polls the page until the JavaScript expression cond is true, and fails at once
// when the page reports an error in #status (a call refused, the stream ended).
func waitPage(t *testing.T, tab context.Context, what, cond string) {
	t.Helper()
	expr := `({status: document.getElementById("status").textContent, ok: !!(` + cond + `)})`
	deadline := time.Now().Add(30 * time.Second)
	var st pageState
	for time.Now().Before(deadline) {
		var err error
		st, err = chromedp.Run(tab, chromedp.Evaluate[pageState](expr))
		require.NoError(t, err)
		require.False(t, strings.HasPrefix(st.Status, "error"), "page, waiting for %s: %s", what, st.Status)
		if st.OK {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("page: %s did not happen within 30s; status %q", what, st.Status)
}

// TestBrowserAgentOverConnect: a web page in headless Chromium is a SW4RM agent over
// Connect, with the generated TypeScript of proto/ and @connectrpc/connect-web, in JSON and in
// binary. It registers, opens StreamIncoming (a server stream over fetch, through HTTP/1.1
// and a same-origin proxy), skips the keep-alive items the server sends into its silence,
// receives a message a Go SDK agent sends it over native gRPC, shows it in the DOM and
// confirms it with AckDelivery. The server recorded that confirmation: the same seq
// confirmed again is not recorded. On both stores; a screenshot of each page is saved
// (browserArtifacts).
func TestBrowserAgentOverConnect(t *testing.T) {
	path := chromium(t)
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := newConfig(t, kind)
			// Short, so that the page sees keep-alives before its message arrives.
			cfg.StreamKeepAlive = 300 * time.Millisecond
			sys := start(t, cfg)
			page := servePage(t, sys.app.GRPCAddr())
			browser := newBrowser(t, path)
			artifacts := browserArtifacts(t)
			sender := dialAgent(t, sys, "sender")
			for _, format := range []string{"json", "binary"} {
				t.Run(format, func(t *testing.T) {
					tab, cancel := chromedp.NewContext(browser)
					defer cancel()
					require.NoError(t, chromedp.Do(tab), "open a tab") // its lifetime: no timeout (newBrowser)
					tab, cancelTimeout := context.WithTimeout(tab, 90*time.Second)
					defer cancelTimeout()
					defer func() {
						// Saved whatever the outcome: on a failure it shows how far the page got.
						png, err := chromedp.Run(tab, chromedp.FullScreenshot(100) /* 100: PNG; less is JPEG */)
						if err != nil {
							t.Logf("no screenshot: %v", err)
							return
						}
						file := filepath.Join(artifacts, fmt.Sprintf("browser-%s-%s.png", kind, format))
						if err := os.WriteFile(file, png, 0o644); err != nil {
							t.Logf("no screenshot: %v", err)
							return
						}
						t.Logf("screenshot: %s", file)
					}()

					agent := uniq(t, "page")
					require.NoError(t, chromedp.Do(tab, chromedp.Navigate(page.URL+"/?"+url.Values{"agent": {agent}, "format": {format}}.Encode())))
					waitPage(t, tab, "the stream's first keep-alive",
						`document.getElementById("status").textContent === "streaming" && Number(document.getElementById("keepalives").textContent) > 0`)
					// Opening the stream made the agent ready (§8.3): the page is an agent like any other.
					waitState(t, sys, agent, commonpb.AgentState_RUNNABLE)

					payload := fmt.Sprintf(`{"text":"héllo from Go ✓","format":%q}`, format)
					sent, err := sender.Send(context.Background(), sdk.Message{To: agent, Payload: []byte(payload)})
					require.NoError(t, err)
					sel := fmt.Sprintf(`li[data-message-id=%q]`, sent.GetMessageId())
					waitPage(t, tab, "the message in the DOM, confirmed", `document.querySelector(`+strconv.Quote(sel)+`)?.dataset.recorded`)

					// The element as the page left it: its text and data attributes.
					type shown struct {
						Text     string `json:"text"`
						Seq      string `json:"seq"`
						Type     string `json:"type"`
						Producer string `json:"producer"`
						Recorded string `json:"recorded"`
					}
					li, err := chromedp.Run(tab, chromedp.Evaluate[shown](`(() => { const e = document.querySelector(`+strconv.Quote(sel)+
						`); return {text: e.textContent, seq: e.dataset.seq, type: e.dataset.type, producer: e.dataset.producer, recorded: e.dataset.recorded}; })()`))
					require.NoError(t, err)
					assert.Equal(t, payload, li.Text, "the page shows the payload as sent, UTF-8 intact")
					assert.Equal(t, "DATA", li.Type)
					assert.Equal(t, sender.ID(), li.Producer)
					assert.Equal(t, "true", li.Recorded, "the page's AckDelivery was recorded")
					keepalivesShown, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll('li[data-seq="0"]').length`))
					require.NoError(t, err)
					assert.Zero(t, keepalivesShown, "no keep-alive item is shown as a message")

					// The confirmation reached the store: confirming the same seq again records nothing.
					n, err := strconv.ParseInt(li.Seq, 10, 64)
					require.NoError(t, err)
					again, err := routerpb.NewRouterServiceClient(sender.Conn()).AckDelivery(context.Background(),
						&routerpb.DeliveryAckRequest{AgentId: agent, Seq: n, MessageId: sent.GetMessageId()})
					require.NoError(t, err)
					assert.False(t, again.GetRecorded(), "seq %d was already confirmed by the page", n)
				})
			}
		})
	}
}
