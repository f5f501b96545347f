package acl_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/acl"
)

func mustParse(t testing.TB, doc string) *acl.Policy {
	t.Helper()
	p, err := acl.Parse([]byte(doc))
	require.NoError(t, err, doc)
	return p
}

func send(agent string, mt commonpb.MessageType, caps ...string) acl.Request {
	return acl.Request{Agent: agent, Capabilities: caps, Action: acl.SendMessage, MessageType: mt}
}

func receive(agent string, mt commonpb.MessageType) acl.Request {
	return acl.Request{Agent: agent, Action: acl.ReceiveMessage, MessageType: mt}
}

func tool(agent, name, provider string) acl.Request {
	return acl.Request{Agent: agent, Action: acl.CallTool, Tool: name, Provider: provider}
}

func scope(agent, s string) acl.Request {
	return acl.Request{Agent: agent, Action: acl.AccessScope, Scope: s}
}

const (
	control  = commonpb.MessageType_CONTROL
	data     = commonpb.MessageType_DATA
	negotiat = commonpb.MessageType_NEGOTIATION
	toolCall = commonpb.MessageType_TOOL_CALL
)

// TestNilPolicyAllowsEverything: no ACL configured means no constraint.
func TestNilPolicyAllowsEverything(t *testing.T) {
	var p *acl.Policy
	for _, r := range []acl.Request{send("a", control), receive("a", data), tool("a", "rm", ""), scope("a", "repo:x"), {Action: "bogus"}} {
		d := p.Decide(r)
		assert.True(t, d.Allowed, "%+v", r)
		assert.Equal(t, -1, d.Rule)
	}
}

