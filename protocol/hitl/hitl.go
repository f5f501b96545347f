// Package hitl is the operator ↔ workflow contract of human-in-the-loop (§15): the
// signal and query names, the invocation, decision and outcome payloads, and the helper that
// sends a decision. The CLI, the gRPC frontend and a plain `temporal workflow signal` all
// reach the same signal, DecisionSignal, on the workflow hitl/<invocation_id>.
package hitl

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
)

// Names of the HITL workflow's messages.
const (
	// DecisionSignal carries a Decision.
	DecisionSignal = "hitl-decision"
	// StatusQuery returns a Status.
	StatusQuery = "hitl-status"
	// WorkflowType is the registered name of the workflow that holds one HITL wait.
	WorkflowType = "HitlWait"
)

// WorkflowID is the workflow ID of an invocation: "hitl/<invocation_id>".
func WorkflowID(invocationID string) string { return "hitl/" + invocationID }

// Action is a decision's action (§15.1).
type Action string

// The four actions of §15.1.
const (
	// Approve lets the requested operation proceed.
	Approve Action = "approve"
	// Deny refuses it.
	Deny Action = "deny"
	// Modify lets it proceed with the decision's patch applied.
	Modify Action = "modify"
	// Defer hands the question back to the requester undecided, to ask again later.
	Defer Action = "defer"
)

// ParseAction accepts an action name in any case.
func ParseAction(s string) (Action, error) {
	a := Action(strings.ToLower(strings.TrimSpace(s)))
	switch a {
	case Approve, Deny, Modify, Defer:
		return a, nil
	}
	return "", fmt.Errorf("decision %q is not one of approve, deny, modify, defer", s)
}

// Fallback policies (§15.3, §15.4 hitl_unavailable_policy). The same policy applies when the
// deadline passes and when the HITL component is unavailable.
const (
	// DenyByDefault denies (the safer default).
	DenyByDefault = "DENY_BY_DEFAULT"
	// AutoDecideThreshold approves when the invocation's score reaches its threshold, else
	// denies.
	AutoDecideThreshold = "AUTO_DECIDE_THRESHOLD"
	// ExtendTimeout extends the deadline and asks again, at most MaxExtensions times, then
	// denies.
	ExtendTimeout = "EXTEND_TIMEOUT"
)

// DefaultMaxExtensions is the §15.4 recommended cap on EXTEND_TIMEOUT retries.
const DefaultMaxExtensions = 3

// Fallback configures what happens when no human decides in time.
type Fallback struct {
	// Policy is DenyByDefault, AutoDecideThreshold or ExtendTimeout; empty means the
	// deployment's fallback (Policy.FallbackFor), DenyByDefault unless configured.
	Policy string `json:"policy,omitempty"`
	// Score is the requester's confidence in its suggested action (for example an inference
	// engine's confidence_score), compared with Threshold by AutoDecideThreshold.
	Score float64 `json:"score,omitempty"`
	// Threshold is the auto-approve threshold.
	Threshold float64 `json:"threshold,omitempty"`
	// ExtendBy is each extension's length; zero means the original timeout (§15.4: 1×).
	ExtendBy time.Duration `json:"extend_by,omitempty"`
	// MaxExtensions caps extensions; zero means DefaultMaxExtensions.
	MaxExtensions int `json:"max_extensions,omitempty"`
}

// Subject says what the invocation is about (§15.2 "subject").
type Subject struct {
	// RepoID is the repository concerned.
	RepoID string `json:"repo_id,omitempty"`
	// WorktreeID is the worktree concerned.
	WorktreeID string `json:"worktree_id,omitempty"`
	// TaskID is the task concerned.
	TaskID string `json:"task_id,omitempty"`
	// AgentID is the agent concerned.
	AgentID string `json:"agent_id,omitempty"`
	// NegotiationID is the negotiation concerned.
	NegotiationID string `json:"negotiation_id,omitempty"`
}

