// Package acl is SW4RM's access-control evaluator (§6.3): rules, loaded from a file, that
// constrain per agent which message types it may send and receive, which tools it may call,
// and which resource scopes it may touch. One evaluator serves the frontend and the
// workflows, so a decision is the same wherever it is made.
//
// A Policy is plain data: it round-trips through encoding/json unchanged, so a workflow can
// carry it in its input, and Decide is deterministic and does no I/O — it reads nothing but
// the policy and the request, never the clock, the environment or a map's iteration order.
//
// Evaluation order: the rules are tried in file order; the first rule that applies to the
// agent (its agents and capabilities patterns) and covers the request (the list for the
// request's action contains a matching entry) decides, allowing or denying by its effect.
// A request no rule covers gets the policy's default, which is deny unless the file says
// "default": "allow". A nil *Policy — no ACL configured — allows everything.
package acl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
)

// FormatVersion is the version of the file format this package reads.
const FormatVersion = 1

// maxPattern bounds a pattern's length, which keeps every match cheap.
const maxPattern = 1024

// Effect is what a rule does to the requests it covers, and what the default does to the
// rest.
type Effect string

// The two effects.
const (
	// Allow lets the request through.
	Allow Effect = "allow"
	// Deny refuses it.
	Deny Effect = "deny"
)

// Action is the kind of access a request asks for.
type Action string

// The actions of §6.3.
const (
	// SendMessage: Agent sends a message of MessageType (message type authorization).
	SendMessage Action = "send_message"
	// ReceiveMessage: Agent receives a message of MessageType (message type authorization).
	ReceiveMessage Action = "receive_message"
	// CallTool: Agent invokes Tool of Provider (tool access control).
	CallTool Action = "call_tool"
	// AccessScope: Agent accesses or modifies the resource Scope (resource scope
	// authorization), named like Scope builds it.
	AccessScope Action = "access_scope"
)

// Policy is a parsed ACL file. Its fields are the file's, so encoding/json round-trips it;
// build one with Parse or Load, which validate it.
type Policy struct {
	// Version is the file format's version, FormatVersion.
	Version int `json:"version"`
	// Default decides the requests no rule covers: Deny (the default) or Allow.
	Default Effect `json:"default"`
	// Rules are tried in order; the first that applies and covers a request decides it.
	Rules []Rule `json:"rules"`
}

// Rule allows or denies, to the agents it applies to, the message types, tools and scopes it
// lists. Patterns are globs: '*' matches any run of characters (including none, and '/'),
// '?' exactly one character, and every other character itself.
type Rule struct {
	// Name labels the rule in decisions and audit records; optional.
	Name string `json:"name,omitempty"`
	// Effect is Allow or Deny.
	Effect Effect `json:"effect"`
	// Agents are patterns on the agent id; the rule applies to an agent matching any. Empty
	// means any agent (then Capabilities must be set).
	Agents []string `json:"agents,omitempty"`
	// Capabilities are patterns on the capabilities the agent registered with (§14); the
	// rule applies to an agent holding one that matches any. With Agents set, both must
	// match.
	Capabilities []string `json:"capabilities,omitempty"`
	// Send are the message types (sw4rm.common.MessageType names, or "*") the rule covers
	// for SendMessage.
	Send []string `json:"send,omitempty"`
	// Receive are the message types the rule covers for ReceiveMessage.
	Receive []string `json:"receive,omitempty"`
	// Tools are patterns on the tool name the rule covers for CallTool.
	Tools []string `json:"tools,omitempty"`
	// Providers, when set, narrow Tools to tools of a provider matching one of these
	// patterns.
	Providers []string `json:"providers,omitempty"`
	// Scopes are patterns on the resource scope the rule covers for AccessScope, e.g.
	// "repo:core/worktree:*", "dag:build-*", "negotiation:*" (see Scope, DAGScope,
	// NegotiationScope, ToolCallScope).
	Scopes []string `json:"scopes,omitempty"`
	// MaxExecutionPolicy, on an allow rule with Tools, is the strongest execution policy
	// (§18.5.2, §18.5.3) the rule allows a call: a CallTool request that asks more is denied
	// by this rule (Decision.Exceeds). Nil: the rule does not bound the policy.
	MaxExecutionPolicy *ExecutionLimit `json:"max_execution_policy,omitempty"`
}