// TestDecide: the evaluation order and every dimension of a rule, one row per behaviour.
func TestDecide(t *testing.T) {
	tests := []struct {
		name    string
		policy  string
		request acl.Request
		allowed bool
		rule    int
	}{
		{"default is deny when the file says nothing", `{"rules": []}`, send("a", data), false, -1},
		{"explicit default deny", `{"default": "deny", "rules": []}`, send("a", data), false, -1},
		{"explicit default allow", `{"default": "allow", "rules": []}`, send("a", data), true, -1},
		{"default allow, deny rule decides", `{"default": "allow", "rules": [{"effect": "deny", "agents": ["a"], "send": ["DATA"]}]}`, send("a", data), false, 0},
		{"exact agent id", `{"rules": [{"effect": "allow", "agents": ["planner-1"], "send": ["DATA"]}]}`, send("planner-1", data), true, 0},
		{"exact agent id is not a prefix", `{"rules": [{"effect": "allow", "agents": ["planner-1"], "send": ["DATA"]}]}`, send("planner-10", data), false, -1},
		{"agent glob", `{"rules": [{"effect": "allow", "agents": ["planner-*"], "send": ["DATA"]}]}`, send("planner-7", data), true, 0},
		{"agent glob misses", `{"rules": [{"effect": "allow", "agents": ["planner-*"], "send": ["DATA"]}]}`, send("coder-7", data), false, -1},
		{"any of several agent patterns", `{"rules": [{"effect": "allow", "agents": ["x", "coder-?"], "send": ["DATA"]}]}`, send("coder-7", data), true, 0},
		{"capability", `{"rules": [{"effect": "allow", "capabilities": ["review"], "send": ["NEGOTIATION"]}]}`, send("anyone", negotiat, "code", "review"), true, 0},
		{"capability missing", `{"rules": [{"effect": "allow", "capabilities": ["review"], "send": ["NEGOTIATION"]}]}`, send("anyone", negotiat, "code"), false, -1},
		{"capability glob", `{"rules": [{"effect": "allow", "capabilities": ["lang.*"], "send": ["DATA"]}]}`, send("x", data, "lang.go"), true, 0},
		{"agents and capabilities both required: both hold", `{"rules": [{"effect": "allow", "agents": ["critic-*"], "capabilities": ["review"], "send": ["NEGOTIATION"]}]}`, send("critic-1", negotiat, "review"), true, 0},
		{"agents and capabilities both required: id only", `{"rules": [{"effect": "allow", "agents": ["critic-*"], "capabilities": ["review"], "send": ["NEGOTIATION"]}]}`, send("critic-1", negotiat), false, -1},
		{"agents and capabilities both required: capability only", `{"rules": [{"effect": "allow", "agents": ["critic-*"], "capabilities": ["review"], "send": ["NEGOTIATION"]}]}`, send("coder-1", negotiat, "review"), false, -1},
		{"first matching rule decides: deny first", `{"rules": [{"effect": "deny", "agents": ["*"], "send": ["CONTROL"]}, {"effect": "allow", "agents": ["admin"], "send": ["*"]}]}`, send("admin", control), false, 0},
		{"first matching rule decides: allow first", `{"rules": [{"effect": "allow", "agents": ["admin"], "send": ["*"]}, {"effect": "deny", "agents": ["*"], "send": ["CONTROL"]}]}`, send("admin", control), true, 0},
		{"a rule for another agent is skipped", `{"rules": [{"effect": "allow", "agents": ["admin"], "send": ["*"]}, {"effect": "deny", "agents": ["*"], "send": ["CONTROL"]}]}`, send("bob", control), false, 1},
		{"a rule that does not list the action is skipped", `{"rules": [{"effect": "deny", "agents": ["*"], "receive": ["DATA"]}, {"effect": "allow", "agents": ["*"], "send": ["DATA"]}]}`, send("a", data), true, 1},
		{"a rule that does not list the type is skipped", `{"rules": [{"effect": "deny", "agents": ["*"], "send": ["CONTROL"]}, {"effect": "allow", "agents": ["*"], "send": ["*"]}]}`, send("a", data), true, 1},
		{"send does not grant receive", `{"rules": [{"effect": "allow", "agents": ["*"], "send": ["DATA"]}]}`, receive("a", data), false, -1},
		{"receive does not grant send", `{"rules": [{"effect": "allow", "agents": ["*"], "receive": ["DATA"]}]}`, send("a", data), false, -1},
		{"receive", `{"rules": [{"effect": "allow", "agents": ["*"], "receive": ["DATA"]}]}`, receive("a", data), true, 0},
		{"star message type", `{"rules": [{"effect": "allow", "agents": ["*"], "send": ["*"]}]}`, send("a", commonpb.MessageType_TOOL_ERROR), true, 0},
		{"star message type covers unspecified", `{"rules": [{"effect": "allow", "agents": ["*"], "send": ["*"]}]}`, send("a", commonpb.MessageType_MESSAGE_TYPE_UNSPECIFIED), true, 0},
		{"named type does not cover unspecified", `{"rules": [{"effect": "allow", "agents": ["*"], "send": ["DATA"]}]}`, send("a", commonpb.MessageType_MESSAGE_TYPE_UNSPECIFIED), false, -1},
		{"undefined type number", `{"rules": [{"effect": "allow", "agents": ["*"], "send": ["DATA"]}]}`, send("a", commonpb.MessageType(99)), false, -1},
		{"tool glob", `{"rules": [{"effect": "allow", "agents": ["*"], "tools": ["git.*"]}]}`, tool("a", "git.commit", "gh"), true, 0},
		{"tool glob misses", `{"rules": [{"effect": "allow", "agents": ["*"], "tools": ["git.*"]}]}`, tool("a", "shell.exec", "gh"), false, -1},
		{"tool of a listed provider", `{"rules": [{"effect": "allow", "agents": ["*"], "tools": ["deploy"], "providers": ["staging-*"]}]}`, tool("a", "deploy", "staging-eu"), true, 0},
		{"tool of another provider", `{"rules": [{"effect": "allow", "agents": ["*"], "tools": ["deploy"], "providers": ["staging-*"]}]}`, tool("a", "deploy", "prod-eu"), false, -1},
		{"tool of an unknown provider when providers are listed", `{"rules": [{"effect": "allow", "agents": ["*"], "tools": ["deploy"], "providers": ["staging-*"]}]}`, tool("a", "deploy", ""), false, -1},
		{"providers constrain only with a match; deny then allow", `{"rules": [{"effect": "deny", "agents": ["*"], "tools": ["deploy"], "providers": ["prod-*"]}, {"effect": "allow", "agents": ["*"], "tools": ["*"]}]}`, tool("a", "deploy", "staging"), true, 1},
		{"scope glob", `{"rules": [{"effect": "allow", "agents": ["*"], "scopes": ["repo:core/worktree:*"]}]}`, scope("a", acl.Scope("core", "wt-1")), true, 0},
		{"scope glob does not cover the repo itself", `{"rules": [{"effect": "allow", "agents": ["*"], "scopes": ["repo:core/worktree:*"]}]}`, scope("a", acl.Scope("core", "")), false, -1},
		{"scope glob does not cover a sibling repo", `{"rules": [{"effect": "allow", "agents": ["*"], "scopes": ["repo:core/worktree:*"]}]}`, scope("a", acl.Scope("core2", "wt")), false, -1},
		{"star crosses slashes", `{"rules": [{"effect": "allow", "agents": ["*"], "scopes": ["repo:*"]}]}`, scope("a", acl.Scope("core", "wt-1")), true, 0},
		{"one rule, several actions: tools", `{"rules": [{"effect": "allow", "agents": ["coder-*"], "send": ["TOOL_CALL"], "tools": ["git.*"]}]}`, tool("coder-1", "git.push", ""), true, 0},
		{"one rule, several actions: send", `{"rules": [{"effect": "allow", "agents": ["coder-*"], "send": ["TOOL_CALL"], "tools": ["git.*"]}]}`, send("coder-1", toolCall), true, 0},
		{"unknown action is denied even with default allow", `{"default": "allow", "rules": []}`, acl.Request{Agent: "a", Action: "delete_everything"}, false, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustParse(t, tc.policy)
			d := p.Decide(tc.request)
			assert.Equal(t, tc.allowed, d.Allowed, d.Reason)
			assert.Equal(t, tc.rule, d.Rule, d.Reason)
			assert.NotEmpty(t, d.Reason)
			// Deterministic: the same question gets the same answer, and so does the policy
			// after a trip through JSON (a workflow's input).
			assert.Equal(t, d, p.Decide(tc.request))
			assert.Equal(t, d, roundTrip(t, p).Decide(tc.request))
		})
	}
}

