package protocol

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// The rules of the agent handoff protocol (§17.6; 000 §3.11.2; 004 item 8): what a
// HandoffRequest must satisfy, how a target is chosen among capable agents, how long an
// OVERLOADED target is left alone before the offer is repeated, and the lifecycle table.

// Handoff limits and defaults.
const (
	// MaxHandoffTimeout bounds a handoff's timeout, the longest an offer may wait for
	// acceptance (§17.6 "timeout: maximum duration to wait for acceptance").
	MaxHandoffTimeout = 24 * time.Hour
	// DefaultHandoffContentType is the context snapshot's content type when the request
	// names none (004 item 8).
	DefaultHandoffContentType = "application/json"
	// DefaultHandoffMaxRedirects bounds the REDIRECTs a handoff follows when its policy sets
	// no max_redirects. 0 cannot mean "none": proto3 cannot tell an unset max_redirects from
	// 0, and an originator that wants no redirect followed turns spillover routing off
	// (FollowsRedirects). Two hops — a gateway to its peer, the peer to the agent that owns
	// the work — cover what REDIRECT is for; every hop is a whole offer round inside the one
	// acceptance timeout, so a longer default chain mostly spends the originator's timeout
	// on agents that are not taking the work; and 2 is the bound the published SDKs apply
	// when max_redirects is 0, so a delegation is bounded alike whether an SDK or this
	// server follows its redirects. (Handoffs started before this bound was chosen keep 3.)
	DefaultHandoffMaxRedirects = 2
	// DefaultHandoffCompletionTimeout is how long an ACCEPTED handoff may wait for
	// CompleteHandoff when its request's budget sets no deadline (HandoffCompletionDeadline);
	// a deployment sets its own with SW4RM_HANDOFF_COMPLETION_TIMEOUT. §17.6 bounds only
	// the wait for acceptance; without a bound on completion an accepting agent that crashes
	// and never comes back leaves the originator waiting for ever. An hour is as long as a
	// HITL decision may take by default: long enough for an agent's ordinary piece of work,
	// short enough that a lost agent's work goes back to its originator the same working
	// session. An agent that restarts in time recovers the handoff (GetPendingHandoffs with
	// wire.HandoffIncludeAcceptedKey), so the bound only decides for an agent lost for good.
	DefaultHandoffCompletionTimeout = time.Hour
	// MaxHandoffCompletionTimeout bounds the completion deadline a budget may set, from the
	// acceptance: a budget further out (a deadline_epoch_ms years ahead, a huge
	// wall_time_remaining_ms) still leaves the handoff bounded.
	MaxHandoffCompletionTimeout = 30 * 24 * time.Hour
)

// HandoffCompletionDeadline is when an ACCEPTED handoff must be completed by, and what set it.
// The request's BudgetEnvelope is the canonical bound on the delegated work (HandoffRequest
// has no completion timeout of its own): wall_time_remaining_ms counts from requestedAt, when
// the budget was handed over, and deadline_epoch_ms is absolute; the earlier of those set
// wins. A budget that sets neither gets acceptedAt plus def (DefaultHandoffCompletionTimeout
// when def is not positive). The deadline is never later than acceptedAt plus
// MaxHandoffCompletionTimeout; it may be earlier than acceptedAt when the budget ran out
// while the offer waited, and then the handoff expires as soon as it is accepted.
func HandoffCompletionDeadline(requestedAt, acceptedAt time.Time, wallMs, deadlineEpochMs uint64, def time.Duration) (time.Time, string) {
	limit := acceptedAt.Add(MaxHandoffCompletionTimeout)
	var at time.Time
	var why string
	// Values past the limit are compared as the limit, so no arithmetic overflows.
	if wallMs > 0 {
		at, why = limit, fmt.Sprintf("the budget's wall_time_remaining_ms %d from the request", wallMs)
		if wallMs < uint64(MaxHandoffCompletionTimeout/time.Millisecond) {
			at = earliest(limit, requestedAt.Add(time.Duration(wallMs)*time.Millisecond))
		}
	}
	if deadlineEpochMs > 0 {
		d := limit
		if deadlineEpochMs < uint64(limit.UnixMilli()) {
			d = time.UnixMilli(int64(deadlineEpochMs)).UTC()
		}
		if at.IsZero() || d.Before(at) {
			at, why = d, fmt.Sprintf("the budget's deadline_epoch_ms %d", deadlineEpochMs)
		}
	}
	if !at.IsZero() {
		if at.Equal(limit) {
			why += fmt.Sprintf(", bounded to %s after the acceptance", MaxHandoffCompletionTimeout)
		}
		return at, why
	}
	if def <= 0 {
		def = DefaultHandoffCompletionTimeout
	}
	def = min(def, MaxHandoffCompletionTimeout)
	return acceptedAt.Add(def), fmt.Sprintf("the completion timeout of %s from the acceptance", def)
}

