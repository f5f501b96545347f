package worktree_test

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
)

func TestReasons(t *testing.T) {
	assert.Equal(t, []worktree.Reason{"worktree_not_found", "permission_denied", "filesystem_error", "worktree_locked"}, worktree.Reasons())
	for _, r := range worktree.Reasons() {
		got, err := worktree.ParseReason(string(r))
		require.NoError(t, err)
		assert.Equal(t, r, got)
	}
	_, err := worktree.ParseReason("disk_on_fire")
	assert.ErrorContains(t, err, `"disk_on_fire" is not a bind failure reason`)
}

func TestReasonOf(t *testing.T) {
	be := worktree.BindErrorf(worktree.ReasonWorktreeLocked, "worktree %s is locked by %s", "w1", "agent-2")
	assert.EqualError(t, be, "worktree_locked: worktree w1 is locked by agent-2")
	assert.Equal(t, worktree.ReasonWorktreeLocked, worktree.ReasonOf(fmt.Errorf("bind: %w", be)))
	assert.Equal(t, worktree.ReasonFilesystemError, worktree.ReasonOf(errors.New("disk full")))
	assert.Equal(t, worktree.ReasonFilesystemError, worktree.ReasonOf(&worktree.BindError{Reason: "bogus"}))
}

func TestBindRetry(t *testing.T) {
	assert.Equal(t, 60*time.Second, worktree.BindRecoveryTimeout)
	assert.Equal(t, 3, worktree.BindRetry.MaxRetries)
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, worktree.BindRetry.Delays())
	var total time.Duration
	for _, d := range worktree.BindRetry.Delays() {
		total += d
	}
	assert.Less(t, total, worktree.BindRecoveryTimeout, "the retries end before operators are notified")
	for _, retry := range []int{0, -1, 4, 100} {
		d, ok := worktree.BindRetry.Delay(retry)
		assert.False(t, ok, "retry %d", retry)
		assert.Zero(t, d)
	}
}

func TestRetryPolicyDelay(t *testing.T) {
	cases := []struct {
		name string
		p    worktree.RetryPolicy
		want []time.Duration
	}{
		{"capped", worktree.RetryPolicy{MaxRetries: 5, InitialInterval: time.Second, BackoffCoefficient: 3, MaximumInterval: 10 * time.Second},
			[]time.Duration{time.Second, 3 * time.Second, 9 * time.Second, 10 * time.Second, 10 * time.Second}},
		{"coefficient below 1 never shrinks", worktree.RetryPolicy{MaxRetries: 3, InitialInterval: time.Second, BackoffCoefficient: 0.5},
			[]time.Duration{time.Second, time.Second, time.Second}},
		{"initial above the cap", worktree.RetryPolicy{MaxRetries: 2, InitialInterval: time.Minute, BackoffCoefficient: 2, MaximumInterval: time.Second},
			[]time.Duration{time.Second, time.Second}},
		{"no retries", worktree.RetryPolicy{}, []time.Duration{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, c.p.Delays())
		})
	}
	// Without a cap a huge retry count saturates instead of overflowing.
	p := worktree.RetryPolicy{MaxRetries: 1000, InitialInterval: time.Second, BackoffCoefficient: 10}
	d, ok := p.Delay(1000)
	assert.True(t, ok)
	assert.Equal(t, time.Duration(math.MaxInt64), d)
}