// ExecutionLimit bounds a tool call's execution policy. An empty field does not bound it.
type ExecutionLimit struct {
	// NetworkPolicy is the widest network policy allowed, one of NetworkPolicies (spelled as
	// §18.5.2 spells it, e.g. "DENY_ALL").
	NetworkPolicy string `json:"network_policy,omitempty"`
	// PrivilegeLevel is the highest privilege level allowed, one of PrivilegeLevels (e.g.
	// "DEFAULT").
	PrivilegeLevel string `json:"privilege_level,omitempty"`
}

// NetworkPolicies are the network policies of §18.5.2 a limit may name, from the narrowest
// to the widest: a limit allows its own and every one before it.
func NetworkPolicies() []string {
	return []string{"DENY_ALL", "EGRESS_RESTRICTED", "EGRESS_UNRESTRICTED", "FULL_ACCESS"}
}

// PrivilegeLevels are the privilege levels of §18.5.3 (and FULL_ACCESS above them) a limit
// may name, from the lowest to the highest.
func PrivilegeLevels() []string {
	return []string{"MINIMAL", "DEFAULT", "ELEVATED", "PRIVILEGED", "FULL_ACCESS"}
}

// rank is name's position in names, or -1 when it is not one of them.
func rank(names []string, name string) int { return slices.Index(names, name) }

// Request is one access to decide.
type Request struct {
	// Agent is the agent id of the caller (for ReceiveMessage, the recipient).
	Agent string `json:"agent"`
	// Capabilities are the agent's registered capabilities.
	Capabilities []string `json:"capabilities,omitempty"`
	// Action is what is asked.
	Action Action `json:"action"`
	// MessageType is the message's type, for SendMessage and ReceiveMessage.
	MessageType commonpb.MessageType `json:"message_type,omitempty"`
	// Tool is the tool's name, for CallTool.
	Tool string `json:"tool,omitempty"`
	// Provider is the tool provider's id, for CallTool; empty when unknown.
	Provider string `json:"provider,omitempty"`
	// Scope is the resource, for AccessScope (see Scope).
	Scope string `json:"scope,omitempty"`
	// NetworkPolicy is the call's effective network policy, for CallTool; empty is
	// "DENY_ALL", the spec's default.
	NetworkPolicy string `json:"network_policy,omitempty"`
	// PrivilegeLevel is the call's effective privilege level, for CallTool; empty is
	// "MINIMAL", the spec's default.
	PrivilegeLevel string `json:"privilege_level,omitempty"`
}

// Decision is the outcome of Decide.
type Decision struct {
	// Allowed says whether the request may proceed.
	Allowed bool `json:"allowed"`
	// Rule is the index (from 0, in file order) of the rule that decided, or -1 when the
	// default (or the absence of a policy) did.
	Rule int `json:"rule"`
	// Reason explains the decision for logs and the audit trail (§6.5).
	Reason string `json:"reason"`
	// Exceeds is set when the rule that decided allows the tool but the call asked a wider
	// execution policy than the rule's MaxExecutionPolicy: then Allowed is false.
	Exceeds bool `json:"exceeds,omitempty"`
}

// RuleName is the name of the rule that made d, "" for the default or an unnamed rule.
func (p *Policy) RuleName(d Decision) string {
	if p == nil || d.Rule < 0 || d.Rule >= len(p.Rules) {
		return ""
	}
	return p.Rules[d.Rule].Name
}

// Scope names the resource scope of a worktree, "repo:<repo_id>/worktree:<worktree_id>", or
// of a whole repository, "repo:<repo_id>", when worktreeID is empty. Callers name scopes
// through it so that the patterns of a file match the same strings everywhere.
func Scope(repoID, worktreeID string) string {
	if worktreeID == "" {
		return "repo:" + repoID
	}
	return "repo:" + repoID + "/worktree:" + worktreeID
}