// earliest returns the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// HandoffContentTypes are the context snapshot content types 004 item 8 admits.
var HandoffContentTypes = []string{"application/json", "application/protobuf", "text/plain"}

// HandoffContentType returns the content type a snapshot travels with: the declared one, or
// DefaultHandoffContentType when it is empty (004 item 8).
func HandoffContentType(declared string) string { return cmp.Or(declared, DefaultHandoffContentType) }

// ValidateHandoffRequest checks a HandoffRequest and its context's content type (§17.6,
// 004 item 8) against the default payload limit; see ValidateHandoffRequestLimits.
func ValidateHandoffRequest(req *handoffpb.HandoffRequest, contentType string) *Error {
	return ValidateHandoffRequestLimits(req, contentType, Limits{})
}

// ValidateHandoffRequestLimits checks a HandoffRequest (§17.6): a request_id usable in a
// workflow ID, a from_agent, a to_agent or capabilities_required (an empty to_agent asks for
// routing), a to_agent other than the originator, a priority in -19..20 (§7.1), a timeout in
// (0, 24h], a delegation budget not yet exhausted, a context content type of 004 item 8 (empty
// means application/json) and a context snapshot within the payload limit (§5.4). Refusals
// are validation_error, except an oversized context, which is oversize_payload like every
// payload over the limit.
func ValidateHandoffRequestLimits(req *handoffpb.HandoffRequest, contentType string, lim Limits) *Error {
	if req == nil {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "handoff request is required")
	}
	// request_id becomes the workflow ID handoff/<request_id>: the agent-id charset keeps it
	// usable there and in the Temporal UI's queries.
	switch id := req.GetRequestId(); {
	case id == "":
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "request_id is required (§17.6)")
	case !agentIDPattern.MatchString(id):
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "request_id %q must be 1-128 characters of letters, digits and . _ : @ - starting with a letter or digit", truncate(id))
	}
	if req.GetFromAgent() == "" {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "from_agent is required (§17.6)")
	}
	if err := ValidateAgentID(req.GetFromAgent()); err != nil {
		return Errorf(err.Code, "from_agent: %s", err.Msg)
	}
	if req.GetToAgent() == "" && len(req.GetCapabilitiesRequired()) == 0 {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "to_agent or capabilities_required is required: name the target, or the capabilities to route on (§17.6)")
	}
	if to := req.GetToAgent(); to != "" {
		if err := ValidateAgentID(to); err != nil {
			return Errorf(err.Code, "to_agent: %s", err.Msg)
		}
		if to == req.GetFromAgent() {
			return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "to_agent %q is the originator: an agent cannot hand work to itself", to)
		}
	}
	for _, c := range req.GetCapabilitiesRequired() {
		if c == "" {
			return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "capabilities_required has an empty entry")
		}
	}
	if p := req.GetPriority(); p < MinPriority || p > MaxPriority {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "priority %d is outside %d (highest) .. %d (lowest) (§7.1)", p, MinPriority, MaxPriority)
	}
	if req.GetTimeout() == nil {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "timeout is required: how long the offer may wait for acceptance (§17.6)")
	}
	if err := req.GetTimeout().CheckValid(); err != nil {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "timeout: %v", err)
	}
	if d := req.GetTimeout().AsDuration(); d <= 0 || d > MaxHandoffTimeout {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "timeout %s must be positive and at most %s", d, MaxHandoffTimeout)
	}
	if b := req.GetBudget(); b.GetMaxDelegationDepth() > 0 && b.GetCurrentDepth() >= b.GetMaxDelegationDepth() {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "delegation depth %d reaches max %d: this chain may not delegate further", b.GetCurrentDepth(), b.GetMaxDelegationDepth())
	}
	if p := req.GetDelegationPolicy(); p != nil && (math.IsNaN(p.GetBackoffMultiplier()) || p.GetBackoffMultiplier() < 0) {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "delegation_policy.backoff_multiplier %v must be a non-negative number", p.GetBackoffMultiplier())
	}
	ct := HandoffContentType(contentType)
	mt, err := parseMIME(ct)
	if err != nil || !slices.Contains(HandoffContentTypes, mt) {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "context content type %q is not one of %v (004 item 8)", truncate(ct), HandoffContentTypes)
	}
	maxPayload := lim.MaxPayloadBytes
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayloadBytes
	}
	if n := len(req.GetContextSnapshot()); n > maxPayload {
		return Errorf(commonpb.ErrorCode_OVERSIZE_PAYLOAD, "context_snapshot of %d bytes exceeds the %d-byte limit (§5.4)", n, maxPayload)
	}
	return nil
}

