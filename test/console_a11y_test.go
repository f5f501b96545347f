package test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/auth"
)

// axeViolation is one rule axe-core found broken on a page.
type axeViolation struct {
	ID     string `json:"id"`
	Impact string `json:"impact"`
	Help   string `json:"help"`
	Nodes  []struct {
		Target []string `json:"target"`
	} `json:"nodes"`
}

// consoleAxe runs axe-core (pinned in testdata/axe) on the tab's page and returns the
// violations of serious or critical impact. axe is evaluated through the DevTools protocol,
// which the page's Content-Security-Policy does not govern, so the page itself stays as
// strict as it is served.
func consoleAxe(t *testing.T, tab context.Context) []axeViolation {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", "axe", "axe-4.14.1.min.js"))
	require.NoError(t, err)
	ctx, stop := context.WithTimeout(tab, 30*time.Second)
	defer stop()
	_, err = chromedp.Run(ctx, chromedp.Evaluate[any](string(src)+";0"))
	require.NoError(t, err)
	all, err := chromedp.Run(ctx, chromedp.Evaluate[[]axeViolation](
		`axe.run(document, {resultTypes: ["violations"]}).then(r => r.violations)`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	var serious []axeViolation
	for _, v := range all {
		if v.Impact == "serious" || v.Impact == "critical" {
			serious = append(serious, v)
		}
	}
	return serious
}

// consolePages are the console's pages, by path under /console/.
var consolePages = []string{"inbox", "inbox?tab=all", "agents", "tasks", "dag", "dead-letters", "negotiations"}

// TestConsoleAccessibility: axe-core finds no serious or critical violation on the sign-in
// page or on any page of the console, as an operator sees them.
func TestConsoleAccessibility(t *testing.T) {
	_, base := consoleSystem(t, "memory", auth.Required)
	check := func(tab context.Context, what string) {
		for _, v := range consoleAxe(t, tab) {
			var where []string
			for _, n := range v.Nodes {
				where = append(where, strings.Join(n.Target, " "))
			}
			assert.Failf(t, "accessibility", "%s: %s (%s, %s) at %s", what, v.ID, v.Impact, v.Help, strings.Join(where, "; "))
		}
	}

	// The sign-in page, before signing in.
	tab, cancel := chromedp.NewContext(newBrowser(t, chromium(t)))
	defer cancel()
	require.NoError(t, chromedp.Do(tab))
	ctx, stop := context.WithTimeout(tab, 20*time.Second)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"login"), chromedp.WaitVisible(chromedp.CSS(`#token`))))
	stop()
	check(tab, "login")
	// The check can fail: an image without alternative text is a critical violation.
	_, err := chromedp.Run(tab, chromedp.Evaluate[any](`document.querySelector("main").insertAdjacentHTML("beforeend", "<img src='x.png'>"); 0`))
	require.NoError(t, err)
	assert.NotEmpty(t, consoleAxe(t, tab), "axe finds a control case's violation")

	tab = consoleTab(t, base)
	for _, p := range consolePages {
		ctx, stop := context.WithTimeout(tab, 20*time.Second)
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+p), chromedp.WaitVisible(chromedp.CSS(`main h1`))), p)
		stop()
		check(tab, p)
	}
}
