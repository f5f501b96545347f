// Package worktree holds the rules of repository and worktree binding (§16): the binding
// states of §16.1, exactly the transition table of §16.2, the handling of BIND_FAILED (§16.3:
// failure reasons, the retry policy, the bind recovery timeout, task eligibility) and the
// validation of the repo_id, worktree_id and branch names that become directory and git
// branch names. Like package protocol it does no I/O, reads no clock and draws no
// randomness, so workflow code may call it.
package worktree

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// State is a worktree binding state (§16.1). Its value is the spec's spelling, which is also
// what StatusResponse.state carries on the wire (worktree.proto declares no enum for it).
type State string

// The binding states of §16.1, spelled as the spec and the wire spell them.
const (
	// StateUnbound: the agent has no worktree binding; the initial state.
	StateUnbound State = "UNBOUND"
	// StateBoundHome: the agent is bound to its designated home worktree; the normal state.
	StateBoundHome State = "BOUND_HOME"
	// StateSwitchPending: the agent asked to switch to a non-home worktree and awaits
	// approval; it is still bound to its home worktree meanwhile.
	StateSwitchPending State = "SWITCH_PENDING"
	// StateBoundNonHome: the agent is bound to a non-home worktree for a limited time.
	StateBoundNonHome State = "BOUND_NON_HOME"
	// StateBindFailed: a bind could not be completed; a transient error state (§16.3).
	StateBindFailed State = "BIND_FAILED"
)

// states lists the states in the order of §16.1's table.
var states = []State{StateUnbound, StateBoundHome, StateSwitchPending, StateBoundNonHome, StateBindFailed}

// States returns every binding state in the order of §16.1's table.
func States() []State { return slices.Clone(states) }

// Valid reports whether s is one of the §16.1 states.
func (s State) Valid() bool { return slices.Contains(states, s) }

// String returns the spec's spelling of the state.
func (s State) String() string { return string(s) }

// ParseState reads a state in the spec's spelling (as StatusResponse.state carries it).
func ParseState(s string) (State, error) {
	if st := State(s); st.Valid() {
		return st, nil
	}
	return "", fmt.Errorf("worktree: %s is not a binding state; want one of %v (§16.1)", quote(s), states)
}

// Event is what moves a binding from one state to another: the triggers of §16.2's table.
type Event string

// The triggers of §16.2's table. The table names its triggers in prose; each becomes one
// event here, and where two rows share a trigger (a successful BIND from UNBOUND and a
// successful retry BIND from BIND_FAILED; UNBIND from any bound state) they share the event.
const (
	// EventBindOK: a BIND operation succeeded — the first bind, a retry after a failure, or
	// an operator's new BIND request from BIND_FAILED (§16.3 manual recovery).
	EventBindOK Event = "bind_ok"
	// EventBindFailed: a BIND operation failed (filesystem error, permission denied, worktree
	// not found, worktree locked; see Reason).
	EventBindFailed Event = "bind_failed"
	// EventRetryReset: the error state is cleared so that a bind may be tried afresh
	// ("Retry reset" in §16.2).
	EventRetryReset Event = "retry_reset"
	// EventUnbind: an explicit UNBIND.
	EventUnbind Event = "unbind"
	// EventSwitchRequest: SWITCH_REQUEST, asking for a non-home worktree.
	EventSwitchRequest Event = "switch_request"
	// EventSwitchApprove: SWITCH_APPROVE, from policy or an operator (HITL).
	EventSwitchApprove Event = "switch_approve"
	// EventSwitchReject: SWITCH_REJECT; the agent stays home.
	EventSwitchReject Event = "switch_reject"
	// EventTTLExpired: the time limit of a non-home binding ran out.
	EventTTLExpired Event = "ttl_expired"
	// EventSwitchRevoke: SWITCH_REVOKE, ending a non-home binding before its TTL.
	EventSwitchRevoke Event = "switch_revoke"
)

// events lists the events in the order their first row appears in §16.2's table.
var events = []Event{
	EventBindOK, EventBindFailed, EventRetryReset, EventUnbind, EventSwitchRequest,
	EventSwitchApprove, EventSwitchReject, EventTTLExpired, EventSwitchRevoke,
}

// Events returns every event, in the order their first row appears in §16.2's table.
func Events() []Event { return slices.Clone(events) }

// Valid reports whether e is one of the §16.2 triggers.
func (e Event) Valid() bool { return slices.Contains(events, e) }

// String returns the event's name.
func (e Event) String() string { return string(e) }