// HandoffPolicy is the SwarmDelegationPolicy of a handoff in Go units: how an OVERLOADED
// target is retried, whether a rejection spills over to the next candidate, and how many
// REDIRECTs are followed. Zero fields take defaults (see NextOverloadBackoff, OverloadRetries,
// MaxRedirectsOf and FollowsRedirects).
type HandoffPolicy struct {
	// MaxRetriesOnOverloaded is how often an OVERLOADED target is offered the handoff again.
	MaxRetriesOnOverloaded uint32
	// InitialBackoff is the wait before the first retry.
	InitialBackoff time.Duration
	// Multiplier grows the wait from one retry to the next.
	Multiplier float64
	// MaxBackoff caps the wait.
	MaxBackoff time.Duration
	// AllowSpillover is allow_spillover_routing: it lets a rejected handoff with a named
	// to_agent go to the next capable agent (a routed handoff, with no to_agent, always
	// does), and a REDIRECT be followed (see FollowsRedirects).
	AllowSpillover bool
	// MaxRedirects bounds the REDIRECTs followed.
	MaxRedirects uint32
}

// Defaults of an empty HandoffPolicy.
const (
	// DefaultHandoffInitialBackoff is the first OVERLOADED wait.
	DefaultHandoffInitialBackoff = time.Second
	// DefaultHandoffBackoffMultiplier doubles each wait.
	DefaultHandoffBackoffMultiplier = 2.0
	// DefaultHandoffMaxBackoff caps the wait.
	DefaultHandoffMaxBackoff = 30 * time.Second
	// DefaultHandoffOverloadRetries is the number of retries when the policy is empty.
	DefaultHandoffOverloadRetries = 3
)

// HandoffPolicyFromProto converts a SwarmDelegationPolicy (nil is the empty policy).
func HandoffPolicyFromProto(p *handoffpb.SwarmDelegationPolicy) HandoffPolicy {
	return HandoffPolicy{
		MaxRetriesOnOverloaded: p.GetMaxRetriesOnOverloaded(),
		InitialBackoff:         msDuration(p.GetInitialBackoffMs()),
		Multiplier:             p.GetBackoffMultiplier(),
		MaxBackoff:             msDuration(p.GetMaxBackoffMs()),
		AllowSpillover:         p.GetAllowSpilloverRouting(),
		MaxRedirects:           p.GetMaxRedirects(),
	}
}

// msDuration converts milliseconds, saturating instead of overflowing.
func msDuration(ms uint64) time.Duration {
	if ms > uint64(math.MaxInt64/int64(time.Millisecond)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ms) * time.Millisecond
}

// OverloadRetries is how many times an OVERLOADED target is retried: the policy's
// max_retries_on_overloaded, or DefaultHandoffOverloadRetries when the whole policy is empty
// (a policy that sets anything else and no retries asks for none).
func OverloadRetries(p HandoffPolicy) int {
	if p == (HandoffPolicy{}) {
		return DefaultHandoffOverloadRetries
	}
	return int(p.MaxRetriesOnOverloaded)
}

// MaxRedirectsOf is how many REDIRECTs a handoff follows: the policy's max_redirects, or
// DefaultHandoffMaxRedirects when it is 0.
func MaxRedirectsOf(p HandoffPolicy) int {
	if p.MaxRedirects == 0 {
		return DefaultHandoffMaxRedirects
	}
	return int(p.MaxRedirects)
}

// FollowsRedirects reports whether a handoff follows a REDIRECT answer to the agent it
// names. allow_spillover_routing decides (the published SDKs read it as permission to
// redirect to an equivalent peer): with it off the REDIRECT goes back to the originator, who
// decides whether to ask that agent. A request with no policy, or an entirely empty one, takes the
// server's defaults, which follow up to DefaultHandoffMaxRedirects — as OverloadRetries
// gives an empty policy its default retries.
func FollowsRedirects(p HandoffPolicy) bool {
	return p.AllowSpillover || p == (HandoffPolicy{})
}