// TestReasons: a decision names the rule (index and name) or the default, the agent and the
// request, for the audit trail (§6.5).
func TestReasons(t *testing.T) {
	p := mustParse(t, `{"rules": [{"name": "no control", "effect": "deny", "agents": ["*"], "send": ["CONTROL"]}, {"effect": "allow", "agents": ["*"], "tools": ["*"]}]}`)
	assert.Equal(t, `rule 0 "no control" denies planner-1 sending CONTROL`, p.Decide(send("planner-1", control)).Reason)
	assert.Equal(t, `rule 1 allows a calling tool "git.push" of provider "gh"`, p.Decide(tool("a", "git.push", "gh")).Reason)
	assert.Equal(t, `no rule covers a receiving DATA: default denies`, p.Decide(receive("a", data)).Reason)
	assert.Equal(t, `no rule covers a accessing scope "repo:x": default denies`, p.Decide(scope("a", "repo:x")).Reason)
	assert.Equal(t, `unknown action "bogus"`, p.Decide(acl.Request{Agent: "a", Action: "bogus"}).Reason)
}

// TestParseErrors: a bad file is refused with a message naming what is wrong.
func TestParseErrors(t *testing.T) {
	tests := []struct{ doc, want string }{
		{``, "want a JSON object"},
		{`null`, "want a JSON object"},
		{`[]`, "want a JSON object"},
		{`"rules"`, "want a JSON object"},
		{`{`, "unexpected EOF"},
		{`{"rules": []} {}`, "unexpected data after the JSON object"},
		{`{"rules": []} x`, "unexpected data after the JSON object"},
		{`{"rule": []}`, `unknown field "rule"`},
		{`{"rules": [{"effect": "allow", "agents": ["*"], "send": ["DATA"], "sends": ["CONTROL"]}]}`, `unknown field "sends"`},
		{`{"version": 2, "rules": []}`, "version 2"},
		{`{"default": "permit", "rules": []}`, `default "permit"`},
		{`{"rules": [{"agents": ["*"], "send": ["DATA"]}]}`, `rule 0: effect ""`},
		{`{"rules": [{"effect": "Allow", "agents": ["*"], "send": ["DATA"]}]}`, `effect "Allow"`},
		{`{"rules": [{"name": "r", "effect": "allow", "send": ["DATA"]}]}`, `rule 0 "r": names no agents and no capabilities`},
		{`{"rules": [{"effect": "allow", "agents": [], "capabilities": [], "send": ["DATA"]}]}`, "names no agents and no capabilities"},
		{`{"rules": [{"effect": "allow", "agents": ["*"]}]}`, "covers nothing"},
		{`{"rules": [{"effect": "allow", "agents": ["*"], "send": []}]}`, "covers nothing"},
		{`{"rules": [{"effect": "allow", "agents": ["*"], "send": ["DATA"], "providers": ["p"]}]}`, "providers without tools"},
		{`{"rules": [{"effect": "allow", "agents": ["*"], "send": ["data"]}]}`, `send: "data" is not a message type`},
		{`{"rules": [{"effect": "allow", "agents": ["*"], "receive": ["MESSAGE_TYPE_UNSPECIFIED"]}]}`, `receive: "MESSAGE_TYPE_UNSPECIFIED" is not a message type`},
		{`{"rules": [{"effect": "allow", "agents": ["*"], "send": ["DAT*"]}]}`, `"DAT*" is not a message type`},
		{`{"rules": [{"effect": "allow", "agents": [""], "send": ["DATA"]}]}`, `agents: ""`},
		{`{"rules": [{"effect": "allow", "agents": ["*"], "scopes": [""]}]}`, `scopes: ""`},
		{`{"rules": [{"effect": "allow", "agents": ["*"], "tools": ["` + strings.Repeat("x", 1025) + `"]}]}`, "at most 1024 bytes"},
		{`{"rules": [{"effect": "allow", "agents": ["*"], "send": ["DATA"]}, {"effect": "deny", "agents": ["*"]}]}`, "rule 1: covers nothing"},
		{`{"rules": {}}`, "cannot unmarshal"},
	}
	for _, tc := range tests {
		_, err := acl.Parse([]byte(tc.doc))
		if assert.Error(t, err, tc.doc) {
			assert.Contains(t, err.Error(), tc.want, tc.doc)
			assert.True(t, strings.HasPrefix(err.Error(), "acl: "), err.Error())
		}
	}
}

