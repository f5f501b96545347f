package tool

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
)

// NetworkPolicy is an execution's network access (§18.5.2).
type NetworkPolicy string

// The network policies of §18.5.2.
const (
	// NetworkDenyAll: no connection in or out; the default (§18.5.2: "SHOULD default to
	// DENY_ALL").
	NetworkDenyAll NetworkPolicy = "DENY_ALL"
	// NetworkEgressRestricted: outbound connections to allowlisted hosts and ports only.
	NetworkEgressRestricted NetworkPolicy = "EGRESS_RESTRICTED"
	// NetworkEgressUnrestricted: any outbound connection, no inbound.
	NetworkEgressUnrestricted NetworkPolicy = "EGRESS_UNRESTRICTED"
	// NetworkFullAccess: connections in and out.
	NetworkFullAccess NetworkPolicy = "FULL_ACCESS"
)

// NetworkPolicies lists the accepted network policies, from most to least restrictive.
func NetworkPolicies() []NetworkPolicy {
	return []NetworkPolicy{NetworkDenyAll, NetworkEgressRestricted, NetworkEgressUnrestricted, NetworkFullAccess}
}

// PrivilegeLevel is an execution's privilege (§18.5.3). Levels are ordered: a larger value
// grants more.
type PrivilegeLevel int

// The privilege levels of §18.5.3, in increasing order, and FULL_ACCESS above them all (the
// issue's name for unrestricted access, treated like PRIVILEGED but stronger).
const (
	// PrivilegeMinimal: no sensitive resources, no process spawning, no files outside the
	// sandbox; the default.
	PrivilegeMinimal PrivilegeLevel = iota + 1
	// PrivilegeDefault: the agent's own privileges — its worktree, the network per
	// network_policy, no escalation.
	PrivilegeDefault
	// PrivilegeElevated: elevated operations allowed, each one logged.
	PrivilegeElevated
	// PrivilegePrivileged: full system privileges; needs an operator's approval, logged at
	// WARN.
	PrivilegePrivileged
	// PrivilegeFullAccess: no restriction at all; needs an operator's approval, logged at
	// WARN.
	PrivilegeFullAccess
)

var privilegeNames = []string{"", "MINIMAL", "DEFAULT", "ELEVATED", "PRIVILEGED", "FULL_ACCESS"}

// String returns the spec's spelling, e.g. "MINIMAL".
func (p PrivilegeLevel) String() string {
	if p < PrivilegeMinimal || p > PrivilegeFullAccess {
		return "PrivilegeLevel(" + strconv.Itoa(int(p)) + ")"
	}
	return privilegeNames[p]
}

// PrivilegeLevels lists the accepted privilege levels in increasing order.
func PrivilegeLevels() []PrivilegeLevel {
	return []PrivilegeLevel{PrivilegeMinimal, PrivilegeDefault, PrivilegeElevated, PrivilegePrivileged, PrivilegeFullAccess}
}

// Backoff is how the wait between retries grows.
type Backoff string

// The accepted backoff kinds.
const (
	// BackoffExponential doubles the wait after each attempt; the default.
	BackoffExponential Backoff = "exponential"
	// BackoffFixed waits the same interval between attempts.
	BackoffFixed Backoff = "fixed"
)

// Policy defaults and limits (§18.5, §20).
const (
	// DefaultTimeout bounds one attempt when neither the policy nor the descriptor says.
	DefaultTimeout = 60 * time.Second
	// MaxTimeout bounds any timeout or wall budget: a day.
	MaxTimeout = 24 * time.Hour
	// MaxRetries bounds max_retries.
	MaxRetries = 10
	// RetryInitialInterval is the wait before the first retry.
	RetryInitialInterval = time.Second
	// RetryMaximumInterval caps the wait between retries.
	RetryMaximumInterval = time.Minute
)

