package workflows_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
)

// updateOutcome is what the test environment's callbacks reported for one update: refused by
// its validator, accepted, and how it completed. Harnesses embed it beside the typed result.
type updateOutcome struct {
	rejected error
	accepted bool
	done     bool
	err      error
}

// outcome lets the require helpers take any harness's update result that embeds one.
func (u *updateOutcome) outcome() *updateOutcome { return u }

// callback records the update's progress in u and hands a completed update's value to
// onValue (nil to ignore it).
func (u *updateOutcome) callback(onValue func(v any)) *testsuite.TestUpdateCallback {
	return &testsuite.TestUpdateCallback{
		OnReject: func(err error) { u.rejected = err },
		OnAccept: func() { u.accepted = true },
		OnComplete: func(v any, err error) {
			u.done, u.err = true, err
			if onValue != nil {
				onValue(v)
			}
		},
	}
}

// requireAccepted fails unless the update passed its validator and completed without error.
func requireAccepted(t *testing.T, r interface{ outcome() *updateOutcome }) {
	t.Helper()
	u := r.outcome()
	require.NoError(t, u.rejected)
	require.True(t, u.accepted && u.done, "the update ran")
	require.NoError(t, u.err)
}

// requireRefused fails unless the update's validator refused it with msg in the error, so
// that nothing entered the history.
func requireRefused(t *testing.T, r interface{ outcome() *updateOutcome }, msg string) {
	t.Helper()
	u := r.outcome()
	require.Error(t, u.rejected, "the validator refuses it: nothing enters history")
	assert.False(t, u.accepted)
	assert.Contains(t, u.rejected.Error(), msg)
}

// recorder is an activity mock that appends each input to *into under mu and succeeds: how
// the harnesses watch what a workflow asked its activities to do.
func recorder[T any](mu *sync.Mutex, into *[]T) func(context.Context, T) error {
	return func(_ context.Context, in T) error {
		mu.Lock()
		defer mu.Unlock()
		*into = append(*into, in)
		return nil
	}
}