// String renders the subject for listings.
func (s Subject) String() string {
	var parts []string
	for _, kv := range [][2]string{{"agent", s.AgentID}, {"task", s.TaskID}, {"negotiation", s.NegotiationID}, {"repo", s.RepoID}, {"worktree", s.WorktreeID}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	return strings.Join(parts, " ")
}

// Context is what an operator needs to decide safely (§15.1): facts, diffs, risk notes,
// prior attempts and the inference engine's metadata when there is any.
type Context struct {
	// Facts are the case facts.
	Facts []string `json:"facts,omitempty"`
	// Diffs are proposed changes, as unified diffs or summaries.
	Diffs []string `json:"diffs,omitempty"`
	// RiskNotes flag risks.
	RiskNotes []string `json:"risk_notes,omitempty"`
	// PriorAttempts describe what was tried before.
	PriorAttempts []string `json:"prior_attempts,omitempty"`
	// Inference holds inference-engine metadata (model, confidence, notes).
	Inference map[string]string `json:"inference,omitempty"`
	// Raw keeps a context the requester sent that is not this JSON shape.
	Raw []byte `json:"raw,omitempty"`
}

// ArgumentsFact begins the fact of a TOOL_PRIVILEGE_ESCALATION invocation that shows the
// call's arguments whole (a cut one says how much it shows instead); a Modify decision of
// such an invocation replaces the arguments with its patch.
const ArgumentsFact = "arguments: "

// Invocation is a HITL_INVOCATION (§15, §15.2).
type Invocation struct {
	// InvocationID identifies it; its workflow is hitl/<invocation_id>.
	InvocationID string `json:"invocation_id"`
	// ReasonType is one of the eight §15 reason types, by enum name.
	ReasonType string `json:"reason_type"`
	// CorrelationID links it to the flow that raised it.
	CorrelationID string `json:"correlation_id,omitempty"`
	// RequestedBy is the workflow or agent that raised it.
	RequestedBy string `json:"requested_by,omitempty"`
	// Subject is what it is about.
	Subject Subject `json:"subject"`
	// Context is what the operator needs to decide.
	Context Context `json:"context"`
	// ProposedActions are the options offered to the operator.
	ProposedActions []string `json:"proposed_actions,omitempty"`
	// SuggestedAction is the requester's recommendation.
	SuggestedAction string `json:"suggested_action,omitempty"`
	// Priority orders invocations for operators (lower is more urgent, as for tasks §7.1).
	Priority int32 `json:"priority"`
	// Timeout is how long to wait for a human before the fallback; zero means the
	// configured default.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Fallback is what happens without a timely decision.
	Fallback Fallback `json:"fallback"`
}

// Validate checks an invocation before it is raised.
func (inv Invocation) Validate() error {
	if inv.InvocationID == "" {
		return fmt.Errorf("invocation_id is required")
	}
	if strings.ContainsAny(inv.InvocationID, " \t\n") || len(inv.InvocationID) > 200 {
		return fmt.Errorf("invocation_id %q must be at most 200 characters without spaces", inv.InvocationID)
	}
	if v, ok := commonpb.HitlReasonType_value[inv.ReasonType]; !ok || v == 0 {
		return fmt.Errorf("reason_type %q is not one of the eight §15 reason types", inv.ReasonType)
	}
	if inv.Timeout < 0 {
		return fmt.Errorf("timeout must not be negative")
	}
	switch inv.Fallback.Policy {
	case "", DenyByDefault, AutoDecideThreshold, ExtendTimeout:
	default:
		return fmt.Errorf("fallback policy %q is not DENY_BY_DEFAULT, AUTO_DECIDE_THRESHOLD or EXTEND_TIMEOUT", inv.Fallback.Policy)
	}
	if inv.Fallback.MaxExtensions < 0 || inv.Fallback.ExtendBy < 0 {
		return fmt.Errorf("fallback extensions must not be negative")
	}
	return nil
}

// Decision is a HITL_DECISION (§15.2), the payload of DecisionSignal.
type Decision struct {
	// InvocationID names the invocation decided.
	InvocationID string `json:"invocation_id"`
	// Decision is the action: approve, deny, modify or defer.
	Decision Action `json:"decision"`
	// Rationale says why; required.
	Rationale string `json:"rationale"`
	// Patch is the modification for Modify (JSON: base64, §15.2 "patch_b64").
	Patch []byte `json:"patch_b64,omitempty"`
	// Operator is who decides.
	Operator string `json:"operator"`
	// Token is the operator's plaintext credential, the form decisions had before they were
	// attested. Deprecated: a signal's input stays in the workflow's history, so a token sent
	// here is a reusable secret stored there. Runs started since attested decisions refuse it;
	// only runs recorded before accept it (see workflows.HitlWait).
	Token string `json:"token,omitempty"`
	// Via records the door: "cli", "web" (the console), "grpc", "signal" (empty means signal) or ViaMessage, a
	// HITL agent's reply on the message plane.
	Via string `json:"via,omitempty"`
	// Attestation proves the decision: a short-lived signature over it by the deployment's
	// decision key (the CLI and gRPC doors, after the frontend authenticated the operator) or
	// by the operator's own key (`sw4rm hitl sign`, for the raw signal door). See Attest.
	Attestation *Attestation `json:"attestation,omitempty"`
}

// Outcome is how an invocation ended: a human's decision or a fallback.
type Outcome struct {
	// InvocationID names the invocation.
	InvocationID string `json:"invocation_id"`
	// Decision is the resulting action.
	Decision Action `json:"decision"`
	// Rationale is the human's, or the fallback's explanation.
	Rationale string `json:"rationale"`
	// Patch is the modification for Modify.
	Patch []byte `json:"patch_b64,omitempty"`
	// DecidedBy is the operator, or "fallback".
	DecidedBy string `json:"decided_by"`
	// AttestedBy names the key whose attestation proved the decision (signing.KeyID), when one
	// did.
	AttestedBy string `json:"attested_by,omitempty"`
	// Via is the door the decision came through, or "fallback".
	Via string `json:"via"`
	// DecidedAt is when it was decided.
	DecidedAt time.Time `json:"decided_at"`
	// Fallback is true when no human decided (§15.1: the outcome records it).
	Fallback bool `json:"fallback"`
	// FallbackPolicy is the policy applied when Fallback is set.
	FallbackPolicy string `json:"fallback_policy,omitempty"`
	// FallbackReason says why the fallback applied: "deadline", "no_hitl_component",
	// "hitl_unavailable", "extensions_exhausted".
	FallbackReason string `json:"fallback_reason,omitempty"`
	// Extensions counts EXTEND_TIMEOUT extensions that happened.
	Extensions int `json:"extensions,omitempty"`
	// HitlUnavailable is set on a fallback when the external HITL component was found
	// unavailable during the wait (§15.4: the decision record says the fallback was due to
	// HITL unavailability), also when EXTEND_TIMEOUT then ran out of extensions.
	HitlUnavailable bool `json:"hitl_unavailable,omitempty"`
}

// Status is the answer to StatusQuery.
type Status struct {
	// Invocation is the invocation.
	Invocation Invocation `json:"invocation"`
	// Deadline is the current deadline (after any extension).
	Deadline time.Time `json:"deadline"`
	// Extensions counts extensions so far.
	Extensions int `json:"extensions"`
	// Outcome is set once decided.
	Outcome *Outcome `json:"outcome,omitempty"`
	// Refused counts decisions that were refused (bad credential, wrong invocation...).
	Refused int `json:"refused"`
}

// Operator is one entry of the operator policy (§15.1, §23: authenticated and authorized).
type Operator struct {
	// Name identifies the operator in audit records.
	Name string `json:"name"`
	// TokenSHA256 is the hex SHA-256 of the operator's token; the token itself is never kept.
	TokenSHA256 string `json:"token_sha256"`
	// Reasons limits the reason types the operator may decide; empty means all.
	Reasons []string `json:"reasons,omitempty"`
	// PublicKeys are the operator's own Ed25519 public keys (SW4RM_HITL_OPERATOR_KEYS): a
	// decision signed by one of them is accepted from the raw signal door.
	PublicKeys []ed25519.PublicKey `json:"public_keys,omitempty"`
}

// Policy is who may decide, loaded by the HITL workflow when it starts and again for each
// attested decision it receives. It holds no secret: token hashes and public keys only, since
// it is recorded in the workflow's history.
type Policy struct {
	// Operators lists the operators.
	Operators []Operator `json:"operators"`
	// External names an external HITL component (a canonical HitlService) if configured.
	External string `json:"external,omitempty"`
	// Agent is the agent_id of the deployment's HITL agent (SW4RM_HITL_AGENT), if one is
	// configured: every invocation is sent to it as a HITL_INVOCATION envelope, and a decision
	// it sends on the message plane (Via ViaMessage), attested by a decision key, counts.
	// Policies recorded in workflow histories before it existed have none.
	Agent string `json:"agent,omitempty"`
	// DecisionKeys are the public keys of the deployment's decision key, with which frontends
	// attest the decisions of operators they authenticated (SW4RM_HITL_DECISION_KEY_FILE).
	DecisionKeys []ed25519.PublicKey `json:"decision_keys,omitempty"`
	// Fallback is the deployment's fallback (§15.3, §15.4 hitl_unavailable_policy:
	// SW4RM_HITL_UNAVAILABLE_POLICY and its companions), applied to invocations that set no
	// policy of their own (FallbackFor); nil means DENY_BY_DEFAULT. Policies recorded in
	// workflow histories before it existed have none.
	Fallback *Fallback `json:"fallback,omitempty"`
}

// HashToken returns the hex SHA-256 of a token, the form kept in policies.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// AuthorizeToken checks a legacy decision's token and the operator's right to decide this
// reason type. It is deterministic; the workflow runs it only for runs recorded before
// decisions were attested (see Authorize).
func (p Policy) AuthorizeToken(d Decision, reasonType string) error {
	if d.Operator == "" || d.Token == "" {
		return fmt.Errorf("permission_denied: an operator and a token are required")
	}
	idx := slices.IndexFunc(p.Operators, func(o Operator) bool { return o.Name == d.Operator })
	if idx < 0 {
		return fmt.Errorf("permission_denied: unknown operator %q", d.Operator)
	}
	op := p.Operators[idx]
	if subtle.ConstantTimeCompare([]byte(HashToken(d.Token)), []byte(op.TokenSHA256)) != 1 {
		return fmt.Errorf("permission_denied: invalid token for operator %q", d.Operator)
	}
	if len(op.Reasons) > 0 && !slices.Contains(op.Reasons, reasonType) {
		return fmt.Errorf("permission_denied: operator %q may not decide %s invocations", d.Operator, reasonType)
	}
	return nil
}

// Check validates a decision's shape (not its credential).
func (d Decision) Check() error {
	if d.InvocationID == "" {
		return fmt.Errorf("validation_error: invocation_id is required")
	}
	if _, err := ParseAction(string(d.Decision)); err != nil {
		return fmt.Errorf("validation_error: %v", err)
	}
	if strings.TrimSpace(d.Rationale) == "" {
		return fmt.Errorf("validation_error: a rationale is required (§15.1)")
	}
	if d.Decision == Modify && len(d.Patch) == 0 {
		return fmt.Errorf("validation_error: modify needs a patch")
	}
	return nil
}

// ParseOperators reads the operator policy from its configuration form
// (SW4RM_HITL_OPERATORS): comma-separated "name=token" entries, each optionally followed by
// ":REASON|REASON" to restrict the reason types the operator may decide, e.g.
// "alice=s3cret,bob=t0ken:CONFLICT|TASK_ESCALATION". Tokens are hashed at once.
func ParseOperators(spec string) ([]Operator, error) {
	var ops []Operator
	for _, entry := range strings.Split(spec, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, rest, ok := strings.Cut(entry, "=")
		if !ok || strings.TrimSpace(name) == "" || rest == "" {
			return nil, fmt.Errorf("operator entry %q: want name=token[:REASON|REASON]", redact(entry))
		}
		token, reasons, _ := strings.Cut(rest, ":")
		if len(token) < 4 {
			return nil, fmt.Errorf("operator %q: token must have at least 4 characters", name)
		}
		op := Operator{Name: strings.TrimSpace(name), TokenSHA256: HashToken(token)}
		if reasons != "" {
			for _, r := range strings.Split(reasons, "|") {
				r = strings.ToUpper(strings.TrimSpace(r))
				if v, ok := commonpb.HitlReasonType_value[r]; !ok || v == 0 {
					return nil, fmt.Errorf("operator %q: %q is not a §15 reason type", name, r)
				}
				op.Reasons = append(op.Reasons, r)
			}
		}
		if slices.ContainsFunc(ops, func(o Operator) bool { return o.Name == op.Name }) {
			return nil, fmt.Errorf("operator %q is listed twice", op.Name)
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// OperatorForToken finds the operator a token belongs to.
func (p Policy) OperatorForToken(token string) (Operator, bool) {
	h := HashToken(token)
	for _, o := range p.Operators {
		if subtle.ConstantTimeCompare([]byte(h), []byte(o.TokenSHA256)) == 1 {
			return o, true
		}
	}
	return Operator{}, false
}

// redact hides a token in an error message.
func redact(entry string) string {
	if name, _, ok := strings.Cut(entry, "="); ok {
		return name + "=…"
	}
	return "…"
}
