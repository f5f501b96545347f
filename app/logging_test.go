package app

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/audit"
)

// logged writes what a process logs — a process line, an audited event at INFO and one at
// WARN, both through the audit sink over EventLogger as Start wires it — and returns the
// terminal's text and the audit log file's ("" when there is none).
func logged(t *testing.T, cfg Config) (terminal, file string) {
	t.Helper()
	var term bytes.Buffer
	log, closeLog, err := NewLogger(cfg, &term)
	require.NoError(t, err)
	log.Info("sw4rm starting")
	sink := audit.New(EventLogger(log), nil)
	sink.Record(context.Background(), audit.Event{Type: "task.state", AgentID: "coder-1"})
	sink.Record(context.Background(), audit.Event{Type: "router.dead_lettered", Level: slog.LevelWarn})
	require.NoError(t, closeLog())
	if cfg.AuditLog != "" {
		b, err := os.ReadFile(cfg.AuditLog)
		require.NoError(t, err)
		file = string(b)
	}
	return term.String(), file
}

// TestAuditLogKeepsTheTerminalQuiet: with an audit log file the terminal shows the process's
// lines and the event stream's warnings, not its INFO chatter; the file has everything; the
// file's directory is made and a second process appends to it.
func TestAuditLogKeepsTheTerminalQuiet(t *testing.T) {
	cfg := DefaultConfig()
	cfg.AuditLog = filepath.Join(t.TempDir(), "logs", "audit.log")
	term, file := logged(t, cfg)
	assert.Contains(t, term, "msg=\"sw4rm starting\"")
	assert.Contains(t, term, "msg=router.dead_lettered")
	assert.NotContains(t, term, "task.state")
	assert.Contains(t, file, "msg=\"sw4rm starting\"")
	assert.Contains(t, file, "msg=task.state")
	assert.Contains(t, file, "agent_id=coder-1")
	assert.Contains(t, file, "msg=router.dead_lettered")

	_, again := logged(t, cfg)
	assert.Equal(t, 2, bytes.Count([]byte(again), []byte("msg=task.state")), "appended, not truncated")
	info, err := os.Stat(cfg.AuditLog)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
}

// TestVerboseAndNoFileShowTheStream: --verbose puts the whole event stream on the terminal
// too; with no audit log file (a server's or worker's default) the whole stream goes to the
// terminal, since it must go somewhere.
func TestVerboseAndNoFileShowTheStream(t *testing.T) {
	cfg := DefaultConfig()
	cfg.AuditLog = filepath.Join(t.TempDir(), "audit.log")
	cfg.Verbose = true
	term, file := logged(t, cfg)
	assert.Contains(t, term, "msg=task.state")
	assert.Contains(t, file, "msg=task.state")

	term, _ = logged(t, DefaultConfig())
	assert.Contains(t, term, "msg=\"sw4rm starting\"")
	assert.Contains(t, term, "msg=task.state")
	assert.Contains(t, term, "msg=router.dead_lettered")
}

// TestLogLevelAppliesToBothWriters: SW4RM_LOG_LEVEL=warn drops INFO from the file too.
func TestLogLevelAppliesToBothWriters(t *testing.T) {
	cfg := DefaultConfig()
	cfg.AuditLog = filepath.Join(t.TempDir(), "audit.log")
	cfg.LogLevel = slog.LevelWarn
	term, file := logged(t, cfg)
	assert.NotContains(t, term, "sw4rm starting")
	assert.NotContains(t, file, "task.state")
	assert.Contains(t, file, "msg=router.dead_lettered")
}

// TestAuditLogThatCannotBeOpened names the setting.
func TestAuditLogThatCannotBeOpened(t *testing.T) {
	cfg := DefaultConfig()
	cfg.AuditLog = t.TempDir() // a directory
	_, _, err := NewLogger(cfg, &bytes.Buffer{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "SW4RM_AUDIT_LOG (--audit-log)")
}

// TestEventLoggerOverAnyOtherLogger is that logger itself: an embedding's or a test's logger
// gets everything, as before.
func TestEventLoggerOverAnyOtherLogger(t *testing.T) {
	log := slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
	assert.Same(t, log, EventLogger(log))
}
