package inference

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
)

// DefaultThreshold is the default escalation threshold (§9.3 "configurable confidence score
// thresholds"): an assessment below it escalates to HITL. 0.7 lets the default table run
// different_repos (0.95) and disjoint (0.8) scopes in parallel and escalates everything else.
const DefaultThreshold = 0.7

// UnavailablePolicy is what Decide does when the Inference Engine failed (§9.3 "Availability
// Handling", §20 "deny risky parallelism ... and escalate to HITL as policy requires").
type UnavailablePolicy string

const (
	// UnavailableSerialize runs the tasks one after the other. It is the default: the empty
	// policy and any unknown value behave like it.
	UnavailableSerialize UnavailablePolicy = "serialize"
	// UnavailableHITL escalates to HITL review with reason type CONFLICT.
	UnavailableHITL UnavailablePolicy = "hitl"
	// UnavailableAllow runs the tasks in parallel without any assessment. It is the "explicit
	// policy configuration [that] permits unconditional parallelism" of §9.3: an administrator
	// must set it deliberately for the operation type it applies to, and §9.4 requires such an
	// override to be documented. Nothing in this package ever selects it by default.
	UnavailableAllow UnavailablePolicy = "allow"
)

// ParseUnavailablePolicy parses a configured policy name (case-insensitive); the empty string
// is UnavailableSerialize and an unknown name is an error.
func ParseUnavailablePolicy(s string) (UnavailablePolicy, error) {
	switch p := UnavailablePolicy(strings.ToLower(strings.TrimSpace(s))); p {
	case "":
		return UnavailableSerialize, nil
	case UnavailableSerialize, UnavailableHITL, UnavailableAllow:
		return p, nil
	}
	return "", fmt.Errorf("unknown inference-unavailable policy %q (want %s, %s or %s)", s, UnavailableSerialize, UnavailableHITL, UnavailableAllow)
}

// Verdict is what the scheduler does with two tasks.
type Verdict struct {
	// Parallel is true when the tasks may run at the same time.
	Parallel bool
	// Escalate is true when the decision goes to HITL review with ReasonType; the tasks do
	// not run in parallel meanwhile.
	Escalate bool
	// ReasonType is the HITL reason type, CONFLICT when Escalate (§9.3); unspecified otherwise.
	ReasonType commonpb.HitlReasonType
	// Fallback names the UnavailablePolicy applied because the engine failed; empty when the
	// engine answered (§15.3: document and log which fallback was applied).
	Fallback UnavailablePolicy
	// Reason explains the verdict for logs and the HITL invocation.
	Reason string
}

// Decide turns an assessment into a verdict (§9.3, §9.4):
//   - engineErr != nil: the engine is unavailable and policy decides — serialize (the default,
//     also for an unknown policy), escalate to HITL with CONFLICT, or, only when explicitly
//     configured, allow;
//   - a confidence that is NaN or outside [0, 1] is not a valid §9.3 score and escalates;
//   - a confidence below threshold escalates to HITL with reason type CONFLICT;
//   - otherwise the tasks run in parallel.
//
// A threshold that is NaN or not above 0 means DefaultThreshold (so a zero-valued
// configuration cannot disable escalation); a threshold above 1 escalates everything.
func Decide(a Assessment, threshold float64, engineErr error, policy UnavailablePolicy) Verdict {
	if engineErr != nil {
		p, err := ParseUnavailablePolicy(string(policy))
		if err != nil {
			p = UnavailableSerialize
		}
		why := fmt.Sprintf("inference engine unavailable (%v)", engineErr)
		switch p {
		case UnavailableHITL:
			return Verdict{Escalate: true, ReasonType: commonpb.HitlReasonType_CONFLICT, Fallback: p,
				Reason: why + "; escalating to HITL with reason CONFLICT per unavailable policy hitl (§9.3)"}
		case UnavailableAllow:
			return Verdict{Parallel: true, Fallback: p,
				Reason: why + "; running in parallel because the unavailable policy is explicitly configured as allow (§9.3 policy override)"}
		}
		note := ""
		if err != nil {
			note = fmt.Sprintf(" (unknown policy %q treated as serialize)", string(policy))
		}
		return Verdict{Fallback: UnavailableSerialize,
			Reason: why + "; serializing per unavailable policy serialize" + note + " (§9.2 conservative resolution, §20)"}
	}
	if math.IsNaN(threshold) || threshold <= 0 {
		threshold = DefaultThreshold
	}
	c := a.Confidence
	rule := ""
	if a.Rule != "" {
		rule = " (rule " + a.Rule + ")"
	}
	if math.IsNaN(c) || c < 0 || c > 1 {
		return Verdict{Escalate: true, ReasonType: commonpb.HitlReasonType_CONFLICT,
			Reason: fmt.Sprintf("confidence %v%s is not a valid score in [0, 1]; escalating to HITL with reason CONFLICT", c, rule)}
	}
	if c < threshold {
		return Verdict{Escalate: true, ReasonType: commonpb.HitlReasonType_CONFLICT,
			Reason: fmt.Sprintf("confidence %s%s is below the threshold %s; escalating to HITL with reason CONFLICT (§9.3)", fmtF(c), rule, fmtF(threshold))}
	}
	return Verdict{Parallel: true,
		Reason: fmt.Sprintf("confidence %s%s meets the threshold %s; running in parallel", fmtF(c), rule, fmtF(threshold))}
}

func fmtF(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
