package test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/app"
	wtsdk "github.com/sw4rm/sw4rm-temporal/sdk/worktree"
)

// terminal is a writer the process logs to concurrently, read by the test.
type terminal struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *terminal) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *terminal) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// startLogged runs server and worker with cfg and the process's logger app.NewLogger makes
// over term, as `sw4rm dev` does, and stops them when the test ends.
func startLogged(t *testing.T, cfg app.Config, term *terminal) *system {
	t.Helper()
	log, closeLog, err := app.NewLogger(cfg, term)
	require.NoError(t, err)
	t.Cleanup(func() { _ = closeLog() }) // after Stop: cleanups run last-registered first
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := app.Start(ctx, cfg, app.Roles{Server: true, Worker: true}, log)
	require.NoError(t, err)
	t.Cleanup(a.Stop)
	return &system{app: a, cfg: cfg}
}

// linesWith returns the lines of text that contain every one of parts.
func linesWith(text string, parts ...string) []string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all && line != "" {
			out = append(out, line)
		}
	}
	return out
}

// TestTerminalIsQuietByDefault: a stack logging as `sw4rm dev` does by default — an audit
// log file, not verbose — keeps the event stream off the terminal: a bind's audited
// transitions (worktree.state) and the refused bind's "Activity error." are in the file, and
// the refusal, an expected outcome (worktree_locked), is logged at INFO, not ERROR; the
// terminal has the process's lines and no ERROR. With --verbose the stream is on the terminal
// too. The logging does not depend on the store, so the memory store alone runs it.
func TestTerminalIsQuietByDefault(t *testing.T) {
	repo := gitRepo(t)
	cfg := newConfig(t, "memory")
	cfg.Repos = "app=" + repo
	cfg.AuditLog = filepath.Join(t.TempDir(), "sw4rm-audit.log")
	var term terminal
	sys := startLogged(t, cfg, &term)
	ctx := context.Background()

	coder := dialBinder(t, sys, "coder")
	_, err := coder.wt.Bind(ctx, "app", "feature-1")
	require.NoError(t, err)
	other := dialBinder(t, sys, "other")
	_, err = other.wt.Bind(ctx, "app", "feature-1")
	var be *wtsdk.BindError
	require.ErrorAs(t, err, &be)
	require.Equal(t, "worktree_locked", be.Reason)
	require.NoError(t, wtsdk.NewOperator(coder.Conn()).Unbind(ctx, other.ID()))

	fileText := func() string {
		b, err := os.ReadFile(cfg.AuditLog)
		require.NoError(t, err)
		return string(b)
	}
	require.Eventually(t, func() bool {
		return len(linesWith(fileText(), `msg="Activity error."`, "worktree_locked")) > 0
	}, 15*time.Second, 50*time.Millisecond, "the refused bind's activity error reaches the audit log file")
	file := fileText()
	for _, line := range linesWith(file, `msg="Activity error."`, "worktree_locked") {
		assert.Contains(t, line, "level=INFO", "an expected outcome is not an error")
	}
	assert.NotEmpty(t, linesWith(file, "msg=worktree.state", coder.ID()), "the audit stream is in the file")
	assert.NotEmpty(t, linesWith(file, `msg="sw4rm starting"`), "and the process's own lines")

	shown := term.String()
	assert.NotEmpty(t, linesWith(shown, `msg="sw4rm starting"`), "the terminal has the process's lines")
	assert.Empty(t, linesWith(shown, "msg=worktree.state"), "the audit stream stays off the terminal")
	assert.Empty(t, linesWith(shown, `msg="Activity error."`), "so do the SDK's activity lines")
	assert.Empty(t, linesWith(shown, "level=ERROR"), "nothing went wrong")

	verbose := newConfig(t, "memory")
	verbose.Repos = "app=" + gitRepo(t)
	verbose.AuditLog = filepath.Join(t.TempDir(), "sw4rm-audit.log")
	verbose.Verbose = true
	var loud terminal
	vsys := startLogged(t, verbose, &loud)
	binder := dialBinder(t, vsys, "coder")
	_, err = binder.wt.Bind(ctx, "app", "feature-1")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return len(linesWith(loud.String(), "msg=worktree.state", binder.ID())) > 0
	}, 15*time.Second, 50*time.Millisecond, "--verbose: the audit stream is on the terminal too")
}