// ValidateRedirect checks the target of a REDIRECT before anything else about it (the
// redirect bound included): to, trimmed of spaces, must name an agent, and not one the chain
// has already visited — the originator from or an agent in offered, the agents offered the
// handoff so far in order. A blank target or a loop is validation_error: the chain cannot go
// anywhere useful, so the handoff ends at once instead of waiting out its timeout.
func ValidateRedirect(to, from string, offered []string) *Error {
	to = strings.TrimSpace(to)
	if to == "" {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "REDIRECT needs a non-empty redirect_to_agent_id")
	}
	if to != from && !slices.Contains(offered, to) {
		return nil
	}
	chain := append([]string{from}, offered...)
	why := "it was already offered this handoff"
	if to == from {
		why = "it is the originator"
	}
	return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "redirect loop %s → %s: %s", strings.Join(chain[slices.Index(chain, to):], " → "), to, why)
}

// MissingCapabilities lists the entries of need that have lacks, in need's order: the
// capabilities_required an agent does not declare (§17.6: capabilities the receiving agent
// MUST possess).
func MissingCapabilities(have, need []string) []string {
	var missing []string
	for _, n := range need {
		if !slices.Contains(have, n) {
			missing = append(missing, n)
		}
	}
	return missing
}

// NextOverloadBackoff is the wait before retry number retry (from 0) of an OVERLOADED
// target: initial × multiplier^retry, capped at the maximum. Zero fields take the defaults
// (1 s, ×2, 30 s); a multiplier below 1 is taken as 1, so waits never shrink.
func NextOverloadBackoff(p HandoffPolicy, retry int) time.Duration {
	initial := cmp.Or(p.InitialBackoff, DefaultHandoffInitialBackoff)
	maxWait := cmp.Or(p.MaxBackoff, DefaultHandoffMaxBackoff)
	mult := p.Multiplier
	switch {
	case mult == 0 || math.IsNaN(mult):
		mult = DefaultHandoffBackoffMultiplier
	case mult < 1:
		mult = 1
	}
	if initial > maxWait {
		return maxWait
	}
	// Computed in float64 and capped before converting, so a large retry cannot overflow.
	d := float64(initial) * math.Pow(mult, float64(max(retry, 0)))
	if d >= float64(maxWait) || math.IsInf(d, 0) {
		return maxWait
	}
	return time.Duration(d)
}

// OverloadWait is the wait before retry number retry of a target that answered OVERLOADED
// with retry_after_ms: NextOverloadBackoff, or the target's own retry_after when that is
// longer (the target knows best when it will have room).
func OverloadWait(p HandoffPolicy, retry int, retryAfterMs uint64) time.Duration {
	return max(NextOverloadBackoff(p, retry), msDuration(retryAfterMs))
}

// HandoffCandidate is one registered agent as routing sees it (§17.6: capability-based
// routing when to_agent is empty).
type HandoffCandidate struct {
	// AgentID names the agent.
	AgentID string
	// State is its lifecycle state (§8); only RUNNABLE agents are offered work.
	State commonpb.AgentState
	// Capabilities and Modalities come from its descriptor (§14, §12).
	Capabilities, Modalities []string
	// MaxConcurrentDelegations bounds its open handoffs; 0 means no limit.
	MaxConcurrentDelegations uint32
	// OpenDelegations counts the handoffs offered to or accepted by it and not yet ended.
	OpenDelegations int
	// Load is its current load (e.g. the messages waiting in its buffer).
	Load int
}

