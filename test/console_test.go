package test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/app"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/console"
)

// consoleSystem starts sw4rm on the given store in mode with the test operator
// (authOperator, authOperatorToken) and returns it with the console's base URL
// (http://host:port/console/).
func consoleSystem(t *testing.T, kind string, mode auth.Mode, edit ...func(*app.Config)) (*system, string) {
	t.Helper()
	cfg := authConfig(t, kind, mode)
	cfg.TemporalUI = "http://temporal-ui.invalid"
	for _, e := range edit {
		e(&cfg)
	}
	sys := start(t, cfg)
	return sys, "http://" + sys.app.HTTPAddr() + console.Prefix
}

// consoleClient is an HTTP client with a cookie jar that does not follow redirects, so a test
// sees where the console sends it.
func consoleClient(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// consoleSignIn signs c in to the console at base with token, as the sign-in form does, and
// returns the answer.
func consoleSignIn(t *testing.T, c *http.Client, base, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"login", strings.NewReader(url.Values{"token": {token}, "next": {console.Prefix + "inbox"}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", strings.TrimSuffix(base, console.Prefix))
	resp, err := c.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// consoleGet fetches a console path with c and returns the status and body.
func consoleGet(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// consoleTab opens the console at base in a new headless Chromium, signs in through the form
// with the test operator's token, and returns the tab, on the inbox.
func consoleTab(t *testing.T, base string) context.Context {
	t.Helper()
	tab, cancel := chromedp.NewContext(newBrowser(t, chromium(t)))
	t.Cleanup(cancel)
	ctx, stop := context.WithTimeout(tab, 60*time.Second)
	defer stop()
	require.NoError(t, chromedp.Do(tab), "open a tab") // its lifetime: no timeout (newBrowser)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), authOperatorToken),
		chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(chromedp.CSS(`nav[aria-label="Console"]`)),
	))
	return tab
}

// consoleScreenshot writes the tab's page as a PNG test artifact named name.
func consoleScreenshot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	ctx, stop := context.WithTimeout(tab, 20*time.Second)
	defer stop()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	require.NoError(t, err)
	path := filepath.Join(browserArtifacts(t), "console-"+name+".png")
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s", path)
}

// TestConsoleSignIn: the console needs a session: a page without one goes to the sign-in
// page, a fragment, a form or the event stream without one is refused with 401; a token that
// is not an operator's is refused; the operator's signs in with a cookie that is HttpOnly and
// SameSite=Strict; a cross-origin POST is refused even with the session; every answer carries
// the strict Content-Security-Policy; signing out ends the session.
func TestConsoleSignIn(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			_, base := consoleSystem(t, kind, auth.Required)
			c := consoleClient(t)

			resp, err := c.Get(base + "inbox")
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
			assert.True(t, strings.HasPrefix(resp.Header.Get("Location"), console.Prefix+"login"), resp.Header.Get("Location"))
			csp := resp.Header.Get("Content-Security-Policy")
			assert.Contains(t, csp, "script-src 'self'")
			assert.Contains(t, csp, "frame-ancestors 'none'")
			assert.NotContains(t, csp, "unsafe-inline")

			req, err := http.NewRequest(http.MethodGet, base+"inbox", nil)
			require.NoError(t, err)
			req.Header.Set("HX-Request", "true")
			resp, err = c.Do(req)
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "an htmx request without a session")

			resp = consoleSignIn(t, c, base, "not-a-token")
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

			resp = consoleSignIn(t, c, base, authOperatorToken)
			require.Equal(t, http.StatusSeeOther, resp.StatusCode)
			var ck *http.Cookie
			for _, k := range resp.Cookies() {
				if k.Name == "sw4rm_console" {
					ck = k
				}
			}
			require.NotNil(t, ck, "a session cookie")
			assert.True(t, ck.HttpOnly)
			assert.Equal(t, http.SameSiteStrictMode, ck.SameSite)
			assert.False(t, ck.Secure, "no TLS here")
			assert.NotContains(t, ck.Value, authOperatorToken, "the token stays on the server")

			code, body := consoleGet(t, c, base+"inbox")
			assert.Equal(t, http.StatusOK, code)
			assert.Contains(t, body, "Signed in as <strong>"+authOperator+"</strong>")
			assert.NotContains(t, body, "Authentication is off")

			// A page of another site posting with the operator's cookie is refused.
			req, err = http.NewRequest(http.MethodPost, base+"logout", nil)
			require.NoError(t, err)
			req.Header.Set("Origin", "https://evil.example")
			req.Header.Set("Sec-Fetch-Site", "cross-site")
			resp, err = c.Do(req)
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, http.StatusForbidden, resp.StatusCode, "a cross-origin POST")
			code, _ = consoleGet(t, c, base+"inbox")
			assert.Equal(t, http.StatusOK, code, "the refused POST did not sign out")

			req, err = http.NewRequest(http.MethodPost, base+"logout", nil)
			require.NoError(t, err)
			req.Header.Set("Sec-Fetch-Site", "same-origin")
			resp, err = c.Do(req)
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
			resp, err = c.Get(base + "inbox")
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, http.StatusSeeOther, resp.StatusCode, "signed out")
		})
	}
}

// TestConsoleAuthOffBanner: with SW4RM_AUTH=off the console still needs an operator's
// sign-in, and says on every page that authentication is off.
func TestConsoleAuthOffBanner(t *testing.T) {
	_, base := consoleSystem(t, "memory", auth.Off)
	c := consoleClient(t)
	resp := consoleSignIn(t, c, base, authOperatorToken)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	code, body := consoleGet(t, c, base+"inbox")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "Authentication is off")
}

// TestConsoleSignInInBrowser: an operator signs in through the form in headless Chromium and
// lands on the inbox.
func TestConsoleSignInInBrowser(t *testing.T) {
	_, base := consoleSystem(t, "memory", auth.Required)
	tab := consoleTab(t, base)
	ctx, stop := context.WithTimeout(tab, 20*time.Second)
	defer stop()
	title, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`h1`)))
	require.NoError(t, err)
	assert.Equal(t, "Approvals", title)
	consoleScreenshot(t, tab, "signed-in")
}