// Policy is an execution policy with every default applied (§18.5): what the call workflow
// enforces. Build it with Effective.
type Policy struct {
	// Timeout bounds one attempt; past it the attempt fails with TOOL_TIMEOUT.
	Timeout time.Duration
	// BudgetWall bounds the whole execution, retries and waits between them included; past
	// it the call fails with WALL_TIMEOUT (§18.5.1). 0: no limit.
	BudgetWall time.Duration
	// BudgetCPU bounds the CPU time of the processes the tool spawns; past it the call fails
	// with CPU_BUDGET_EXCEEDED (§18.5.1). 0: no limit.
	BudgetCPU time.Duration
	// Network is the network policy (§18.5.2).
	Network NetworkPolicy
	// Privilege is the privilege level (§18.5.3).
	Privilege PrivilegeLevel
	// WorktreeRequired: the call is refused (WORKTREE_NOT_BOUND) unless the calling agent is
	// bound to a worktree (§16) — asked by the policy or by the descriptor's needs_worktree.
	WorktreeRequired bool
	// MaxRetries is how many times a failed attempt is tried again; always 0 for a
	// non-idempotent tool (§18.3).
	MaxRetries uint32
	// Backoff is how the wait between retries grows; empty when MaxRetries is 0.
	Backoff Backoff
	// Notes say, for a person, where the policy differs from what was asked — e.g. retries
	// dropped because the tool is not idempotent.
	Notes []string
}

// Effective applies the defaults of §18.5 to a call's policy (nil: all defaults) for the
// tool d describes, and refuses values it does not know (VALIDATION_ERROR):
//   - Timeout: the policy's timeout, else the descriptor's default_timeout_s, else
//     DefaultTimeout; at most MaxTimeout; a negative or malformed duration is refused.
//   - BudgetWall, BudgetCPU: budget_wall_ms, budget_cpu_ms (0: no limit), at most MaxTimeout.
//   - Network: network_policy, DENY_ALL when empty; one of NetworkPolicies.
//   - Privilege: privilege_level, MINIMAL when empty; one of PrivilegeLevels.
//   - WorktreeRequired: worktree_required || needs_worktree.
//   - MaxRetries (at most MaxRetries) and Backoff (exponential when empty, or fixed): only for
//     an idempotent tool. §18.3: callers "MUST NOT retry non-idempotent tools", so a
//     non-idempotent one gets 0 retries whatever the policy asks, and a note says so.
//
// Names are matched case-insensitively, surrounding spaces ignored.
func Effective(policy *toolpb.ExecutionPolicy, d *connectorpb.ToolDescriptor) (Policy, error) {
	p := Policy{Timeout: DefaultTimeout, Network: NetworkDenyAll, Privilege: PrivilegeMinimal}
	if s := d.GetDefaultTimeoutS(); s > 0 {
		p.Timeout = time.Duration(s) * time.Second
	}
	if t := policy.GetTimeout(); t != nil {
		if err := t.CheckValid(); err != nil {
			return Policy{}, Errorf(CodeValidation, "timeout is not a valid duration: %v", err)
		}
		switch dur := t.AsDuration(); {
		case dur < 0:
			return Policy{}, Errorf(CodeValidation, "timeout %s is negative", dur)
		case dur > 0:
			p.Timeout = dur
		}
	}
	if p.Timeout > MaxTimeout {
		return Policy{}, Errorf(CodeValidation, "timeout %s is more than %s", p.Timeout, MaxTimeout)
	}

	var err error
	if p.BudgetWall, err = budget("budget_wall_ms", policy.GetBudgetWallMs()); err != nil {
		return Policy{}, err
	}
	if p.BudgetCPU, err = budget("budget_cpu_ms", policy.GetBudgetCpuMs()); err != nil {
		return Policy{}, err
	}

	if n := normal(policy.GetNetworkPolicy()); n != "" {
		p.Network = NetworkPolicy(n)
		if !containsNetwork(p.Network) {
			return Policy{}, Errorf(CodeValidation, "network_policy %s is not one of DENY_ALL, EGRESS_RESTRICTED, EGRESS_UNRESTRICTED, FULL_ACCESS", strconv.Quote(policy.GetNetworkPolicy()))
		}
	}
	if l := normal(policy.GetPrivilegeLevel()); l != "" {
		p.Privilege = 0
		for _, lv := range PrivilegeLevels() {
			if lv.String() == l {
				p.Privilege = lv
			}
		}
		if p.Privilege == 0 {
			return Policy{}, Errorf(CodeValidation, "privilege_level %s is not one of MINIMAL, DEFAULT, ELEVATED, PRIVILEGED, FULL_ACCESS", strconv.Quote(policy.GetPrivilegeLevel()))
		}
	}

	p.WorktreeRequired = policy.GetWorktreeRequired() || d.GetNeedsWorktree()

	if r := policy.GetMaxRetries(); r > MaxRetries {
		return Policy{}, Errorf(CodeValidation, "max_retries %d is more than %d", r, MaxRetries)
	}
	backoff := Backoff(strings.ToLower(strings.TrimSpace(policy.GetBackoff())))
	switch backoff {
	case "", BackoffExponential, BackoffFixed:
	default:
		return Policy{}, Errorf(CodeValidation, "backoff %s is not one of exponential, fixed", strconv.Quote(policy.GetBackoff()))
	}
	switch r := policy.GetMaxRetries(); {
	case r == 0:
	case !d.GetIdempotent():
		// §18.3: a retry could perform the side effect twice.
		p.Notes = append(p.Notes, fmt.Sprintf("max_retries %d ignored: tool %s is not idempotent and is never retried (§18.3)", r, strconv.Quote(d.GetToolName())))
	default:
		p.MaxRetries = r
		p.Backoff = backoff
		if p.Backoff == "" {
			p.Backoff = BackoffExponential
		}
	}
	return p, nil
}