// Rule is one row of §16.2's transition table.
type Rule struct {
	// From is the state the rule applies in.
	From State
	// Event is its trigger.
	Event Event
	// To is the state the binding moves to.
	To State
	// Trigger is the table's wording of the trigger.
	Trigger string
}

// rules is §16.2's table, row by row in the table's order; the row "Retry reset or explicit
// UNBIND" is two rules, one per trigger. Nothing else is a transition: in particular a
// failed retry from BIND_FAILED is no transition (the binding stays BIND_FAILED and the
// caller records the new reason), an UNBIND while a switch is pending is refused (reject the
// switch first), and a BIND or UNBIND that finds the binding already where it would lead is
// the caller's to answer idempotently without calling Transition.
var rules = []Rule{
	{StateUnbound, EventBindOK, StateBoundHome, "Successful BIND operation"},
	{StateUnbound, EventBindFailed, StateBindFailed, "BIND operation error"},
	{StateBindFailed, EventRetryReset, StateUnbound, "Retry reset"},
	{StateBindFailed, EventUnbind, StateUnbound, "explicit UNBIND"},
	{StateBindFailed, EventBindOK, StateBoundHome, "Successful retry BIND"},
	{StateBoundHome, EventSwitchRequest, StateSwitchPending, "SWITCH_REQUEST issued"},
	{StateSwitchPending, EventSwitchApprove, StateBoundNonHome, "SWITCH_APPROVE received"},
	{StateSwitchPending, EventSwitchReject, StateBoundHome, "SWITCH_REJECT received"},
	{StateBoundNonHome, EventTTLExpired, StateBoundHome, "TTL expired"},
	{StateBoundNonHome, EventSwitchRevoke, StateBoundHome, "SWITCH_REVOKE"},
	{StateBoundHome, EventUnbind, StateUnbound, "UNBIND operation"},
	{StateBoundNonHome, EventUnbind, StateUnbound, "UNBIND operation"},
}

// Rules returns §16.2's transition table, one Rule per (state, trigger), in the table's
// order.
func Rules() []Rule { return slices.Clone(rules) }

// ErrTransition is what every refused transition wraps, for errors.Is.
var ErrTransition = errors.New("transition not allowed")

// TransitionError is the refusal of an event the binding's state does not accept.
type TransitionError struct {
	// From is the state the binding was in.
	From State
	// Event is the event that was refused.
	Event Event
}

// Error names the state and the event, e.g. "worktree: switch_approve is not allowed in
// state UNBOUND (§16.2)"; unknown states and events are quoted and said to be unknown.
func (e *TransitionError) Error() string {
	switch {
	case !e.From.Valid():
		return fmt.Sprintf("worktree: %s is not a binding state (§16.1); event %s refused", quote(string(e.From)), quote(string(e.Event)))
	case !e.Event.Valid():
		return fmt.Sprintf("worktree: %s is not a binding event (§16.2); refused in state %s", quote(string(e.Event)), e.From)
	}
	return fmt.Sprintf("worktree: %s is not allowed in state %s (§16.2)", e.Event, e.From)
}

// Unwrap makes every TransitionError match ErrTransition.
func (e *TransitionError) Unwrap() error { return ErrTransition }

// Transition is the state a binding in from moves to on ev, exactly by §16.2's table; every
// pair the table does not list is refused with a *TransitionError naming the state and the
// event.
func Transition(from State, ev Event) (State, error) {
	// A linear scan of twelve rows: no map, so nothing depends on Go's map order.
	for _, r := range rules {
		if r.From == from && r.Event == ev {
			return r.To, nil
		}
	}
	return "", &TransitionError{From: from, Event: ev}
}

// Allowed returns the events a binding in state s accepts, in the table's order.
func Allowed(s State) []Event {
	var out []Event
	for _, r := range rules {
		if r.From == s {
			out = append(out, r.Event)
		}
	}
	return out
}

// Bound reports whether an agent in state s holds a worktree it may work in: its home
// worktree (BOUND_HOME, and SWITCH_PENDING, where the switch is only asked for) or a non-home
// worktree (BOUND_NON_HOME).
func Bound(s State) bool {
	switch s {
	case StateBoundHome, StateSwitchPending, StateBoundNonHome:
		return true
	}
	return false
}

// Eligible reports whether an agent in state s may be given tasks that need a worktree
// (§16.3 "Task scheduling"): agents in BIND_FAILED must not be, and the scheduler treats
// UNBOUND the same way; every bound state is eligible.
func Eligible(s State) bool { return Bound(s) }

// quote prints a caller's string safely and briefly in a message.
func quote(s string) string {
	const limit = 64
	if len(s) > limit {
		return strconv.Quote(s[:limit]) + "…"
	}
	return strconv.Quote(s)
}
