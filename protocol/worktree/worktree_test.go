package worktree_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
)

// allowed is §16.2's table written out independently of the package's own table, so a row
// dropped or added there fails here.
var allowed = map[worktree.State]map[worktree.Event]worktree.State{
	worktree.StateUnbound: {
		worktree.EventBindOK:     worktree.StateBoundHome,
		worktree.EventBindFailed: worktree.StateBindFailed,
	},
	worktree.StateBindFailed: {
		worktree.EventRetryReset: worktree.StateUnbound,
		worktree.EventUnbind:     worktree.StateUnbound,
		worktree.EventBindOK:     worktree.StateBoundHome,
	},
	worktree.StateBoundHome: {
		worktree.EventSwitchRequest: worktree.StateSwitchPending,
		worktree.EventUnbind:        worktree.StateUnbound,
	},
	worktree.StateSwitchPending: {
		worktree.EventSwitchApprove: worktree.StateBoundNonHome,
		worktree.EventSwitchReject:  worktree.StateBoundHome,
	},
	worktree.StateBoundNonHome: {
		worktree.EventTTLExpired:   worktree.StateBoundHome,
		worktree.EventSwitchRevoke: worktree.StateBoundHome,
		worktree.EventUnbind:       worktree.StateUnbound,
	},
}

func TestStatesAndEvents(t *testing.T) {
	assert.Equal(t, []worktree.State{"UNBOUND", "BOUND_HOME", "SWITCH_PENDING", "BOUND_NON_HOME", "BIND_FAILED"}, worktree.States())
	assert.Equal(t, []worktree.Event{"bind_ok", "bind_failed", "retry_reset", "unbind", "switch_request", "switch_approve", "switch_reject", "ttl_expired", "switch_revoke"}, worktree.Events())
	for _, s := range worktree.States() {
		got, err := worktree.ParseState(string(s))
		require.NoError(t, err)
		assert.Equal(t, s, got)
	}
	for _, bad := range []string{"", "unbound", "BOUND", "BIND_FAILED "} {
		_, err := worktree.ParseState(bad)
		assert.ErrorContains(t, err, "is not a binding state", bad)
	}
}

// TestTransitionTable tries every (state, event) pair: the twelve of §16.2 succeed with the
// table's target, and every one of the other 33 is refused with an error naming both.
func TestTransitionTable(t *testing.T) {
	var ok, refused int
	for _, from := range worktree.States() {
		for _, ev := range worktree.Events() {
			t.Run(fmt.Sprintf("%s+%s", from, ev), func(t *testing.T) {
				got, err := worktree.Transition(from, ev)
				if want, listed := allowed[from][ev]; listed {
					ok++
					require.NoError(t, err)
					assert.Equal(t, want, got)
					return
				}
				refused++
				require.Error(t, err)
				assert.Empty(t, got)
				assert.True(t, errors.Is(err, worktree.ErrTransition))
				var te *worktree.TransitionError
				require.ErrorAs(t, err, &te)
				assert.Equal(t, from, te.From)
				assert.Equal(t, ev, te.Event)
				assert.Equal(t, fmt.Sprintf("worktree: %s is not allowed in state %s (§16.2)", ev, from), err.Error())
			})
		}
	}
	assert.Equal(t, 12, ok, "§16.2 lists twelve (state, trigger) pairs")
	assert.Equal(t, 5*9-12, refused)
}

func TestRulesMatchTheTable(t *testing.T) {
	rules := worktree.Rules()
	require.Len(t, rules, 12)
	seen := map[[2]string]bool{}
	for _, r := range rules {
		key := [2]string{string(r.From), string(r.Event)}
		assert.False(t, seen[key], "duplicate rule %v", key)
		seen[key] = true
		assert.Equal(t, allowed[r.From][r.Event], r.To, "%s+%s", r.From, r.Event)
		assert.NotEmpty(t, r.Trigger)
	}
	// The §16.1 chain UNBOUND -> BOUND_HOME -> SWITCH_PENDING -> BOUND_NON_HOME and back home.
	s := worktree.StateUnbound
	for _, ev := range []worktree.Event{worktree.EventBindOK, worktree.EventSwitchRequest, worktree.EventSwitchApprove, worktree.EventTTLExpired} {
		var err error
		s, err = worktree.Transition(s, ev)
		require.NoError(t, err)
	}
	assert.Equal(t, worktree.StateBoundHome, s)
}

func TestTransitionRefusesUnknowns(t *testing.T) {
	_, err := worktree.Transition("LIMBO", worktree.EventBindOK)
	assert.EqualError(t, err, `worktree: "LIMBO" is not a binding state (§16.1); event "bind_ok" refused`)
	_, err = worktree.Transition(worktree.StateUnbound, "bind")
	assert.EqualError(t, err, `worktree: "bind" is not a binding event (§16.2); refused in state UNBOUND`)
	_, err = worktree.Transition("", "")
	assert.ErrorIs(t, err, worktree.ErrTransition)
}

func TestAllowed(t *testing.T) {
	assert.Equal(t, []worktree.Event{worktree.EventBindOK, worktree.EventBindFailed}, worktree.Allowed(worktree.StateUnbound))
	assert.Equal(t, []worktree.Event{worktree.EventRetryReset, worktree.EventUnbind, worktree.EventBindOK}, worktree.Allowed(worktree.StateBindFailed))
	assert.Equal(t, []worktree.Event{worktree.EventSwitchApprove, worktree.EventSwitchReject}, worktree.Allowed(worktree.StateSwitchPending))
	assert.Empty(t, worktree.Allowed("LIMBO"))
}

func TestEligible(t *testing.T) {
	want := map[worktree.State]bool{
		worktree.StateUnbound:       false,
		worktree.StateBindFailed:    false,
		worktree.StateBoundHome:     true,
		worktree.StateSwitchPending: true,
		worktree.StateBoundNonHome:  true,
	}
	for _, s := range worktree.States() {
		assert.Equal(t, want[s], worktree.Eligible(s), s)
		assert.Equal(t, want[s], worktree.Bound(s), s)
	}
	assert.False(t, worktree.Eligible(""))
	assert.False(t, worktree.Eligible("LIMBO"))
}