// RankCandidates chooses among agents for a routed handoff (§17.6): it keeps the RUNNABLE
// agents that have every capability in need, accept contentType (§12, 004 item 8), are under
// their max_concurrent_delegations and are not in exclude (the originator, agents that
// refused, fenced agents), and orders them by Load+OpenDelegations, then agent_id, so equal
// agents are chosen the same way every time. The string is the reason of the first choice,
// or, when none is left, why not.
func RankCandidates(agents []HandoffCandidate, need []string, contentType string, exclude map[string]bool) ([]HandoffCandidate, string) {
	var out []HandoffCandidate
	var excluded, notRunnable, incapable, modality, full int
	for _, a := range agents {
		switch {
		case exclude[a.AgentID]:
			excluded++
		case a.State != commonpb.AgentState_RUNNABLE:
			notRunnable++
		case !hasAll(a.Capabilities, need):
			incapable++
		case !AcceptsContentType(a.Modalities, contentType):
			modality++
		case a.MaxConcurrentDelegations > 0 && a.OpenDelegations >= int(a.MaxConcurrentDelegations):
			full++
		default:
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Sprintf("no capable agent left among %d registered (%d excluded, %d not RUNNABLE, %d without %v, %d not accepting %s, %d at max_concurrent_delegations)",
			len(agents), excluded, notRunnable, incapable, need, modality, contentType, full)
	}
	slices.SortStableFunc(out, func(a, b HandoffCandidate) int {
		return cmp.Or(cmp.Compare(a.Load+a.OpenDelegations, b.Load+b.OpenDelegations), cmp.Compare(a.AgentID, b.AgentID))
	})
	first := out[0]
	return out, fmt.Sprintf("least loaded of %d capable: load %d", len(out), first.Load+first.OpenDelegations)
}

// hasAll reports whether have contains every entry of need.
func hasAll(have, need []string) bool { return len(MissingCapabilities(have, need)) == 0 }

// handoffTransitions is the handoff lifecycle (§17.6, 000 §3.11.2): PENDING is answered by
// acceptance, rejection or the timeout; an accepted handoff completes. ACCEPTED → EXPIRED is
// not in the diagram: it is CancelDelegation's, the only way an accepted handoff ends
// without completing (the timeout bounds acceptance, not the work).
var handoffTransitions = map[handoffpb.HandoffStatus][]handoffpb.HandoffStatus{
	handoffpb.HandoffStatus_PENDING:  {handoffpb.HandoffStatus_ACCEPTED, handoffpb.HandoffStatus_REJECTED, handoffpb.HandoffStatus_EXPIRED},
	handoffpb.HandoffStatus_ACCEPTED: {handoffpb.HandoffStatus_COMPLETED, handoffpb.HandoffStatus_EXPIRED},
}

// CanTransition reports whether a handoff may move from one state to another (§17.6). The
// table allows ACCEPTED → EXPIRED; callers take it only on a cancellation.
func CanTransition(from, to handoffpb.HandoffStatus) bool {
	return slices.Contains(handoffTransitions[from], to)
}

// HandoffTerminal reports whether a handoff state is final: COMPLETED, REJECTED or EXPIRED.
func HandoffTerminal(s handoffpb.HandoffStatus) bool {
	switch s {
	case handoffpb.HandoffStatus_COMPLETED, handoffpb.HandoffStatus_REJECTED, handoffpb.HandoffStatus_EXPIRED:
		return true
	}
	return false
}

// ValidateHandoffCall checks a RequestHandoff call (§17.6): the request and its context's
// content type (ValidateHandoffRequest), a context snapshot within the server's payload
// limit maxPayload (0: none beyond the default) and a correlation of at most 256 bytes.
func ValidateHandoffCall(req *handoffpb.HandoffRequest, contentType, correlation string, maxPayload int) *Error {
	if perr := ValidateHandoffRequest(req, contentType); perr != nil {
		return perr
	}
	if maxPayload > 0 && len(req.GetContextSnapshot()) > maxPayload {
		return Errorf(commonpb.ErrorCode_OVERSIZE_PAYLOAD, "context_snapshot is %d bytes; this server's limit is %d (SW4RM_MAX_PAYLOAD_BYTES)", len(req.GetContextSnapshot()), maxPayload)
	}
	if len(correlation) > 256 {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s is longer than 256 bytes", wire.CorrelationIDKey)
	}
	return nil
}

// ValidateHandoffResponse checks an AcceptHandoff or RejectHandoff: a request_id, an
// accepting_agent, and for a REDIRECT rejection an agent ID to redirect to, or none at all.
// A blank redirect_to_agent_id is not refused here: the rejection stands and the handoff
// ends at once with validation_error (ValidateRedirect), where a garbled ID is sent back to
// the target to correct.
func ValidateHandoffResponse(req *handoffpb.HandoffResponse) *Error {
	if req.GetRequestId() == "" {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "request_id is required")
	}
	if perr := ValidateAgentID(req.GetAcceptingAgent()); perr != nil {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "accepting_agent: %s", perr.Msg)
	}
	if req.GetRejectionCode() == commonpb.ErrorCode_REDIRECT && strings.TrimSpace(req.GetRedirectToAgentId()) != "" {
		if perr := ValidateAgentID(req.GetRedirectToAgentId()); perr != nil {
			return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "rejection_code REDIRECT: redirect_to_agent_id: %s", perr.Msg)
		}
	}
	return nil
}

// ValidateCompleteHandoff checks a CompleteHandoff: a request_id and, if a status is given,
// COMPLETED — a handoff is rejected with RejectHandoff and cancelled with CancelDelegation.
func ValidateCompleteHandoff(req *handoffpb.CompleteHandoffRequest) *Error {
	if req.GetRequestId() == "" {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "request_id is required")
	}
	switch req.GetStatus() {
	case handoffpb.HandoffStatus_COMPLETED, handoffpb.HandoffStatus_HANDOFF_STATUS_UNSPECIFIED:
		return nil
	}
	return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "status %s cannot be set by CompleteHandoff: only COMPLETED (a handoff is rejected with RejectHandoff and cancelled with CancelDelegation)", req.GetStatus())
}