// TestParseFillsDefaults: what a file may omit is filled in, and empty lists are dropped, so
// that the parsed policy is what its JSON says.
func TestParseFillsDefaults(t *testing.T) {
	p := mustParse(t, `{"rules": [{"effect": "allow", "agents": ["*"], "capabilities": [], "send": ["DATA"], "tools": []}]}`)
	assert.Equal(t, &acl.Policy{Version: acl.FormatVersion, Default: acl.Deny, Rules: []acl.Rule{{Effect: acl.Allow, Agents: []string{"*"}, Send: []string{"DATA"}}}}, p)
	assert.NoError(t, p.Validate())
}

// roundTrip sends p through encoding/json the way a workflow's input travels.
func roundTrip(t testing.TB, p *acl.Policy) *acl.Policy {
	t.Helper()
	raw, err := json.Marshal(p)
	require.NoError(t, err)
	var back acl.Policy
	require.NoError(t, json.Unmarshal(raw, &back))
	return &back
}

// TestJSONRoundTrip: a parsed policy survives encoding/json unchanged, and its JSON is a
// document Parse reads back into the same policy.
func TestJSONRoundTrip(t *testing.T) {
	p, err := acl.Load(filepath.Join("..", "..", "examples", "acl.json"))
	require.NoError(t, err)
	assert.Equal(t, p, roundTrip(t, p))
	raw, err := json.Marshal(p)
	require.NoError(t, err)
	again, err := acl.Parse(raw)
	require.NoError(t, err)
	assert.Equal(t, p, again)
}

// TestValidateDecodedPolicy: a policy decoded without Parse is checked by Validate, and even
// unvalidated, Decide fails closed on what Validate would refuse.
func TestValidateDecodedPolicy(t *testing.T) {
	var p acl.Policy
	require.NoError(t, json.Unmarshal([]byte(`{"version": 1, "default": "maybe", "rules": [{"effect": "perhaps", "agents": ["*"], "send": ["*"]}, {"effect": "allow", "send": ["*"]}]}`), &p))
	assert.ErrorContains(t, p.Validate(), `default "maybe"`)
	d := p.Decide(send("a", data))
	assert.False(t, d.Allowed, "an unknown effect must deny")
	assert.Equal(t, 0, d.Rule)
	p.Rules = p.Rules[1:]
	d = p.Decide(send("a", data))
	assert.False(t, d.Allowed, "a rule naming no one applies to no one, and an unknown default denies")
	assert.Equal(t, -1, d.Rule)
	assert.ErrorContains(t, (&acl.Policy{}).Validate(), "version 0")
}