func budget(field string, ms uint64) (time.Duration, error) {
	if ms > uint64(MaxTimeout/time.Millisecond) {
		return 0, Errorf(CodeValidation, "%s %d is more than %d (a day)", field, ms, uint64(MaxTimeout/time.Millisecond))
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func normal(s string) string { return strings.ToUpper(strings.TrimSpace(s)) }

func containsNetwork(n NetworkPolicy) bool {
	for _, v := range NetworkPolicies() {
		if v == n {
			return true
		}
	}
	return false
}

// NeedsApproval reports whether the call must wait for an operator's approval before it runs:
// PRIVILEGED and FULL_ACCESS do (§18.5.3: "MUST require explicit HITL approval"), through a
// HITL wait with reason TOOL_PRIVILEGE_ESCALATION unless policy pre-approves it.
func (p Policy) NeedsApproval() bool { return p.Privilege >= PrivilegePrivileged }

// ApprovalReasons lists why the call must wait for an operator's approval before it runs,
// unless the deployment pre-approves the tool; none means it need not. §18.5.3: ELEVATED and
// PRIVILEGED "SHOULD trigger HITL escalation with reason_type=TOOL_PRIVILEGE_ESCALATION unless
// explicitly pre-approved by policy" (PRIVILEGED MUST); §18.5.2: FULL_ACCESS, inbound and
// outbound, "SHOULD require explicit HITL approval".
func (p Policy) ApprovalReasons() []string {
	var why []string
	if p.Privilege >= PrivilegeElevated {
		why = append(why, "privilege_level "+p.Privilege.String())
	}
	if p.Network == NetworkFullAccess {
		why = append(why, "network_policy FULL_ACCESS (the host's network, inbound and outbound)")
	}
	return why
}

// Escalated reports whether the call runs above the agent's standard privileges (ELEVATED and
// above), which §18.5.3 requires to be logged: at WARN from PRIVILEGED up (NeedsApproval).
func (p Policy) Escalated() bool { return p.Privilege >= PrivilegeElevated }

// MaximumAttempts is how many attempts the call may make in all: MaxRetries + 1.
func (p Policy) MaximumAttempts() int { return int(p.MaxRetries) + 1 }

// BackoffCoefficient is the factor by which the wait between retries grows: 2 for
// exponential, 1 for fixed (and when there are no retries).
func (p Policy) BackoffCoefficient() float64 {
	if p.Backoff == BackoffExponential {
		return 2
	}
	return 1
}

// Deadline is the time one attempt may take and the code it fails with past it: Timeout and
// TOOL_TIMEOUT, or BudgetWall and WALL_TIMEOUT when the wall budget is set and no longer
// (§18.5.1: "whichever limit is reached first"). The wall budget also bounds the whole
// execution, retries included.
func (p Policy) Deadline() (time.Duration, Code) {
	if p.BudgetWall > 0 && p.BudgetWall <= p.Timeout {
		return p.BudgetWall, CodeWallTimeout
	}
	return p.Timeout, CodeToolTimeout
}
