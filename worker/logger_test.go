package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
)

// records is a slog handler that keeps what it is given.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }

func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}

func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// levelOf returns the level of the one record with msg, failing unless there is exactly one.
func (r *records) levelOf(t *testing.T, msg string) slog.Level {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var found []slog.Level
	for _, rec := range r.recs {
		if rec.Message == msg {
			found = append(found, rec.Level)
		}
	}
	require.Len(t, found, 1, "records %q", msg)
	return found[0]
}

// TestLoggerLowersExpectedActivityOutcomes: run through the SDK's own activity task handler,
// a failing activity's "Activity error." is logged at INFO when the error is an expected
// outcome (a non-retryable application error such as tool_failed or worktree_locked, or a
// cancellation) and at ERROR when it is a failure (internal_error, a retryable application
// error, any other error). The test drives the SDK itself, so a change of its message or of
// its error's key shows here.
func TestLoggerLowersExpectedActivityOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want slog.Level
	}{
		{"tool_failed", temporal.NewNonRetryableApplicationError("the tool failed", "tool_failed", nil), slog.LevelInfo},
		{"worktree_locked", fmt.Errorf("bind: %w", temporal.NewNonRetryableApplicationError("locked by agent a", "worktree_locked", nil)), slog.LevelInfo},
		{"canceled", temporal.NewCanceledError("cancelled by the workflow"), slog.LevelInfo},
		{"internal_error", temporal.NewNonRetryableApplicationError("no Temporal client", "internal_error", nil), slog.LevelError},
		{"retryable", temporal.NewApplicationError("store unavailable", "unavailable"), slog.LevelError},
		{"plain", errors.New("boom"), slog.LevelError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &records{}
			var s testsuite.WorkflowTestSuite
			s.SetLogger(NewLogger(slog.New(rec)))
			env := s.NewTestActivityEnvironment()
			fail := func(context.Context) error { return tc.err }
			env.RegisterActivityWithOptions(fail, activity.RegisterOptions{Name: "Fail"})
			_, err := env.ExecuteActivity("Fail")
			require.Error(t, err)
			assert.Equal(t, tc.want, rec.levelOf(t, activityErrorMsg))
		})
	}
}

// TestLoggerKeepsOtherErrors: only the SDK's "Activity error." is lowered, also through a
// logger With more keys (as the SDK's worker makes); any other error line stays at ERROR
// whatever its error, and the other levels pass through.
func TestLoggerKeepsOtherErrors(t *testing.T) {
	expected := temporal.NewNonRetryableApplicationError("the tool failed", "tool_failed", nil)
	rec := &records{}
	l := NewLogger(slog.New(rec))
	l.Error("Workflow panic.", errorKey, expected)
	l.Warn("warned")
	l.Info("informed")
	l.Debug("debugged")
	assert.Equal(t, slog.LevelError, rec.levelOf(t, "Workflow panic."))
	assert.Equal(t, slog.LevelWarn, rec.levelOf(t, "warned"))
	assert.Equal(t, slog.LevelInfo, rec.levelOf(t, "informed"))
	assert.Equal(t, slog.LevelDebug, rec.levelOf(t, "debugged"))

	withRec := &records{}
	tlog.With(NewLogger(slog.New(withRec)), "Namespace", "default").Error(activityErrorMsg, "Attempt", 1, errorKey, expected)
	assert.Equal(t, slog.LevelInfo, withRec.levelOf(t, activityErrorMsg))
	failRec := &records{}
	tlog.With(NewLogger(slog.New(failRec)), "Namespace", "default").Error(activityErrorMsg, errorKey, errors.New("boom"))
	assert.Equal(t, slog.LevelError, failRec.levelOf(t, activityErrorMsg))
}
