package worker

import (
	"context"
	"errors"
	"log/slog"

	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
)

// NewLogger returns the Temporal SDK's logger over log: the SDK's own slog adapter, except
// that an activity's expected outcome is not logged as an error. The SDK logs "Activity
// error." at ERROR for every failed attempt, but a non-retryable application error is how an
// activity reports a protocol outcome — TOOL_FAILED from a tool that fails, worktree_locked
// from a refused bind, no_route for an agent that is gone — which the workflow handles and
// the audit log records; so are cancellations the workflow asked for. Those are logged at
// INFO; an internal_error, a retryable error (each attempt of which is a real failure) and
// anything else stay at ERROR.
func NewLogger(log *slog.Logger) tlog.Logger {
	// One more frame, this adapter's, lies between the caller and the slog record.
	return &sdkLogger{inner: tlog.Skip(tlog.NewStructuredLogger(log), 1)}
}

// activityErrorMsg is the message the SDK logs a failed activity attempt with, and errorKey
// the key of its error (go.temporal.io/sdk/internal: internal_task_handlers.go, tagError).
const (
	activityErrorMsg = "Activity error."
	errorKey         = "Error"
)

// sdkLogger is NewLogger's logger.
type sdkLogger struct{ inner tlog.Logger }

// Debug logs at DEBUG.
func (l *sdkLogger) Debug(msg string, keyvals ...any) { l.inner.Debug(msg, keyvals...) }

// Info logs at INFO.
func (l *sdkLogger) Info(msg string, keyvals ...any) { l.inner.Info(msg, keyvals...) }

// Warn logs at WARN.
func (l *sdkLogger) Warn(msg string, keyvals ...any) { l.inner.Warn(msg, keyvals...) }

// Error logs at ERROR, or at INFO when it is the SDK's report of an activity's expected
// outcome.
func (l *sdkLogger) Error(msg string, keyvals ...any) {
	if msg == activityErrorMsg && ExpectedOutcome(errorOf(keyvals)) {
		l.inner.Info(msg, keyvals...)
		return
	}
	l.inner.Error(msg, keyvals...)
}

// With returns the logger with keyvals on every record.
func (l *sdkLogger) With(keyvals ...any) tlog.Logger {
	return &sdkLogger{inner: tlog.With(l.inner, keyvals...)}
}

// WithCallerSkip returns the logger reporting a caller depth frames further up.
func (l *sdkLogger) WithCallerSkip(depth int) tlog.Logger {
	return &sdkLogger{inner: tlog.Skip(l.inner, depth)}
}

// errorOf returns the error among the SDK's key-value pairs, or nil.
func errorOf(keyvals []any) error {
	for i := 0; i+1 < len(keyvals); i += 2 {
		if k, ok := keyvals[i].(string); ok && k == errorKey {
			err, _ := keyvals[i+1].(error)
			return err
		}
	}
	return nil
}

// ExpectedOutcome reports whether an activity's error is one of its expected outcomes rather
// than a failure: a non-retryable application error whose type is not internal_error (the
// protocol outcomes the activities report, e.g. tool_failed, worktree_locked, no_route), or a
// cancellation.
func ExpectedOutcome(err error) bool {
	if err == nil {
		return false
	}
	if temporal.IsCanceledError(err) || errors.Is(err, context.Canceled) {
		return true
	}
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.NonRetryable() && app.Type() != "internal_error"
}
