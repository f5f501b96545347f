package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/sw4rm/sw4rm-temporal/telemetry"
)

// DevAuditLog is where `sw4rm dev` writes the event stream when SW4RM_AUDIT_LOG is not set:
// a file under the working directory's .tmp, next to the Temporal dev server's log that
// `make dev` keeps there.
const DevAuditLog = ".tmp/sw4rm-audit.log"

// NewLogger returns the process's logger and a function that closes its file. Its records
// are of two streams:
//
//   - the process's own lines (starting, listening, ready, shutting down, and every warning
//     and error): a few per start, for the terminal;
//   - the event stream (EventLogger): one audit line per state transition and decision (§19)
//     and the Temporal SDK's per-workflow and per-activity lines, hundreds per run.
//
// Both go to the file cfg.AuditLog names, when it names one (appended to; its directory is
// made). The terminal gets the process's lines, and of the event stream only its warnings
// and errors — unless cfg.Verbose is set, or no file is named: the stream must go somewhere,
// and a server or worker that names no file logs everything on stderr, as a cluster's log
// collector expects. Both writers log text at cfg.LogLevel.
func NewLogger(cfg Config, terminal io.Writer) (*slog.Logger, func() error, error) {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	// Both writers add trace_id and span_id to a record logged in a traced context.
	h := &splitHandler{terminal: telemetry.LogHandler(slog.NewTextHandler(terminal, opts)), verbose: cfg.Verbose}
	closeFile := func() error { return nil }
	if cfg.AuditLog != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.AuditLog), 0o755); err != nil {
			return nil, nil, settingError("SW4RM_AUDIT_LOG", err)
		}
		// 0600: audit details name principals and agents; the file is the operator's alone.
		f, err := os.OpenFile(cfg.AuditLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, nil, settingError("SW4RM_AUDIT_LOG", err)
		}
		h.file = telemetry.LogHandler(slog.NewTextHandler(f, opts))
		closeFile = f.Close
	}
	return slog.New(h), closeFile, nil
}

// EventLogger returns the logger of the event stream over log: the audit sink's and the
// Temporal SDK's records. Over a logger that NewLogger made, its records go to the audit log
// file, and to the terminal only when they are warnings or errors or the process is verbose;
// over any other logger (an embedding's, a test's) it is log itself.
func EventLogger(log *slog.Logger) *slog.Logger {
	h, ok := log.Handler().(*splitHandler)
	if !ok {
		return log
	}
	events := *h
	events.events = true
	return slog.New(&events)
}

// splitHandler writes a record to the file, when there is one, and to the terminal unless it
// is a quiet record of the event stream.
type splitHandler struct {
	terminal slog.Handler
	// file is the audit log's handler; nil when SW4RM_AUDIT_LOG names no file.
	file slog.Handler
	// events marks the event stream's handler (EventLogger).
	events bool
	// verbose shows the whole event stream on the terminal too (SW4RM_VERBOSE).
	verbose bool
}

// toTerminal reports whether a record at level goes to the terminal.
func (h *splitHandler) toTerminal(level slog.Level) bool {
	return !h.events || h.verbose || h.file == nil || level >= slog.LevelWarn
}

// Enabled reports whether any writer takes a record at level.
func (h *splitHandler) Enabled(ctx context.Context, level slog.Level) bool {
	if h.file != nil && h.file.Enabled(ctx, level) {
		return true
	}
	return h.toTerminal(level) && h.terminal.Enabled(ctx, level)
}

// Handle writes r to the file and, unless it is a quiet event, to the terminal.
func (h *splitHandler) Handle(ctx context.Context, r slog.Record) error {
	var errs []error
	if h.file != nil && h.file.Enabled(ctx, r.Level) {
		if err := h.file.Handle(ctx, r.Clone()); err != nil {
			errs = append(errs, fmt.Errorf("audit log file: %w", err))
		}
	}
	if h.toTerminal(r.Level) && h.terminal.Enabled(ctx, r.Level) {
		errs = append(errs, h.terminal.Handle(ctx, r))
	}
	return errors.Join(errs...)
}

// WithAttrs returns the handler with attrs on both writers.
func (h *splitHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.terminal = h.terminal.WithAttrs(attrs)
	if h.file != nil {
		c.file = h.file.WithAttrs(attrs)
	}
	return &c
}

// WithGroup returns the handler with the group opened on both writers.
func (h *splitHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.terminal = h.terminal.WithGroup(name)
	if h.file != nil {
		c.file = h.file.WithGroup(name)
	}
	return &c
}
