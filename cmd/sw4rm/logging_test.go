package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/app"
	"github.com/sw4rm/sw4rm-temporal/audit"
)

// init points the audit log of every `sw4rm dev` the tests run at os.DevNull, so that none
// writes app.DevAuditLog into this directory; the tests of the default unset it.
func init() { _ = os.Setenv("SW4RM_AUDIT_LOG", os.DevNull) }

// logOf runs the sw4rm command line with args up to the start of its roles, where a stand-in
// logs what a process does — a process line and an audited event, through the audit sink over
// app.EventLogger as app.Start wires it — and returns the configuration and the terminal's text.
func logOf(t *testing.T, args ...string) (app.Config, string) {
	t.Helper()
	errStarted := errors.New("started")
	var cfg app.Config
	root := newRootWith(func(ctx context.Context, c app.Config, _ app.Roles, log *slog.Logger) (*app.App, error) {
		cfg = c
		log.Info("sw4rm starting")
		audit.New(app.EventLogger(log), nil).Record(ctx, audit.Event{Type: "agent.registered", AgentID: "coder-1"})
		return nil, errStarted
	})
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	require.ErrorIs(t, root.Execute(), errStarted)
	return cfg, out.String()
}

// TestDevIsQuietByDefault: `sw4rm dev` keeps the event stream off the terminal — an audited
// event reaches .tmp/sw4rm-audit.log under the working directory, not the terminal, which
// shows the process's lines and says where the stream went; --verbose or SW4RM_VERBOSE puts
// it on the terminal too; SW4RM_AUDIT_LOG names another file, or none (the stream on the
// terminal). `sw4rm server` and `sw4rm worker` write no file by default: everything on stderr.
func TestDevIsQuietByDefault(t *testing.T) {
	t.Chdir(t.TempDir())
	unsetenv(t, "SW4RM_AUDIT_LOG")
	unsetenv(t, "SW4RM_VERBOSE")
	t.Setenv("SW4RM_DATABASE_URL", "")
	fileText := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return string(b)
	}

	cfg, term := logOf(t, "dev")
	assert.Equal(t, app.DevAuditLog, cfg.AuditLog)
	assert.Contains(t, term, "msg=\"sw4rm starting\"")
	assert.Contains(t, term, "file="+app.DevAuditLog)
	assert.NotContains(t, term, "agent.registered", "the audit stream stays off the terminal")
	file := fileText(app.DevAuditLog)
	assert.Contains(t, file, "msg=agent.registered")
	assert.Contains(t, file, "agent_id=coder-1")
	assert.Contains(t, file, "msg=\"sw4rm starting\"")

	_, term = logOf(t, "dev", "--verbose")
	assert.Contains(t, term, "msg=agent.registered")
	assert.NotContains(t, term, "file="+app.DevAuditLog, "nothing to point at")
	t.Setenv("SW4RM_VERBOSE", "1")
	_, term = logOf(t, "dev")
	assert.Contains(t, term, "msg=agent.registered")
	unsetenv(t, "SW4RM_VERBOSE")

	t.Setenv("SW4RM_AUDIT_LOG", "elsewhere/audit.log")
	cfg, term = logOf(t, "dev")
	assert.Equal(t, "elsewhere/audit.log", cfg.AuditLog)
	assert.NotContains(t, term, "agent.registered")
	assert.Contains(t, fileText("elsewhere/audit.log"), "msg=agent.registered")
	cfg, term = logOf(t, "dev", "--audit-log", "")
	assert.Empty(t, cfg.AuditLog, "the flag wins over the variable")
	assert.Contains(t, term, "msg=agent.registered", "no file: the stream is on the terminal")
	t.Setenv("SW4RM_AUDIT_LOG", "")
	_, term = logOf(t, "dev")
	assert.Contains(t, term, "msg=agent.registered", "set to empty on purpose: no file")

	unsetenv(t, "SW4RM_AUDIT_LOG")
	t.Setenv("SW4RM_DATABASE_URL", "postgres://db/sw4rm")
	for _, role := range []string{"server", "worker"} {
		cfg, term = logOf(t, role)
		assert.Empty(t, cfg.AuditLog, role)
		assert.Contains(t, term, "msg=agent.registered", role)
	}
}