// DAGScope names the resource scope of a DAG workflow (§17.7), its definitions and runs:
// "dag:<workflow_id>".
func DAGScope(workflowID string) string { return "dag:" + workflowID }

// NegotiationScope names the resource scope of a negotiation (§17) or negotiation room:
// "negotiation:<negotiation_id>".
func NegotiationScope(negotiationID string) string { return "negotiation:" + negotiationID }

// ToolCallScope names the resource scope of one tool call (§18), its frames: "tool_call:<call_id>".
func ToolCallScope(callID string) string { return "tool_call:" + callID }

// Load reads and parses the ACL file at path.
func Load(path string) (*Policy, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("acl: %w", err)
	}
	p, err := Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Parse reads an ACL document: one JSON object, no unknown fields, nothing after it. It
// validates the policy and fills in what the file may omit (version 1, default deny), so
// that the result marshals back to a document Parse reads into the same policy.
func Parse(data []byte) (*Policy, error) {
	if trimmed := bytes.TrimSpace(data); len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, errors.New("acl: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Policy
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("acl: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("acl: unexpected data after the JSON object")
	}
	if p.Version == 0 {
		p.Version = FormatVersion
	}
	if p.Default == "" {
		p.Default = Deny
	}
	for i := range p.Rules {
		p.Rules[i].normalize()
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// normalize makes empty lists nil, so that a policy and its JSON round trip are equal.
func (rule *Rule) normalize() {
	for _, l := range []*[]string{&rule.Agents, &rule.Capabilities, &rule.Send, &rule.Receive, &rule.Tools, &rule.Providers, &rule.Scopes} {
		if len(*l) == 0 {
			*l = nil
		}
	}
}

// Validate checks a policy built or decoded without Parse: the version, the effects, that
// every rule applies to someone and covers something, the message type names and the
// patterns.
func (p *Policy) Validate() error {
	if p.Version != FormatVersion {
		return fmt.Errorf("acl: version %d: this server reads version %d", p.Version, FormatVersion)
	}
	if p.Default != Allow && p.Default != Deny {
		return fmt.Errorf("acl: default %q: want %q or %q", p.Default, Allow, Deny)
	}
	for i, r := range p.Rules {
		if err := r.validate(); err != nil {
			return fmt.Errorf("acl: rule %d%s: %w", i, quotedName(r.Name), err)
		}
	}
	return nil
}

func (rule Rule) validate() error {
	if rule.Effect != Allow && rule.Effect != Deny {
		return fmt.Errorf("effect %q: want %q or %q", rule.Effect, Allow, Deny)
	}
	if len(rule.Agents) == 0 && len(rule.Capabilities) == 0 {
		return errors.New(`names no agents and no capabilities; use "agents": ["*"] for every agent`)
	}
	if len(rule.Send) == 0 && len(rule.Receive) == 0 && len(rule.Tools) == 0 && len(rule.Scopes) == 0 {
		return errors.New("covers nothing: give send, receive, tools or scopes")
	}
	if len(rule.Providers) > 0 && len(rule.Tools) == 0 {
		return errors.New("providers without tools")
	}
	if err := rule.MaxExecutionPolicy.validate(rule); err != nil {
		return fmt.Errorf("max_execution_policy: %w", err)
	}
	for _, l := range []struct {
		field    string
		patterns []string
	}{{"agents", rule.Agents}, {"capabilities", rule.Capabilities}, {"tools", rule.Tools}, {"providers", rule.Providers}, {"scopes", rule.Scopes}} {
		for _, pat := range l.patterns {
			if pat == "" || len(pat) > maxPattern || !utf8.ValidString(pat) {
				return fmt.Errorf("%s: %q: want a non-empty UTF-8 pattern of at most %d bytes", l.field, pat, maxPattern)
			}
		}
	}
	for _, l := range []struct {
		field string
		names []string
	}{{"send", rule.Send}, {"receive", rule.Receive}} {
		for _, name := range l.names {
			if v, ok := commonpb.MessageType_value[name]; name != "*" && (!ok || v == int32(commonpb.MessageType_MESSAGE_TYPE_UNSPECIFIED)) {
				return fmt.Errorf("%s: %q is not a message type; want \"*\" or one of %s", l.field, name, messageTypeNames())
			}
		}
	}
	return nil
}

func (l *ExecutionLimit) validate(rule Rule) error {
	switch {
	case l == nil:
		return nil
	case len(rule.Tools) == 0:
		return errors.New("without tools: it bounds tool calls")
	case rule.Effect != Allow:
		return errors.New("on a deny rule: it bounds what an allow rule allows")
	case l.NetworkPolicy == "" && l.PrivilegeLevel == "":
		return errors.New("bounds nothing: give network_policy, privilege_level or both")
	case l.NetworkPolicy != "" && rank(NetworkPolicies(), l.NetworkPolicy) < 0:
		return fmt.Errorf("network_policy %q: want one of %s", l.NetworkPolicy, strings.Join(NetworkPolicies(), ", "))
	case l.PrivilegeLevel != "" && rank(PrivilegeLevels(), l.PrivilegeLevel) < 0:
		return fmt.Errorf("privilege_level %q: want one of %s", l.PrivilegeLevel, strings.Join(PrivilegeLevels(), ", "))
	}
	return nil
}

// exceeded says how r asks more than the limit allows, "" when it does not. A value r names
// that is not a known policy counts as exceeding: the evaluator fails closed.
func (l *ExecutionLimit) exceeded(r Request) string {
	if l == nil {
		return ""
	}
	network, privilege := r.NetworkPolicy, r.PrivilegeLevel
	if network == "" {
		network = NetworkPolicies()[0]
	}
	if privilege == "" {
		privilege = PrivilegeLevels()[0]
	}
	var over []string
	if l.NetworkPolicy != "" {
		if n := rank(NetworkPolicies(), network); n < 0 || n > rank(NetworkPolicies(), l.NetworkPolicy) {
			over = append(over, fmt.Sprintf("network_policy %s (at most %s)", network, l.NetworkPolicy))
		}
	}
	if l.PrivilegeLevel != "" {
		if n := rank(PrivilegeLevels(), privilege); n < 0 || n > rank(PrivilegeLevels(), l.PrivilegeLevel) {
			over = append(over, fmt.Sprintf("privilege_level %s (at most %s)", privilege, l.PrivilegeLevel))
		}
	}
	return strings.Join(over, " and ")
}

// messageTypeNames lists the defined message types in enum order.
func messageTypeNames() string {
	var names []string
	for v := int32(1); ; v++ {
		name, ok := commonpb.MessageType_name[v]
		if !ok {
			break
		}
		names = append(names, name)
	}
	return strings.Join(names, ", ")
}

// Decide decides r. A nil policy allows everything; an unknown action is denied.
func (p *Policy) Decide(r Request) Decision {
	if p == nil {
		return Decision{Allowed: true, Rule: -1, Reason: "no ACL configured"}
	}
	what, ok := r.describe()
	if !ok {
		return Decision{Allowed: false, Rule: -1, Reason: fmt.Sprintf("unknown action %q", r.Action)}
	}
	for i, rule := range p.Rules {
		if rule.appliesTo(r) && rule.covers(r) {
			// An effect other than allow (possible only in a policy decoded without
			// Validate) denies: the evaluator fails closed.
			allowed := rule.Effect == Allow
			if over := rule.MaxExecutionPolicy.exceeded(r); allowed && r.Action == CallTool && over != "" {
				return Decision{Allowed: false, Rule: i, Exceeds: true,
					Reason: fmt.Sprintf("rule %d%s allows %s %s but not with %s", i, quotedName(rule.Name), r.Agent, what, over)}
			}
			return Decision{Allowed: allowed, Rule: i, Reason: fmt.Sprintf("rule %d%s %s %s %s", i, quotedName(rule.Name), verb(allowed), r.Agent, what)}
		}
	}
	allowed := p.Default == Allow
	return Decision{Allowed: allowed, Rule: -1, Reason: fmt.Sprintf("no rule covers %s %s: default %s", r.Agent, what, verb(allowed))}
}

func verb(allowed bool) string {
	if allowed {
		return "allows"
	}
	return "denies"
}

func quotedName(name string) string {
	if name == "" {
		return ""
	}
	return " " + strconv.Quote(name)
}

// describe says what r asks for, for reasons; false for an unknown action.
func (r Request) describe() (string, bool) {
	switch r.Action {
	case SendMessage:
		return "sending " + messageTypeName(r.MessageType), true
	case ReceiveMessage:
		return "receiving " + messageTypeName(r.MessageType), true
	case CallTool:
		if r.Provider != "" {
			return fmt.Sprintf("calling tool %q of provider %q", r.Tool, r.Provider), true
		}
		return fmt.Sprintf("calling tool %q", r.Tool), true
	case AccessScope:
		return fmt.Sprintf("accessing scope %q", r.Scope), true
	}
	return "", false
}

func messageTypeName(t commonpb.MessageType) string {
	if name, ok := commonpb.MessageType_name[int32(t)]; ok {
		return name
	}
	return strconv.Itoa(int(t))
}

// appliesTo reports whether r's agent is one the rule speaks of.
func (rule Rule) appliesTo(r Request) bool {
	if len(rule.Agents) > 0 && !matchAny(rule.Agents, r.Agent) {
		return false
	}
	if len(rule.Capabilities) > 0 && !slices.ContainsFunc(r.Capabilities, func(c string) bool { return matchAny(rule.Capabilities, c) }) {
		return false
	}
	// validate refuses a rule with neither list; one decoded without it applies to no one.
	return len(rule.Agents) > 0 || len(rule.Capabilities) > 0
}

// covers reports whether the rule's list for r's action contains a match.
func (rule Rule) covers(r Request) bool {
	switch r.Action {
	case SendMessage:
		return coversType(rule.Send, r.MessageType)
	case ReceiveMessage:
		return coversType(rule.Receive, r.MessageType)
	case CallTool:
		return matchAny(rule.Tools, r.Tool) && (len(rule.Providers) == 0 || matchAny(rule.Providers, r.Provider))
	case AccessScope:
		return matchAny(rule.Scopes, r.Scope)
	}
	return false
}

func coversType(names []string, t commonpb.MessageType) bool {
	name := messageTypeName(t)
	return slices.ContainsFunc(names, func(n string) bool { return n == "*" || n == name })
}

func matchAny(patterns []string, s string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return Match(p, s) })
}

// Match reports whether s matches the glob pattern: '*' matches any run of characters
// (including none, and '/'), '?' exactly one character (a UTF-8 rune), and every other
// character itself. It runs in O(len(pattern)·len(s)) time at worst and never fails.
func Match(pattern, s string) bool {
	// The classic star-backtracking matcher: on a mismatch, let the last '*' swallow one
	// more character of s and retry from just after it. Only the last '*' needs
	// remembering, because what an earlier star matched can never help a later mismatch.
	px, sx := 0, 0
	starPx, starSx := -1, 0
	for px < len(pattern) || sx < len(s) {
		if px < len(pattern) {
			switch c := pattern[px]; c {
			case '*':
				starPx, starSx = px, sx
				px++
				continue
			case '?':
				if sx < len(s) {
					_, n := utf8.DecodeRuneInString(s[sx:])
					px++
					sx += n
					continue
				}
			default:
				if sx < len(s) && s[sx] == c {
					px++
					sx++
					continue
				}
			}
		}
		if starPx >= 0 && starSx < len(s) {
			// Advance by a whole rune, so that a following '?' never sees half of one.
			_, n := utf8.DecodeRuneInString(s[starSx:])
			starSx += n
			px, sx = starPx+1, starSx
			continue
		}
		return false
	}
	return true
}