// TestLoad: the file is read and parsed; errors name the file.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	require.NoError(t, os.WriteFile(good, []byte(`{"default": "allow", "rules": []}`), 0o600))
	p, err := acl.Load(good)
	require.NoError(t, err)
	assert.Equal(t, acl.Allow, p.Default)

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"default": "allow", "rulez": []}`), 0o600))
	_, err = acl.Load(bad)
	assert.ErrorContains(t, err, bad+`: acl: json: unknown field "rulez"`)

	_, err = acl.Load(filepath.Join(dir, "missing.json"))
	assert.ErrorContains(t, err, "missing.json")
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestExample: examples/acl.json, which docs/acl.md walks through, parses and decides what
// its rule names say.
func TestExample(t *testing.T) {
	p, err := acl.Load(filepath.Join("..", "..", "examples", "acl.json"))
	require.NoError(t, err)
	tests := []struct {
		request acl.Request
		allowed bool
	}{
		{send("planner-1", control), false},
		{send("coder-1", commonpb.MessageType_WORKTREE_CONTROL), false},
		{receive("planner-1", control), true},
		{send("coder-1", data), true},
		{send("planner-1", negotiat), true},
		{send("planner-1", commonpb.MessageType_HITL_INVOCATION), true},
		{send("coder-1", negotiat), false},
		{send("critic-1", negotiat, "review"), true},
		{send("critic-1", negotiat), false},
		{send("coder-1", negotiat, "review"), false},
		{send("coder-1", toolCall), true},
		{send("planner-1", toolCall), false},
		{tool("coder-1", "git.commit", "github"), true},
		{tool("coder-1", "shell.exec", "local"), false},
		{acl.Request{Agent: "coder-1", Action: acl.CallTool, Tool: "build.go", Provider: "local", PrivilegeLevel: "DEFAULT"}, true},
		{acl.Request{Agent: "coder-1", Action: acl.CallTool, Tool: "build.go", Provider: "local", NetworkPolicy: "FULL_ACCESS"}, false},
		{tool("release-bot", "deploy.service", "staging-eu"), true},
		{tool("release-bot", "deploy.service", "prod-eu"), false},
		{tool("release-bot", "deploy.service", ""), false},
		{scope("coder-1", acl.Scope("core", "wt-42")), true},
		{scope("coder-1", acl.Scope("core", "")), true}, // binding a worktree needs both scopes
		{scope("coder-1", acl.Scope("secrets", "")), false},
		{scope("coder-1", acl.Scope("secrets", "wt-1")), false},
		{scope("planner-1", acl.Scope("core", "wt-42")), false},
	}
	for _, tc := range tests {
		d := p.Decide(tc.request)
		assert.Equal(t, tc.allowed, d.Allowed, "%+v: %s", tc.request, d.Reason)
	}
}

// TestScope: the scope names patterns match against.
func TestScope(t *testing.T) {
	assert.Equal(t, "repo:core/worktree:wt-1", acl.Scope("core", "wt-1"))
	assert.Equal(t, "repo:core", acl.Scope("core", ""))
}

// TestMatch: the glob language.
func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "anything/at all", true},
		{"", "", true},
		{"", "a", false},
		{"abc", "abc", true},
		{"abc", "abcd", false},
		{"abc", "ab", false},
		{"a*", "a", true},
		{"a*", "abc", true},
		{"a*", "ba", false},
		{"*c", "abc", true},
		{"*c", "abd", false},
		{"a*c", "ac", true},
		{"a*c", "abbbc", true},
		{"a*c", "abbbcd", false},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxcyyb", false},
		{"*a*a*a*", "banana", true},
		{"*a*a*a*a*", "banana", false},
		{"?", "a", true},
		{"?", "", false},
		{"?", "ab", false},
		{"??", "é", false},
		{"?", "é", true},
		{"?", "€", true},
		{"*??", "€", false},
		{"*??", "x€", true},
		{"a?c", "abc", true},
		{"a?c", "a/c", true},
		{"é*", "été", true},
		{"*é", "été", true},
		{"planner-*", "planner-", true},
		{"planner-*", "planner", false},
		{"repo:core/worktree:*", "repo:core/worktree:a/b", true},
		{"PLANNER-*", "planner-1", false},
		{"[a]", "a", false},
		{"[a]", "[a]", true},
		{"\\*", "\\x", true},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, acl.Match(tc.pattern, tc.s), "Match(%q, %q)", tc.pattern, tc.s)
	}
}

// TestMatchIsNotExponential: a pattern made to make naive backtracking explode answers at
// once (the matcher is O(len(pattern)·len(s))).
func TestMatchIsNotExponential(t *testing.T) {
	pattern := strings.Repeat("a*", 100) + "b"
	s := strings.Repeat("a", 1000)
	assert.False(t, acl.Match(pattern, s))
	assert.True(t, acl.Match(pattern, s+"b"))
}
